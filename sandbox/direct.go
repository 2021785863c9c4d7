package sandbox

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode"
)

// The direct path: like GNU make, a command that is certain to be one simple
// command with literal words is exec'd as those words instead of through
// `sh -e -c`, which saves the shell's exec and fork (about 3 ms a command).
// Everything a user can observe stays as under sh: the environment (sh's
// exported PWD included), the PATH search, the exit status and sh's report of
// a signal death. Whatever cannot be started directly (not found, not
// executable, no interpreter, a script without #!) goes to sh after all, so
// its message and exit status are sh's own.

// shellWords are words that a shell might not run as a program from PATH in
// command position: reserved words, and the builtins of POSIX (special and
// regular), dash, bash and busybox ash. Builtins with a program of the same
// name (echo, test, [, printf, kill, pwd, true, false) are here too: their
// behaviour differs in corners (dash's echo takes no -e; pwd is logical).
var shellWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		! { } [[ ]] case do done elif else esac fi for function if in select then time until while
		. : break continue eval exec exit export readonly return set shift times trap unset
		alias bg cd command false fc fg getopts hash jobs kill newgrp pwd read true type ulimit umask unalias wait
		[ echo printf test local chdir
		bind builtin caller compgen complete compopt declare dirs disown enable help history let
		logout login mapfile popd pushd readarray shopt source suspend typeset coproc switch`) {
		m[w] = true
	}
	return m
}()

// plainByte reports whether c means itself to sh wherever it stands in a word:
// ASCII letters and digits and _ - . / , : + = @ %.
func plainByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("_-./,:+=@%", c) >= 0
}

// simpleCommand returns the words of command if `sh -e -c command` is certain
// to run exactly the program named by the first word with the others as its
// arguments, or nil: only plain bytes, spaces and tabs; a first word that is
// neither a shell word (shellWords) nor an assignment (it contains =).
func simpleCommand(command string) []string {
	for i := 0; i < len(command); i++ {
		if c := command[i]; c != ' ' && c != '\t' && !plainByte(c) {
			return nil
		}
	}
	words := strings.FieldsFunc(command, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 || shellWords[words[0]] || strings.Contains(words[0], "=") {
		return nil
	}
	return words
}

// shellName reports whether name is a valid shell variable name; sh drops
// other environment entries.
func shellName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return name != ""
}

// reportLikeSh turns the status of a directly run command into the one
// `sh -e -c` would have had: sh outlives a command killed by a signal, says
// so on stderr (as dash does: strsignal, but not for SIGINT and SIGPIPE)
// and exits with 128+signal.
func reportLikeSh(stderr io.Writer, state *os.ProcessState) (int, syscall.Signal) {
	code, sig := exitStatus(state)
	if sig == 0 {
		return code, 0
	}
	if sig != syscall.SIGINT && sig != syscall.SIGPIPE && stderr != nil {
		msg := []rune(sig.String())
		msg[0] = unicode.ToUpper(msg[0])
		line := string(msg)
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.CoreDump() {
			line += " (core dumped)"
		}
		fmt.Fprintln(stderr, line)
	}
	return code, 0
}

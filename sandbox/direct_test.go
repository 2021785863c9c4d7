package sandbox

import (
	"reflect"
	"testing"
)

func TestSimpleCommand(t *testing.T) {
	direct := map[string][]string{
		"sleep 0.02":                         {"sleep", "0.02"},
		"  cc\t-O2 -DX=1 -o a.out a.c ":      {"cc", "-O2", "-DX=1", "-o", "a.out", "a.c"},
		"./configure --prefix=/usr":          {"./configure", "--prefix=/usr"},
		"/usr/bin/install -m 644 a,b:c@d%e+": {"/usr/bin/install", "-m", "644", "a,b:c@d%e+"},
		"make_2 x=y":                         {"make_2", "x=y"},
	}
	for cmd, want := range direct {
		if got := simpleCommand(cmd); !reflect.DeepEqual(got, want) {
			t.Errorf("simpleCommand(%q) = %q, want %q", cmd, got, want)
		}
	}
	viaSh := []string{"", " \t ", "A=b cmd", "A=b", "=x"}
	// Every byte that is not plain, in a word that is otherwise fine.
	for _, c := range "\"'`$\\*?[]~#;&|<>(){}!^\n\r\x00\x7fé" {
		viaSh = append(viaSh, "cat a"+string(c)+"b")
	}
	// Reserved words and builtins, POSIX's and dash's at least.
	for _, w := range []string{
		".", ":", "[", "[[", "!", "{", "alias", "break", "case", "cd", "command", "continue",
		"echo", "eval", "exec", "exit", "export", "false", "for", "getopts", "hash", "if",
		"kill", "local", "printf", "pwd", "read", "readonly", "return", "set", "shift",
		"source", "test", "times", "trap", "true", "type", "ulimit", "umask", "unset",
		"until", "wait", "while",
	} {
		viaSh = append(viaSh, w+" x")
	}
	for _, cmd := range viaSh {
		if got := simpleCommand(cmd); got != nil {
			t.Errorf("simpleCommand(%q) = %q, want nil (run by sh)", cmd, got)
		}
	}
}

package testscripts

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdCacheServe starts the real `gantry cache serve` on a store in DIR, over HTTP on
// 127.0.0.1 (a port the kernel picks), with writes for the bearer tokens of the
// token file FILE only (reads too), and sets $SERVE to its http:// URL:
// `cacheserve DIR FILE`. It is killed when the script ends.
func cmdCacheServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: cacheserve DIR TOKENFILE")
	}
	bin := scriptProgram(ts, "gantry")
	cmd := exec.Command(bin, "cache", "serve", "--dir", ts.MkAbs(args[0]), "--http", "127.0.0.1:0",
		"--token-file", ts.MkAbs(args[1]))
	cmd.Env = append(os.Environ(), "HOME="+ts.Getenv("HOME"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var log strings.Builder
	cmd.Stderr = &log
	out, err := cmd.StdoutPipe()
	ts.Check(err)
	ts.Check(cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	ts.Defer(func() {
		cmd.Process.Kill()
		<-exited
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if proto, addr, _ := strings.Cut(sc.Text(), " "); proto == "http" {
			ts.Setenv("SERVE", "http://"+addr)
			go io.Copy(io.Discard, out)
			return
		}
	}
	<-exited
	ts.Fatalf("gantry cache serve did not start:\n%s", log.String())
}

// scriptProgram is the path of a program testscript.Main registered (the test
// binary under that name), found on the script's PATH.
func scriptProgram(ts *testscript.TestScript, name string) string {
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	ts.Fatalf("%s is not on the script's PATH", name)
	return ""
}

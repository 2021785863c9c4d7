//go:build linux

package sandbox

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/proctest"
)

// requireBwrap skips the test when bwrap does not work here, or fails it on CI.
func requireBwrap(t *testing.T) {
	t.Helper()
	if ok, why := probeBwrap(); !ok {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap does not work here: %s", why)
		}
		t.Skipf("bwrap does not work here: %s; install bubblewrap (and busybox-static) to run this test, CI=true makes this a failure", why)
	}
}

// busyboxApplets are linked into the test sysroot.
var busyboxApplets = []string{
	"cat", "cp", "echo", "env", "false", "hostname", "id", "kill", "ls", "mkdir",
	"pwd", "rm", "sleep", "test", "touch", "true", "wc",
}

// busyboxSysroot stages a statically linked busybox as a minimal sysroot:
// /bin/busybox, /bin/sh -> /bin/busybox (absolute, resolved inside the
// sysroot), and relative links for the other applets.
func busyboxSysroot(t *testing.T, sysroot string) {
	t.Helper()
	bb := "/bin/busybox"
	if p, err := exec.LookPath("busybox"); err == nil {
		bb = p
	}
	f, err := elf.Open(bb)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no busybox: %v", err)
		}
		t.Skipf("no busybox (%v): install busybox-static to run this test", err)
	}
	static := true
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			static = false
		}
	}
	f.Close()
	if !static {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is dynamically linked: install busybox-static", bb)
		}
		t.Skipf("%s is dynamically linked: install busybox-static to run this test", bb)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sysroot, "bin", "busybox"), string(data), 0o755)
	if err := os.Symlink("/bin/busybox", filepath.Join(sysroot, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(sysroot, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
}

// readyWriter collects output and closes ready when a line "ready" appears.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func newReadyWriter() *readyWriter { return &readyWriter{ready: make(chan struct{})} }

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains("\n"+w.buf.String(), "\nready\n") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitReady waits for the "ready" line, or for the command to end (errc).
func waitReady(t *testing.T, w *readyWriter, errc <-chan error) {
	t.Helper()
	select {
	case <-w.ready:
	case err := <-errc:
		t.Fatalf("command ended before it was ready: %v; output:\n%s", err, w)
	case <-time.After(20 * time.Second):
		t.Fatalf("command not ready after 20s; output:\n%s", w)
	}
}

// allStopped reports whether the group has at least min members, each stopped
// or about to stop (proctest.Proc.Stopped).
func allStopped(pgid, min int) bool {
	members := proctest.Group(pgid)
	return proctest.AllStopped(members) && len(members) >= min
}

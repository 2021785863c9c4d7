package testscripts

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

// haveBwrap reports whether bubblewrap works here and /bin/busybox is a static
// binary that a busybox sysroot (cmdBusybox) can be made of.
func haveBwrap() bool {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return false
	}
	f, err := elf.Open("/bin/busybox")
	if err != nil {
		return false
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return exec.Command(bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true").Run() == nil
}

// cmdBusybox writes a busybox sysroot into DIR: bin/busybox and the tools as links
// to it: `busybox files/sysroot sh cat`. The `[bwrap]` condition says it can.
func cmdBusybox(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: busybox DIR [TOOL...]")
	}
	if !haveBwrap() {
		ts.Fatalf("bwrap does not work here or /bin/busybox is not static: install bubblewrap busybox-static")
	}
	bin := filepath.Join(ts.MkAbs(args[0]), "bin")
	ts.Check(os.MkdirAll(bin, 0o755))
	data, err := os.ReadFile("/bin/busybox")
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755))
	for _, tool := range args[1:] {
		ts.Check(os.Symlink("busybox", filepath.Join(bin, tool)))
	}
}

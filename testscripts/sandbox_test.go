package testscripts

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

// A busybox sysroot for builds under bubblewrap.

// sandboxMissing says why builds under bwrap on a busybox sysroot cannot run here
// ("" when they can): bwrap works, and /bin/busybox is statically linked.
func sandboxMissing() string {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return "bwrap is not installed"
	}
	f, err := elf.Open("/bin/busybox")
	if err != nil {
		return "no /bin/busybox"
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "/bin/busybox is dynamically linked"
		}
	}
	if out, err := exec.Command(bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc",
		"--", "/bin/true").CombinedOutput(); err != nil {
		return fmt.Sprintf("bwrap does not work here (%v: %s)", err, out)
	}
	return ""
}

// cmdBusybox writes DIR/bin/busybox, a copy of the host's static busybox, with each
// TOOL a link to it: `busybox sysroot sh cat mkdir`.
func cmdBusybox(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: busybox DIR [TOOL...]")
	}
	if why := sandboxMissing(); why != "" {
		ts.Fatalf("%s: install bubblewrap busybox-static (CI must run the sandbox tests)", why)
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

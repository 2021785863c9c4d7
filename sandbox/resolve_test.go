package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveHostAndEmptySysroot(t *testing.T) {
	empty := t.TempDir()
	if k, why := Resolve(Host, empty); k != Host || why == "" {
		t.Errorf("Resolve(host) = %q, %q", k, why)
	}
	for _, k := range []Kind{Auto, ""} {
		got, why := Resolve(k, empty)
		if got != Host || !strings.Contains(why, "/bin/sh") {
			t.Errorf("Resolve(%q, empty sysroot) = %q, %q; want host because there is no /bin/sh", k, got, why)
		}
	}
	// A non-executable sh does not count.
	writeFile(t, filepath.Join(empty, "bin", "sh"), "", 0o644)
	if got, why := Resolve(Auto, empty); got != Host {
		t.Errorf("Resolve(auto) with a non-executable sh = %q, %q", got, why)
	}
}

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "usr", "bin", "busybox"), "", 0o755)
	for link, target := range map[string]string{
		"bin":             "usr/bin",          // merged /usr, relative
		"usr/bin/sh":      "/bin/busybox",     // absolute: inside root
		"usr/bin/up":      "../../../../../x", // cannot leave root
		"usr/bin/loop":    "loop",
		"usr/bin/dangles": "/nonexistent",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "x"), "", 0o644)

	if got, err := resolveInRoot(root, "/bin/sh"); err != nil || got != filepath.Join(root, "usr", "bin", "busybox") {
		t.Errorf("resolveInRoot(/bin/sh) = %q, %v", got, err)
	}
	if got, err := resolveInRoot(root, "/bin/up"); err != nil || got != filepath.Join(root, "x") {
		t.Errorf("resolveInRoot(/bin/up) = %q, %v; want root/x", got, err)
	}
	for _, p := range []string{"/bin/loop", "/bin/dangles", "/missing"} {
		if got, err := resolveInRoot(root, p); err == nil {
			t.Errorf("resolveInRoot(%s) = %q, want an error", p, got)
		}
	}
	if err := checkShell(root); err != nil {
		t.Errorf("checkShell: %v", err)
	}
}

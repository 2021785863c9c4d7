package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// testDirs makes a staging area: sysroot, build and install directories.
func testDirs(t *testing.T) (sysroot, build, install string) {
	t.Helper()
	root := t.TempDir()
	sysroot, build, install = filepath.Join(root, "sysroot"), filepath.Join(root, "build"), filepath.Join(root, "install")
	for _, d := range []string{sysroot, build, install} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return sysroot, build, install
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

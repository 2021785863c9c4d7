package fileid

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/bincode"
)

func TestIDSeesEveryChange(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("IDs are taken on Linux only")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, ok := Stat(p)
	if !ok || first.Size != 3 || first.Ino == 0 {
		t.Fatalf("Stat = %+v, %v", first, ok)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if at, ok := At(d, "f"); !ok || at != first {
		t.Errorf("At = %+v, %v; want %+v", at, ok, first)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if _, ok := At(d, "l"); ok {
		t.Error("At followed a symbolic link")
	}
	// The same size written in place with the mtime put back: the change time moves.
	mtime := time.Unix(0, first.Mtime)
	if err := os.WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if again, _ := Stat(p); again == first {
		t.Errorf("a rewrite with the mtime restored kept the ID %+v", again)
	}
}

func TestRacy(t *testing.T) {
	id := ID{Mtime: 10e9, Ctime: 11e9}
	if !id.Racy(12e9, 2*time.Second) {
		t.Error("a file changed 1 s before the write is not racy")
	}
	if id.Racy(14e9, 2*time.Second) {
		t.Error("a file changed 3 s before the write is racy")
	}
}

func TestAppendRead(t *testing.T) {
	id := ID{Size: 1, Mtime: -2, Ctime: 3, Ino: 4, Dev: 1 << 63}
	var w bincode.Writer
	id.Append(&w)
	if got := Read(bincode.NewStringReader(string(w.B))); got != id {
		t.Errorf("Read(Append(%+v)) = %+v", id, got)
	}
}

func TestReadAt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("IDs are taken on Linux only")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	for p, content := range map[string]string{"d/f": "content", "d/sub/g": "sub", "outside": "secret"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"l": "f", "sub/l": "../f", "up": "../outside", "dl": "sub"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for path, want := range map[string]string{"f": "content", "sub/g": "sub"} {
		data, id, ok := ReadAt(d, path)
		if stat, _ := Stat(filepath.Join(dir, path)); !ok || string(data) != want || id != stat {
			t.Errorf("ReadAt(%s) = %q, %+v, %v; want %q, %+v", path, data, id, ok, want, stat)
		}
	}
	// Anything but a regular file reached without a link and inside dir is left to the
	// caller's os.Root, which names the error or follows a link that stays inside.
	for _, path := range []string{"l", "sub/l", "up", "dl/g", "../outside", "/etc/hostname", "missing", "sub", ""} {
		if data, _, ok := ReadAt(d, path); ok {
			t.Errorf("ReadAt(%s) read %q", path, data)
		}
	}
}

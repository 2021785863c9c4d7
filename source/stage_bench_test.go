package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree writes 50 directories of 100 small files under dir/files and a tar of them
// into the source cache; it returns the options and the two sources that stage them.
func benchTree(b *testing.B) (StageOptions, *Spec, *Spec) {
	b.Helper()
	root := b.TempDir()
	var members []member
	for d := range 50 {
		members = append(members, dir(fmt.Sprintf("pkg/d%d/", d)))
		for f := range 100 {
			name := fmt.Sprintf("d%d/f%d.c", d, f)
			body := fmt.Sprintf("int x%d_%d;\n", d, f)
			p := filepath.Join(root, "project", "files", name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
			members = append(members, file("pkg/"+name, body))
		}
	}
	archive := makeTar(b, members...)
	sources := filepath.Join(root, "sources")
	os.MkdirAll(filepath.Join(sources, "files"), 0o755)
	if err := os.WriteFile(filepath.Join(sources, "files", sha(archive)), archive, 0o444); err != nil {
		b.Fatal(err)
	}
	o := StageOptions{ProjectRoot: filepath.Join(root, "project"), SourcesDir: sources}
	return o, &Spec{Kind: Local, Path: "files"}, &Spec{Kind: Tar, URL: "file:///pkg.tar", Ref: sha(archive), BaseDir: "*"}
}

// BenchmarkStage stages 5,000 files from a local source and from a tar archive: the cost
// of resolving every path inside the build root (os.Root).
func BenchmarkStage(b *testing.B) {
	o, local, tar := benchTree(b)
	for _, s := range []*Spec{local, tar} {
		b.Run(string(s.Kind), func(b *testing.B) {
			for i := range b.N {
				o.BuildRoot = filepath.Join(b.TempDir(), fmt.Sprint(i))
				if err := Stage(context.Background(), s, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

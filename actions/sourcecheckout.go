package actions

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/source"
)

// SourceCheckout stages elements' sources for `gantry source checkout`, each as its
// build stages them into its build directory (stageSources), or, for an element open
// in a workspace, the workspace's files (what its build syncs into its build
// directory). Every source must be in the source cache (SourcesCached).
type SourceCheckout struct {
	Cache       *cache.Cache
	ProjectRoot string
	Elements    []*element.Element // dependencies first
	// PerElement puts each element's sources in a directory of its own, named
	// element.WorkspaceDirName (base/gcc.toml: base-gcc); otherwise the one element's
	// sources are the top of the checkout.
	PerElement bool
	Log        io.Writer // what staging says (patch's output)
}

// elementDir is where e's sources go in a checkout with PerElement.
func elementDir(e *element.Element) string { return element.WorkspaceDirName(e.Name) }

// Check refuses a checkout that cannot be laid out: with PerElement, two elements
// whose directories are the same (a-b.toml and a/b.toml), and without it more than
// one element.
func (sc SourceCheckout) Check() error {
	if !sc.PerElement {
		if len(sc.Elements) != 1 {
			return fmt.Errorf("a source checkout without a directory per element takes one element, not %d", len(sc.Elements))
		}
		return nil
	}
	seen := map[string]string{}
	for _, e := range sc.Elements {
		d := elementDir(e)
		if other, ok := seen[d]; ok {
			return fmt.Errorf("the sources of %s and %s would both go into %s/: check them out one at a time with --deps none", other, e.Name, d)
		}
		seen[d] = e.Name
	}
	return nil
}

// stage stages the sources into a new temporary directory of the cache, which it
// returns; the caller removes it. An element with no sources (and no workspace)
// gets no directory with PerElement.
func (sc SourceCheckout) stage(ctx context.Context) (dir string, err error) {
	if err := sc.Check(); err != nil {
		return "", err
	}
	dir, err = sc.Cache.TempDir("source-checkout")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	for _, e := range sc.Elements {
		into := dir
		if sc.PerElement {
			if len(e.Sources) == 0 && e.Workspace == "" {
				continue
			}
			into = filepath.Join(dir, elementDir(e))
		}
		if err := sc.stageElement(ctx, e, into); err != nil {
			return "", fmt.Errorf("checking out the sources of %s: %w", e.Name, err)
		}
	}
	return dir, nil
}

// stageElement stages e's sources (or its workspace) into dir.
func (sc SourceCheckout) stageElement(ctx context.Context, e *element.Element, dir string) error {
	if e.Workspace == "" {
		so := source.StageOptions{ProjectRoot: projectRoot(sc.ProjectRoot, e), SourcesDir: sc.Cache.SourcesDir(), BuildRoot: dir, Log: sc.Log}
		return stageSources(ctx, e.Sources, so, nil)
	}
	root, _, err := source.OpenDir(dir, "")
	if err != nil {
		return err
	}
	defer root.Close()
	if err := source.CopyTreeKeepTimes(e.Workspace, root, "."); err != nil {
		return fmt.Errorf("copying its workspace %s: %w", e.Workspace, err)
	}
	return nil
}

// ToDir stages the sources and copies them into dir (made if need be; what is there
// is kept, files staged over are replaced): a failure leaves dir as it was.
func (sc SourceCheckout) ToDir(ctx context.Context, dir string) error {
	staged, err := sc.stage(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(staged)
	root, _, err := source.OpenDir(dir, "")
	if err != nil {
		return fmt.Errorf("checking out sources into %s: %w", dir, err)
	}
	defer root.Close()
	if err := source.CopyTreeKeepTimes(staged, root, "."); err != nil {
		return fmt.Errorf("checking out sources into %s: %w", dir, err)
	}
	return nil
}

// ToTar stages the sources and writes them to w as a reproducible tarball
// (writeSourceTar), its times the date the build gives the elements' commands as
// SOURCE_DATE_EPOCH (the newest a source gives, else sandbox.DefaultSourceDate).
func (sc SourceCheckout) ToTar(ctx context.Context, w io.Writer) error {
	staged, err := sc.stage(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(staged)
	var sources []source.Spec
	for _, e := range sc.Elements {
		if e.Workspace == "" { // a workspace gives no date, as in its build
			sources = append(sources, e.Sources...)
		}
	}
	if err := writeSourceTar(w, staged, sourceDate(ctx, sources, sc.Cache.SourcesDir())); err != nil {
		return fmt.Errorf("writing the sources' tarball: %w", err)
	}
	return nil
}

// writeSourceTar writes the tree at dir to w as a tar whose bytes depend only on the
// tree's names, types, contents, executable bits and link targets: entries in
// lexical order (a directory before what it holds), paths relative to dir
// (directories with a trailing slash), every time mtime (whole seconds), owner and
// group 0 with no names, modes 0755 for directories and executables and 0644 for
// other files (what the cache's trees keep of modes). Hard links are written as
// files.
func writeSourceTar(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	mtime = mtime.UTC().Truncate(time.Second)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case d.Type()&fs.ModeSymlink != 0:
			h.Typeflag, h.Mode = tar.TypeSymlink, 0o777
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case d.Type().IsRegular():
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, info.Size(), 0o644
			if info.Mode()&0o111 != 0 {
				h.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: cannot put a %s in a tarball", rel, info.Mode().Type())
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

package source

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// StageOptions says where a source is staged from and to.
type StageOptions struct {
	ProjectRoot string    // local and patch paths are relative to it
	SourcesDir  string    // the source cache (cache/sources)
	BuildRoot   string    // the build directory; Spec.Directory is relative to it
	Log         io.Writer // command output
}

// Stage puts the source into the build root.
func Stage(ctx context.Context, s *Spec, o StageOptions) error {
	dest := filepath.Join(o.BuildRoot, filepath.FromSlash(s.Directory))
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("staging %s: %w", s.Describe(), err)
	}
	switch s.Kind {
	case Local:
		src, err := ProjectPath(o.ProjectRoot, s.Path)
		if err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		if err := CopyTree(src, dest); err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		return nil
	case Patch:
		patch, err := ProjectPath(o.ProjectRoot, s.Path)
		if err != nil {
			return fmt.Errorf("applying %s: %w", s.Describe(), err)
		}
		cmd := exec.CommandContext(ctx, "patch", "-p"+strconv.Itoa(s.StripLevel), "--batch", "--forward", "-i", patch)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dest, o.Log, o.Log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("applying %s in %s: `patch -p%d -i %s` failed: %w (see the log)", s.Describe(), dest, s.StripLevel, patch, err)
		}
		return nil
	case Tar:
		if err := stageTar(ctx, s, o, dest); err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		return nil
	case Remote:
		if err := stageRemote(s, o, dest); err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		return nil
	case Git:
		if err := stageGit(ctx, s, o, dest); err != nil {
			return fmt.Errorf("staging %s at %s: %w", s.Describe(), s.Ref, err)
		}
		return nil
	}
	return fmt.Errorf("staging %s: unknown source kind %q", s.Describe(), s.Kind)
}

// stageTar extracts the cached archive into dest (see extractTar for base-dir and for
// what is refused).
func stageTar(ctx context.Context, s *Spec, o StageOptions, dest string) error {
	f, err := openCachedFile(o.SourcesDir, s)
	if err != nil {
		return err
	}
	defer f.Close()
	open := func() (io.ReadCloser, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return decompress(ctx, f)
	}
	return extractTar(ctx, open, dest, s.BaseDir)
}

// stageRemote copies the cached file to dest/filename (default: the url's last path
// element), mode 0755 when executable, else 0644.
func stageRemote(s *Spec, o StageOptions, dest string) error {
	name := s.Filename
	if name == "" {
		name = remoteFilename(s.URL)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("bad file name %q: set filename to a plain file name", name)
	}
	in, err := openCachedFile(o.SourcesDir, s)
	if err != nil {
		return err
	}
	defer in.Close()
	mode := fs.FileMode(0o644)
	if s.Executable {
		mode = 0o755
	}
	target := filepath.Join(dest, name)
	if info, err := os.Lstat(target); err == nil && info.IsDir() {
		return fmt.Errorf("%s is a directory", target)
	}
	os.Remove(target) // a symlink there is replaced, not written through
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// remoteFilename is the last path element of a url, unescaped.
func remoteFilename(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	return path.Base(strings.TrimRight(p, "/"))
}

// CopyTree copies src (a file or directory) into dir dst, keeping modes and symlinks.
// Existing files in dst are overwritten.
func CopyTree(src, dst string) error {
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return copyEntry(src, filepath.Join(dst, filepath.Base(src)), info)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		}
		return copyEntry(p, target, info)
	})
}

func copyEntry(src, dst string, info fs.FileInfo) error {
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		os.Remove(dst)
		return os.Symlink(link, dst)
	case info.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		os.Remove(dst)
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return fmt.Errorf("%s: cannot copy a %s", src, info.Mode().Type())
}

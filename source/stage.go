package source

import (
	"context"
	"errors"
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
	MaxUnpacked int64     // cap on what one archive unpacks to; 0: DefaultMaxUnpacked
}

// Stage puts the source into the build root, at s.Directory. Every path it writes is
// resolved inside the build root by the kernel (os.Root): a symbolic link that an earlier
// source (or this one) created cannot lead a write outside.
func Stage(ctx context.Context, s *Spec, o StageOptions) error {
	root, dest, err := OpenDir(o.BuildRoot, s.Directory)
	if err != nil {
		return fmt.Errorf("staging %s into directory %q: %w", s.Describe(), s.Directory, err)
	}
	defer root.Close()
	switch s.Kind {
	case Local:
		src, err := ProjectPath(o.ProjectRoot, s.Path)
		if err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		if err := CopyTree(src, root, "."); err != nil {
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
		if err := stageTar(ctx, s, o, root); err != nil {
			return fmt.Errorf("staging %s: %w", s.Describe(), err)
		}
		return nil
	case Remote:
		if err := stageRemote(s, o, root); err != nil {
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

// OpenDir makes base and dir (slash-separated, relative to base; "" is base) and returns an
// os.Root for it and its host path, for tools that take a path (patch, git). A symbolic
// link on the way that leaves base, or is absolute, is refused by the kernel.
func OpenDir(base, dir string) (*os.Root, string, error) {
	if err := os.MkdirAll(base, 0o755); err != nil { // base is gantry's own
		return nil, "", err
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, "", err
	}
	defer r.Close()
	rel := filepath.FromSlash(path.Clean("./" + dir))
	if err := r.MkdirAll(rel, 0o755); err != nil {
		return nil, "", escapeError(err)
	}
	sub, err := r.OpenRoot(rel)
	if err != nil {
		return nil, "", escapeError(err)
	}
	return sub, filepath.Join(base, rel), nil
}

// stageTar extracts the cached archive into dest (see extractTar for base-dir and for
// what is refused).
func stageTar(ctx context.Context, s *Spec, o StageOptions, dest *os.Root) error {
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
	limit, err := o.unpackLimit()
	if err != nil {
		return err
	}
	return extractTar(ctx, open, dest, s.BaseDir, limit)
}

// unpackLimit is o.MaxUnpacked, else $GANTRY_MAX_UNPACKED_SIZE (units.ParseSize: "500M",
// "10G"), else DefaultMaxUnpacked.
func (o StageOptions) unpackLimit() (int64, error) {
	if o.MaxUnpacked > 0 {
		return o.MaxUnpacked, nil
	}
	return sizeFromEnv("GANTRY_MAX_UNPACKED_SIZE", DefaultMaxUnpacked)
}

// stageRemote copies the cached file to dest/filename (default: the url's last path
// element), mode 0755 when executable, else 0644.
func stageRemote(s *Spec, o StageOptions, dest *os.Root) error {
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
	if info, err := dest.Lstat(name); err == nil && info.IsDir() {
		return fmt.Errorf("%s is a directory", name)
	}
	dest.Remove(name) // a symlink there is replaced, not written through
	out, err := dest.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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

// CopyTree copies src (a host file or directory) into dir of dst ("." for its top),
// keeping modes and symbolic links. Links below src are copied as links, never
// followed; every write goes through dst, so a link created earlier (by an earlier
// source, or by this copy) cannot lead a write out of it. Existing files are replaced.
// What it writes gets the time of the copy.
func CopyTree(src string, dst *os.Root, dir string) error {
	return copyTree(src, dst, dir, false)
}

// CopyTreeKeepTimes is CopyTree keeping the modification times of the files and
// directories it copies (not of links): a copy of staged sources stays as staged.
func CopyTreeKeepTimes(src string, dst *os.Root, dir string) error {
	return copyTree(src, dst, dir, true)
}

func copyTree(src string, dst *os.Root, dir string, keepTimes bool) error {
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			return escapeError(err)
		}
		target := filepath.Join(dir, filepath.Base(src))
		if err := copyEntry(src, dst, target, info); err != nil {
			return err
		}
		return keepTime(dst, target, info, keepTimes)
	}
	var dirs []string // their times are set once what they hold is written
	var times []fs.FileInfo
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dir, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs, times = append(dirs, target), append(times, info)
			return escapeError(dst.MkdirAll(target, info.Mode().Perm()|0o700))
		}
		if err := copyEntry(p, dst, target, info); err != nil {
			return err
		}
		return keepTime(dst, target, info, keepTimes)
	})
	for i := range dirs {
		if err == nil {
			err = keepTime(dst, dirs[i], times[i], keepTimes)
		}
	}
	return err
}

// keepTime gives name in dst the modification time of info, a regular file or a
// directory, when keep is set.
func keepTime(dst *os.Root, name string, info fs.FileInfo, keep bool) error {
	if !keep || !(info.Mode().IsRegular() || info.IsDir()) {
		return nil
	}
	return dst.Chtimes(name, info.ModTime(), info.ModTime())
}

// copyEntry copies the file or link src to name in dst, replacing what is there.
func copyEntry(src string, dst *os.Root, name string, info fs.FileInfo) error {
	if existing, err := dst.Lstat(name); err == nil && !existing.IsDir() {
		if err := dst.Remove(name); err != nil {
			return err
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return escapeError(err)
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return dst.Symlink(link, name)
	case info.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := dst.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return escapeError(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return fmt.Errorf("%s: cannot copy a %s", src, info.Mode().Type())
}

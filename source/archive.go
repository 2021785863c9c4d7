package source

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// decompress returns the tar stream in r, decompressed according to its magic bytes:
// gzip, xz (by the xz command: the module has no pure-Go xz decoder), bzip2, zstd, or none.
func decompress(ctx context.Context, r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading gzip data: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return xzReader(ctx, br)
	case bytes.HasPrefix(magic, []byte("BZh")):
		return io.NopCloser(bzip2.NewReader(br)), nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("reading zstd data: %w", err)
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// xzProcess is the output of `xz -dc`.
type xzProcess struct {
	io.Reader
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func xzReader(ctx context.Context, r io.Reader) (io.ReadCloser, error) {
	if _, err := exec.LookPath("xz"); err != nil {
		return nil, fmt.Errorf("the archive is xz-compressed and needs the xz command, which is not installed")
	}
	cmd := exec.CommandContext(ctx, "xz", "-dc")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = r, &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("running xz -dc: %w", err)
	}
	return &xzProcess{Reader: out, cmd: cmd, stderr: &stderr}, nil
}

// Close reads what xz still writes (the tar reader stops at the end-of-archive marker)
// and reports its failure, if any.
func (x *xzProcess) Close() error {
	_, _ = io.Copy(io.Discard, x.Reader)
	if err := x.cmd.Wait(); err != nil {
		return fmt.Errorf("xz -dc: %w: %s", err, strings.TrimSpace(x.stderr.String()))
	}
	return nil
}

// errEscape is a path that would leave the staging directory.
var errEscape = errors.New("path escapes the staging directory")

// errLoop is a path through too many symbolic links.
var errLoop = errors.New("too many levels of symbolic links")

// memberError names the archive member that was refused or failed.
type memberError struct {
	name string
	err  error
}

func (e *memberError) Error() string { return fmt.Sprintf("tar member %q: %v", e.name, e.err) }
func (e *memberError) Unwrap() error { return e.err }

// extractTar extracts the archive that open returns into dest. baseDir "" extracts
// everything; "*" strips the top-level directory if the archive has exactly one; any
// other value (a path, or a glob matched against the archive's directories, first match
// in sorted order) extracts only that directory's contents. open is called twice when
// baseDir needs a look at the whole archive first.
//
// Invariant: nothing is written outside dest. Members with absolute paths or "..",
// symbolic links whose target resolves outside dest, hard links to outside and device or
// fifo files are refused with an error naming the member.
func extractTar(ctx context.Context, open func() (io.ReadCloser, error), dest, baseDir string) error {
	prefix := ""
	if baseDir != "" {
		var err error
		if prefix, err = findBaseDir(open, baseDir); err != nil {
			return err
		}
	}
	rc, err := open()
	if err != nil {
		return err
	}
	x := &extractor{root: dest}
	if err := x.extract(ctx, tar.NewReader(rc), prefix); err != nil {
		rc.Close()
		return err
	}
	if err := rc.Close(); err != nil {
		return err
	}
	return x.checkSymlinks()
}

// memberPath cleans a member name, refusing absolute paths and "..". It returns "." for
// the archive's root.
func memberPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) {
		return "", fmt.Errorf("absolute path: %w", errEscape)
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", errEscape
	}
	return p, nil
}

// findBaseDir reads the archive's member names and returns the directory whose contents
// are to be staged ("" for everything).
func findBaseDir(open func() (io.ReadCloser, error), baseDir string) (string, error) {
	rc, err := open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	tops := map[string]bool{} // top-level name → is a directory
	dirs := map[string]bool{}
	notDirs := map[string]bool{} // members that are files or links, whatever lies below them
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("reading the archive: %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		p, err := memberPath(h.Name)
		if err != nil {
			return "", &memberError{h.Name, err}
		}
		if p == "." {
			continue
		}
		parts := strings.Split(p, "/")
		top := parts[0]
		tops[top] = tops[top] || len(parts) > 1 || h.Typeflag == tar.TypeDir
		for i := 1; i < len(parts); i++ {
			dirs[strings.Join(parts[:i], "/")] = true
		}
		if h.Typeflag == tar.TypeDir {
			dirs[p] = true
		} else {
			notDirs[p] = true
		}
	}
	if baseDir == "*" {
		if len(tops) == 1 {
			for top, isDir := range tops {
				if isDir && !notDirs[top] {
					return top, nil
				}
			}
		}
		return "", nil
	}
	pattern := path.Clean(baseDir)
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted)
	for _, d := range sorted {
		if ok, _ := path.Match(pattern, d); ok && !notDirs[d] {
			return d, nil
		}
	}
	topNames := make([]string, 0, len(tops))
	for t := range tops {
		topNames = append(topNames, t)
	}
	sort.Strings(topNames)
	return "", fmt.Errorf("base-dir %q matches no directory in the archive (top-level entries: %s)", baseDir, strings.Join(topNames, ", "))
}

// extractor writes members under root, resolving symbolic links itself so that no write
// goes through a link to outside root.
type extractor struct {
	root     string
	symlinks []string // created links, relative to root, checked again at the end
}

func (x *extractor) extract(ctx context.Context, tr *tar.Reader, prefix string) error {
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		if err := x.member(h, tr, prefix); err != nil {
			return &memberError{h.Name, err}
		}
	}
}

// strip returns p relative to prefix, and false when p is not below prefix.
func strip(p, prefix string) (string, bool) {
	switch {
	case prefix == "":
		return p, p != "."
	case strings.HasPrefix(p, prefix+"/"):
		return p[len(prefix)+1:], true
	}
	return "", false
}

func (x *extractor) member(h *tar.Header, r io.Reader, prefix string) error {
	switch h.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("device and fifo files are not allowed in sources")
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse, tar.TypeSymlink, tar.TypeLink:
	default:
		return fmt.Errorf("unsupported member type %q", h.Typeflag)
	}
	p, err := memberPath(h.Name)
	if err != nil {
		return err
	}
	rel, ok := strip(p, prefix)
	if !ok {
		return nil
	}
	if h.Typeflag == tar.TypeSymlink {
		if err := x.checkLinkTarget(path.Dir(rel), h.Linkname); err != nil {
			return fmt.Errorf("symbolic link to %q: %w", h.Linkname, err)
		}
	}
	parent, err := x.resolve(path.Dir(rel), true)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	target := filepath.Join(parent, path.Base(rel))
	mode := fs.FileMode(h.Mode) & fs.ModePerm

	existing, err := os.Lstat(target)
	switch {
	case err == nil && existing.IsDir() && h.Typeflag == tar.TypeDir:
		return os.Chmod(target, mode|0o700)
	case err == nil && existing.IsDir():
		return fmt.Errorf("%s is a directory already", target)
	case err == nil:
		if err := os.Remove(target); err != nil {
			return err
		}
	case !os.IsNotExist(err):
		return err
	}

	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
		return os.Chmod(target, mode|0o700) // writable by us: later members go inside
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, target); err != nil {
			return err
		}
		relTarget, _ := filepath.Rel(x.root, target)
		x.symlinks = append(x.symlinks, filepath.ToSlash(relTarget))
		return nil
	case tar.TypeLink:
		return x.hardLink(h.Linkname, prefix, target)
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode | 0o600); err != nil { // exec bits kept; always ours to read and patch
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Keep the archive's times: make compares them (a configure older than configure.ac
	// would run autoconf).
	return os.Chtimes(target, h.ModTime, h.ModTime)
}

func (x *extractor) hardLink(linkname, prefix, target string) error {
	lp, err := memberPath(linkname)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", linkname, err)
	}
	rel, ok := strip(lp, prefix)
	if !ok {
		return fmt.Errorf("hard link to %q, which is outside base-dir %q", linkname, prefix)
	}
	src, err := x.resolve(rel, true)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", linkname, err)
	}
	info, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("hard link to %q: the target is not extracted (it must come earlier in the archive)", linkname)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("hard link to %q, which is not a regular file", linkname)
	}
	return os.Link(src, target)
}

// checkLinkTarget refuses a symbolic link in dir (relative to root) whose target leaves
// root, following the links that exist so far.
func (x *extractor) checkLinkTarget(dir, linkname string) error {
	if linkname == "" {
		return fmt.Errorf("empty target")
	}
	if strings.HasPrefix(linkname, "/") {
		return fmt.Errorf("absolute target: %w", errEscape)
	}
	_, err := x.resolve(dir+"/"+linkname, true)
	if errors.Is(err, errLoop) {
		return nil // cannot be followed anywhere
	}
	return err
}

// checkSymlinks checks every created link again, now that the tree is complete: a link
// checked early may lead through links created later.
func (x *extractor) checkSymlinks() error {
	for _, l := range x.symlinks {
		if _, err := x.resolve(l, true); err != nil && !errors.Is(err, errLoop) {
			p := filepath.Join(x.root, filepath.FromSlash(l))
			target, _ := os.Readlink(p)
			os.Remove(p) // leave no way out behind
			return &memberError{l, fmt.Errorf("symbolic link to %q: %w", target, err)}
		}
	}
	return nil
}

// resolve returns the host path of rel (slash-separated, relative to root), following the
// symbolic links that exist below root; components that do not exist are taken as they
// are. followLast says whether a link in the last component is followed. It fails with
// errEscape when the path would leave root.
func (x *extractor) resolve(rel string, followLast bool) (string, error) {
	var done []string
	todo := strings.Split(rel, "/")
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", errEscape
			}
			done = done[:len(done)-1]
			continue
		}
		if len(todo) == 0 && !followLast {
			done = append(done, c)
			break
		}
		p := filepath.Join(x.root, filepath.Join(done...), c)
		info, err := os.Lstat(p)
		if err != nil || info.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if hops++; hops > 40 {
			return "", errLoop
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			return "", fmt.Errorf("through the link %s to %s: %w", filepath.Join(done...), target, errEscape)
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(x.root, filepath.Join(done...)), nil
}

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
	tail   int64 // how much Close reads after the tar archive's end (closeArchive sets it)
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
	return &xzProcess{Reader: out, cmd: cmd, stderr: &stderr, tail: DefaultMaxUnpacked}, nil
}

// errLongTail is an xz stream that goes on after the tar archive's end for longer
// than the archive's budget has left.
var errLongTail = errors.New("data goes on after the end of the tar archive")

// Close reads what xz still writes (the tar reader stops at the end-of-archive marker),
// up to x.tail bytes, and reports xz's failure, if any. A longer tail stops xz: a
// decompression bomb after the archive's end is refused, not decompressed to the end.
func (x *xzProcess) Close() error {
	if n, _ := io.CopyN(io.Discard, x.Reader, x.tail+1); n > x.tail {
		_ = x.cmd.Process.Kill()
		_ = x.cmd.Wait()
		return errLongTail
	}
	if err := x.cmd.Wait(); err != nil {
		return fmt.Errorf("xz -dc: %w: %s", err, strings.TrimSpace(x.stderr.String()))
	}
	return nil
}

// closeArchive closes rc, the decompressed archive read up to its end-of-archive marker.
// What follows the marker counts against b: xz's output is read to its end (to hear
// whether xz failed), and no further than what the budget has left.
func closeArchive(rc io.Closer, b *budget) error {
	if x, ok := rc.(*xzProcess); ok {
		x.tail = max(b.left, 0)
	}
	err := rc.Close()
	if errors.Is(err, errLongTail) {
		return fmt.Errorf("%w: %w", err, b.exceeded())
	}
	return err
}

// errEscape is a path that would leave the staging directory.
var errEscape = errors.New("path escapes the staging directory")

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
// baseDir needs a look at the whole archive first. limit caps what the archive unpacks to
// (see budget; 0: DefaultMaxUnpacked).
//
// Invariant: nothing is written outside dest. Every write goes through dest (an
// os.Root), so the kernel refuses a path through a symbolic link that leaves it. Symbolic
// links themselves are data and are kept as they are, absolute ones too (a sysroot's
// lib64/ld-linux-x86-64.so.2 -> /lib/…); extraction never follows one out of dest.
// Members with absolute paths or "..", hard links to outside and device or fifo files
// are refused with an error naming the member.
func extractTar(ctx context.Context, open func() (io.ReadCloser, error), dest *os.Root, baseDir string, limit int64) error {
	if limit <= 0 {
		limit = DefaultMaxUnpacked
	}
	prefix := ""
	if baseDir != "" {
		var err error
		if prefix, err = findBaseDir(open, baseDir, limit); err != nil {
			return err
		}
	}
	rc, err := open()
	if err != nil {
		return err
	}
	x := &extractor{root: dest, budget: budget{left: limit, limit: limit}, dirs: map[string]bool{}}
	if err := x.extract(ctx, tar.NewReader(rc), prefix); err != nil {
		x.budget.left = 0 // xz's output is not read on: the archive is refused anyway
		_ = closeArchive(rc, &x.budget)
		return err
	}
	return closeArchive(rc, &x.budget)
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
func findBaseDir(open func() (io.ReadCloser, error), baseDir string, limit int64) (string, error) {
	rc, err := open()
	if err != nil {
		return "", err
	}
	b := budget{left: limit, limit: limit}
	defer func() {
		b.left = 0 // xz's output is not read on: the second pass reads the archive again
		_ = closeArchive(rc, &b)
	}()
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
		if err := b.take(h); err != nil {
			return "", &memberError{h.Name, err}
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

// DefaultMaxUnpacked caps what one archive may unpack to (the sum of its members' sizes):
// a decompression bomb fails with a clear error instead of filling the disk. Real SDK
// tarballs are a few GiB.
const DefaultMaxUnpacked int64 = 32 << 30

// budget counts what an archive unpacks to (every member's size, skipped ones too, and
// 512 bytes per header) against the limit, before the bytes are read: a decompression
// bomb is stopped however its members are used.
type budget struct{ left, limit int64 }

func (b *budget) take(h *tar.Header) error {
	b.left -= max(h.Size, 0) + 512
	if b.left < 0 {
		return b.exceeded()
	}
	return nil
}

func (b *budget) exceeded() error {
	return &LimitError{Limit: b.limit, Unpack: true}
}

// extractor writes members under root; the kernel keeps every write inside it.
type extractor struct {
	root   *os.Root
	budget budget
	dirs   map[string]bool // parents made or found by MkdirAll, while no link changes (a cache)
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
		if err := x.budget.take(h); err != nil {
			return &memberError{h.Name, err}
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
	if h.Typeflag == tar.TypeSymlink && h.Linkname == "" {
		return fmt.Errorf("symbolic link with an empty target")
	}
	if parent := path.Dir(rel); !x.dirs[parent] {
		if err := x.root.MkdirAll(parent, 0o755); err != nil {
			return escapeError(err)
		}
		x.dirs[parent] = true
	}
	mode := fs.FileMode(h.Mode) & fs.ModePerm
	isDir, err := x.makeRoom(rel, h.Typeflag == tar.TypeDir)
	if err != nil {
		return escapeError(err)
	}

	switch h.Typeflag {
	case tar.TypeDir:
		if !isDir {
			if err := x.root.Mkdir(rel, 0o700); err != nil {
				return escapeError(err)
			}
		}
		return x.root.Chmod(rel, mode|0o700) // writable by us: later members go inside
	case tar.TypeSymlink:
		clear(x.dirs)                          // a path through the new link leads elsewhere
		return x.root.Symlink(h.Linkname, rel) // kept as it is, never followed here
	case tar.TypeLink:
		return x.hardLink(h.Linkname, prefix, rel)
	}
	f, err := x.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return escapeError(err)
	}
	_, err = io.Copy(f, r) // at most h.Size bytes, counted by the budget
	if err == nil {
		err = f.Chmod(mode | 0o600) // exec bits kept; always ours to read and patch
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	// The archive's times are not kept: staging gives every file one time
	// (SetStagedTimes), so that no order of them can make make regenerate a file.
	return err
}

// makeRoom makes room for a member at rel: an existing file or link is removed (a link is
// replaced, never written through). isDir is true when rel is a directory already, which
// only a directory member may meet.
func (x *extractor) makeRoom(rel string, dirMember bool) (isDir bool, err error) {
	existing, err := x.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case existing.IsDir() && dirMember:
		return true, nil
	case existing.IsDir():
		return false, fmt.Errorf("%s is a directory already", rel)
	}
	clear(x.dirs) // rel may be a link that paths went through
	return false, x.root.Remove(rel)
}

func (x *extractor) hardLink(linkname, prefix, rel string) error {
	lp, err := memberPath(linkname)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", linkname, err)
	}
	src, ok := strip(lp, prefix)
	if !ok {
		return fmt.Errorf("hard link to %q, which is outside base-dir %q", linkname, prefix)
	}
	info, err := x.root.Lstat(src)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hard link to %q: the target is not extracted (it must come earlier in the archive)", linkname)
		}
		return fmt.Errorf("hard link to %q: %w", linkname, escapeError(err))
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("hard link to %q, which is not a regular file", linkname)
	}
	return x.root.Link(src, rel)
}

// IsEscape reports whether err is os.Root's refusal of a path that leaves the root (by
// "..", or through a symbolic link that leads out or is absolute). os exports no
// sentinel for it.
func IsEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// escapeError words os.Root's refusal of a path through a link that leaves the root.
func escapeError(err error) error {
	if IsEscape(err) {
		return fmt.Errorf("%w: it goes through a symbolic link that leads out (%v)", errEscape, err)
	}
	return err
}

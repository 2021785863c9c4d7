package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Resolve turns a configured kind into the backend to use for sysroot, and
// says why, for the log. Auto (or "") becomes Bwrap when sysroot provides an
// executable /bin/sh (symlinks followed inside the sysroot, e.g. to busybox)
// and bwrap works on this machine, otherwise Host. Host and Bwrap are kept as
// requested; if bwrap does not work, the reason says so and Runner.Run will
// fail.
func Resolve(k Kind, sysroot string) (Kind, string) {
	switch k {
	case Host:
		return Host, "host sandbox requested"
	case Bwrap:
		if ok, why := probeBwrap(); !ok {
			return Bwrap, "bwrap sandbox requested, but bwrap does not work here: " + why
		}
		return Bwrap, "bwrap sandbox requested"
	case Auto, "":
		if err := checkShell(sysroot); err != nil {
			return Host, "auto: the sysroot cannot run commands under bwrap (" + err.Error() + ")"
		}
		if ok, why := probeBwrap(); !ok {
			return Host, "auto: bwrap does not work here (" + why + ")"
		}
		return Bwrap, "auto: the sysroot provides /bin/sh and bwrap works"
	default:
		return k, fmt.Sprintf("unknown sandbox kind %q", string(k))
	}
}

// checkShell reports why sysroot has no executable /bin/sh.
func checkShell(sysroot string) error {
	if sysroot == "" {
		return errors.New("no sysroot")
	}
	root, err := os.OpenRoot(sysroot)
	if err != nil {
		return fmt.Errorf("no /bin/sh: %w", err)
	}
	defer root.Close()
	p, err := resolveIn(root, "/bin/sh")
	if err != nil {
		return fmt.Errorf("no /bin/sh: %w", err)
	}
	fi, err := root.Stat(p)
	if err != nil {
		return fmt.Errorf("no /bin/sh: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("/bin/sh is not an executable file")
	}
	return nil
}

// maxSymlinks bounds symlink resolution, like the kernel's ELOOP limit.
const maxSymlinks = 40

// resolveIn returns the path of name (absolute, as seen inside root) relative to
// root, with every symlink resolved as if root were /: absolute targets start again
// at root, and ".." never leaves it. It reads the
// tree only through root (os.Root), so even a tree changing underneath cannot lead it
// outside; os.Root alone would refuse the absolute links every sysroot has (/bin/sh ->
// /bin/busybox), which here mean "from the sysroot's top", as they do inside bwrap.
func resolveIn(root *os.Root, name string) (string, error) {
	cur := "/" // resolved so far, inside root
	rest := strings.Split(name, "/")
	links := 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		rel := filepath.FromSlash(strings.TrimPrefix(next, "/"))
		fi, err := root.Lstat(rel)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", name)
		}
		target, err := root.Readlink(rel)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.FromSlash("." + cur), nil
}

// The bwrap probe runs once per process; its result cannot change while
// gantry runs.
var (
	probeOnce   sync.Once
	probeOK     bool
	probeReason string
)

// probeTimeout bounds the bwrap probe: a bwrap that has not run `sh -c :` by then
// does not work here.
const probeTimeout = 10 * time.Second

// probeBwrap reports whether bwrap can set up a sandbox like Runner.Run's here: all
// namespaces unshared, /dev, /proc and a tmpfs mounted. If not, the reason
// includes bwrap's own message (no user namespaces, no bwrap, ...).
func probeBwrap() (bool, string) {
	probeOnce.Do(func() { probeOK, probeReason = runProbe() })
	return probeOK, probeReason
}

func runProbe() (bool, string) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return false, "bwrap is not installed (install bubblewrap)"
	}
	sh, err := hostShell()
	if err != nil {
		return false, err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	args := append([]string{"--ro-bind", "/", "/"}, bwrapIsolationArgs(false)...)
	args = append(args, "--", sh, "-c", ":")
	out, err := exec.CommandContext(ctx, bwrap, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return false, "bwrap test failed: " + msg
	}
	return true, "bwrap works"
}

package actions

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/sandbox"
	"github.com/gantry-build/gantry/source"
)

// machineFault returns buildErr, explained, if it is a fault of gantry or the machine
// rather than of the element, and nil otherwise (also for no error). Such a failure
// fails the session but is never cached as the element's: the next session tries
// again without --retry-failed. Machine faults are:
//   - an infraError (staging) or a sandbox that cannot run here (sandbox.MachineError);
//   - a full disk or quota (ENOSPC, EDQUOT) wherever gantry itself met it;
//   - a corrupt source-cache file (source.CorruptError);
//   - a source past a size limit of this machine (source.LimitError);
//   - a command that failed while the filesystem holding the build is full, or that
//     said "No space left on device" or "Disk quota exceeded" (out saw it): its exit
//     status cannot say why it failed, and a tool that met ENOSPC may have deleted
//     its partial output before exiting.
func machineFault(buildErr error, workDir string, out *faultWatcher) error {
	if buildErr == nil {
		return nil
	}
	var infra *infraError
	var machine *sandbox.MachineError
	var corrupt *source.CorruptError
	var limit *source.LimitError
	switch {
	case errors.As(buildErr, &infra), errors.As(buildErr, &machine), errors.As(buildErr, &corrupt), errors.As(buildErr, &limit):
		return buildErr
	case errors.Is(buildErr, syscall.ENOSPC), errors.Is(buildErr, syscall.EDQUOT):
		return fmt.Errorf("%w (the disk is full: free some space and build again)", buildErr)
	}
	if full, what := filesystemFull(workDir); full {
		return fmt.Errorf("%w, and the filesystem holding %s is out of %s: free some space and build again", buildErr, workDir, what)
	}
	if said := out.fault(); said != "" {
		return fmt.Errorf("%w, after the build said %q: free some space and build again", buildErr, said)
	}
	return nil
}

// filesystemFull reports whether the filesystem holding dir has no space or no inodes
// left for an unprivileged writer, and which.
func filesystemFull(dir string) (bool, string) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false, ""
	}
	switch {
	case st.Bavail == 0 && st.Blocks > 0:
		return true, "space"
	case st.Ffree == 0 && st.Files > 0:
		return true, "inodes"
	}
	return false, ""
}

// diskFaults are the messages (strerror of ENOSPC and EDQUOT) by which a command
// says that the disk, not the build, failed.
var diskFaults = [][]byte{[]byte("No space left on device"), []byte("Disk quota exceeded")}

// faultWatcher passes a command's output on to w and remembers whether it carried one
// of diskFaults. It is safe for concurrent use (stdout and stderr share it).
type faultWatcher struct {
	w io.Writer

	mu   sync.Mutex
	tail []byte // the end of the output so far, to match across writes
	seen string // the first fault message seen
}

func (f *faultWatcher) Write(p []byte) (int, error) {
	f.mu.Lock()
	if f.seen == "" {
		buf := append(f.tail, p...)
		for _, m := range diskFaults {
			if bytes.Contains(buf, m) {
				f.seen = string(m)
			}
		}
		keep := min(len(buf), 64)
		f.tail = append(f.tail[:0], buf[len(buf)-keep:]...)
	}
	f.mu.Unlock()
	return f.w.Write(p)
}

// fault is the first disk-fault message the output carried, or "".
func (f *faultWatcher) fault() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// checkStagedShell is called by the parent before it starts a build job: under
// --sandbox bwrap, commands run as /bin/sh of the staged sysroot, so a build whose
// staged dependencies provide no /bin/sh cannot run at all. It says so, naming the
// fix, before the job starts; nothing is cached. It reads only the top directories of
// the staged artifacts (bin/, and usr/bin/ when bin is a symlink to it, as in merged-/usr
// sysroots) and, when in doubt, lets the job check the staged sysroot itself.
func (spec *buildSpec) checkStagedShell(c *cache.Cache) error {
	switch {
	case spec.Sandbox != string(sandbox.Bwrap), spec.Kind == "stack", spec.Kind == "import", spec.Kind == "filter", spec.Kind == "compose" && !spec.integrates():
		return nil
	}
	// Dependencies one at a time, stopping at the first that provides a shell (usually
	// the base, staged first): this runs on the scheduler's loop for every build.
	for _, s := range spec.Stage {
		files := s.Files
		if files.IsZero() {
			a, err := c.Lookup(s.project(spec), s.Element, s.Key)
			if err != nil {
				return nil // the job reports it while staging
			}
			files = a.Files
		}
		roots := []cache.Digest{files}
		if stagedHas(c, roots, "bin", "sh") || stagedHas(c, roots, "usr", "bin", "sh") {
			return nil
		}
	}
	return &sandbox.MachineError{Msg: fmt.Sprintf("--sandbox bwrap: the sysroot staged for %s has no /bin/sh: add a base element that provides it (a build dependency), or use --sandbox host", spec.Element)}
}

// stagedHas reports whether any of the trees has the entry at path (a file, a symlink
// or a directory), or whether it cannot tell (an unreadable directory, a symlinked
// directory on the way other than bin -> usr/bin, which the caller checks separately).
func stagedHas(c *cache.Cache, roots []cache.Digest, path ...string) bool {
	for _, root := range roots {
		d := root
		for i, name := range path {
			dir, err := c.ReadDirectory(d)
			if err != nil {
				return true
			}
			last := i == len(path)-1
			found := false
			for _, f := range dir.Files {
				found = found || (last && f.Name == name)
			}
			for _, l := range dir.Symlinks {
				if l.Name == name {
					if last || !(name == "bin" && strings.TrimSuffix(strings.TrimPrefix(l.Target, "/"), "/") == "usr/bin") {
						return true // the entry, or a link this check does not follow
					}
				}
			}
			for _, sub := range dir.Directories {
				if sub.Name == name {
					found = true
					d = cache.DigestFromProto(sub.Digest)
				}
			}
			if last && found {
				return true
			}
			if !found {
				break
			}
		}
	}
	return false
}

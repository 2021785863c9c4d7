package element

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

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
	switch {
	case errors.As(buildErr, &infra), errors.As(buildErr, &machine), errors.As(buildErr, &corrupt):
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

package job

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/units"
)

// maxWorkerRSS is the resident size above which a worker takes no further job:
// a big job's heap is not carried into the next ones.
const maxWorkerRSS = 512 << 20

// workerState is what a worker process looked like before its first job: what a
// job could change and the next job would see. RunChild puts back what can be
// put back safely (working directory, umask, environment) and retires the
// worker when something else changed (open files, goroutines still running,
// resource limits, ignored signals, which exec passes on to build commands).
// Package-level state of the handlers is theirs to keep job-independent: the
// only one today is sandbox's bwrap probe, whose answer holds for the session.
// What handlers keep through Reporter.Keep (a connection) is the worker's own:
// its descriptors and goroutines are not counted as a job's.
type workerState struct {
	cwd        string
	umask      int
	env        []string
	fds        []string
	goroutines int
	rlimits    []syscall.Rlimit
	ignored    []bool
}

// limits are the resource limits a job must not change.
var limits = []int{syscall.RLIMIT_AS, syscall.RLIMIT_CORE, syscall.RLIMIT_CPU, syscall.RLIMIT_DATA,
	syscall.RLIMIT_FSIZE, syscall.RLIMIT_NOFILE, syscall.RLIMIT_STACK}

// captureState records the worker's state before its first job.
func captureState() (*workerState, error) {
	// The runtime opens its poller's descriptors on first use: open them now,
	// so that they count as the worker's own.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	s := &workerState{umask: syscall.Umask(0), env: os.Environ(), goroutines: runtime.NumGoroutine()}
	syscall.Umask(s.umask)
	var err error
	if s.cwd, err = os.Getwd(); err != nil {
		return nil, fmt.Errorf("recording the working directory: %w", err)
	}
	if s.fds, err = openFiles(); err != nil {
		return nil, err
	}
	for _, res := range limits {
		var l syscall.Rlimit
		if err := syscall.Getrlimit(res, &l); err != nil {
			return nil, fmt.Errorf("recording resource limit %d: %w", res, err)
		}
		s.rlimits = append(s.rlimits, l)
	}
	s.ignored = ignoredSignals()
	return s, nil
}

// restore puts the working directory, umask and environment back as they were
// and returns why the worker must take no further job, or "" if it is as it
// was before its first job. log, the job's log file, is still open.
func (s *workerState) restore(log *os.File, kept *residents) string {
	syscall.Umask(s.umask)
	if cwd, err := os.Getwd(); err != nil || cwd != s.cwd {
		if err := os.Chdir(s.cwd); err != nil {
			return fmt.Sprintf("going back to %s: %v", s.cwd, err)
		}
	}
	if env := os.Environ(); !slices.Equal(env, s.env) {
		os.Clearenv()
		for _, kv := range s.env {
			k, v, _ := strings.Cut(kv, "=")
			if err := os.Setenv(k, v); err != nil {
				return fmt.Sprintf("restoring the environment: %v", err)
			}
		}
	}
	if n := s.goroutinesLeft(kept); n > 0 {
		return fmt.Sprintf("its job left %d goroutines running", n)
	}
	fds, err := openFiles()
	if err != nil {
		return err.Error()
	}
	logFD, own := strconv.Itoa(int(log.Fd())), kept.descriptors()
	fds = slices.DeleteFunc(fds, func(fd string) bool { return fd == logFD || own[fd] })
	if !slices.Equal(fds, s.fds) {
		var left []string
		for _, fd := range fds {
			if !slices.Contains(s.fds, fd) {
				target, _ := os.Readlink("/proc/self/fd/" + fd)
				left = append(left, fd+" ("+target+")")
			}
		}
		return "its job left files open: descriptors " + strings.Join(left, ", ")
	}
	for i, res := range limits {
		var l syscall.Rlimit
		if err := syscall.Getrlimit(res, &l); err != nil || l != s.rlimits[i] {
			return fmt.Sprintf("its job changed resource limit %d", res)
		}
	}
	if !slices.Equal(ignoredSignals(), s.ignored) {
		return "its job changed which signals are ignored"
	}
	if rss := residentBytes(); rss > maxWorkerRSS {
		return fmt.Sprintf("it holds %s of memory", units.Bytes(rss))
	}
	return ""
}

// goroutineSettle is how long a worker waits for goroutines its job ended to
// exit: the readers and writers of a closed connection, a command's output
// copier. Only a job that left some waits at all.
const goroutineSettle = 20 * time.Millisecond

// goroutinesLeft returns how many more goroutines run than before the first
// job, not counting those of the kept residents, once those on their way out
// have had goroutineSettle to exit.
func (s *workerState) goroutinesLeft(kept *residents) int {
	deadline := time.Now().Add(goroutineSettle)
	for {
		n := runtime.NumGoroutine() - s.goroutines
		if n > 0 {
			n -= kept.goroutines()
		}
		if n <= 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// openFiles lists the process's open file descriptors.
func openFiles() ([]string, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("listing open files: %w", err)
	}
	names, err := d.Readdirnames(-1)
	self := strconv.Itoa(int(d.Fd()))
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("listing open files: %w", err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == self })
	slices.Sort(names)
	return names, nil
}

// ignoredSignals says, for each signal number below 32, whether it is ignored.
func ignoredSignals() []bool {
	ign := make([]bool, 32)
	for i := 1; i < len(ign); i++ {
		ign[i] = signal.Ignored(syscall.Signal(i))
	}
	return ign
}

// residentBytes returns the process's resident memory, or 0 if unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

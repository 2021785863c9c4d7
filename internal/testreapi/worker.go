package testreapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// The Bazel remote worker's Java sources and the jar they compile against, from
// Debian's bazel-bootstrap-source and bazel-bootstrap-data.
const (
	workerSources = "/usr/src/bazel-bootstrap/src/tools/remote/src/main/java"
	workerJar     = "/usr/share/bazel/A-server.jar"
	workerMain    = "com.google.devtools.build.remote.worker.RemoteWorker"
	installLine   = "apt-get install bazel-bootstrap-source bazel-bootstrap-data default-jdk-headless"
)

// startTimeout bounds how long a starting worker may take to answer: a JVM on a
// loaded machine takes seconds.
const startTimeout = 90 * time.Second

// WorkerOptions configures StartBazelWorker.
type WorkerOptions struct {
	// Jobs is the worker's --jobs, how many actions it runs at once (default 2).
	Jobs int
}

// Worker is a running Bazel remote worker (REAPI v2.0: Capabilities, CAS,
// ByteStream, ActionCache, Execution) listening on Addr.
type Worker struct {
	// Addr is host:port to connect to, always on 127.0.0.1 (the worker binds
	// every interface, but tests connect only to the loopback).
	Addr string
	// Port is the port it listens on.
	Port int
	// WorkPath and CASPath are its --work_path and --cas_path.
	WorkPath, CASPath string

	cmd    *exec.Cmd
	exited chan struct{}
	log    LockedBuffer
	once   sync.Once
}

// URL is the worker's address as gantry's configuration spells it.
func (w *Worker) URL() string { return "grpc://" + w.Addr }

// Log is what the worker printed so far.
func (w *Worker) Log() string { return w.log.String() }

// Kill kills the worker's process group and waits until the worker is gone, as a
// crashed server; the test's cleanup does the same. The commands the worker ran
// die with it: Kill waits (up to 10 s) until no process of the group is left.
func (w *Worker) Kill() {
	w.once.Do(func() {
		syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	})
	<-w.exited
	// The kernel says nothing when the last process of a group is gone (the
	// worker's children are reaped by another parent): poll.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if syscall.Kill(-w.cmd.Process.Pid, 0) == syscall.ESRCH {
			return
		}
	}
}

// StartBazelWorker compiles Bazel's remote worker (once per test binary run, cached
// across runs by a hash of its sources) and starts it on a free port, returning
// once it answers a Capabilities call. It is killed when the test ends. Without a
// JDK or the sources it skips the test, or fails it under CI=true.
func StartBazelWorker(t testing.TB, opts WorkerOptions) *Worker {
	t.Helper()
	classes, err := compileWorker()
	if err != nil {
		var m missingError
		if errors.As(err, &m) {
			if os.Getenv("CI") == "true" {
				t.Fatal(err)
			}
			t.Skipf("%v; install it with `%s` to run this test, CI=true makes this a failure", err, installLine)
		}
		t.Fatal(err)
	}
	if opts.Jobs == 0 {
		opts.Jobs = 2
	}
	dir := t.TempDir()
	// A free port is found by binding one and closing it, so another process can
	// take it before the worker does; the worker then exits and is started again.
	var lastErr error
	for range 3 {
		w, err := startWorker(t, classes, dir, opts)
		if err == nil {
			return w
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

func startWorker(t testing.TB, classes, dir string, opts WorkerOptions) (*Worker, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port:     port,
		WorkPath: filepath.Join(dir, fmt.Sprintf("work-%d", port)),
		CASPath:  filepath.Join(dir, fmt.Sprintf("cas-%d", port)),
		exited:   make(chan struct{}),
	}
	for _, d := range []string{w.WorkPath, w.CASPath} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	w.cmd = exec.Command("java", "-cp", classes+":"+workerJar, workerMain,
		"--work_path="+w.WorkPath, "--cas_path="+w.CASPath,
		"--listen_port="+strconv.Itoa(port), "--jobs="+strconv.Itoa(opts.Jobs))
	w.cmd.Stdout, w.cmd.Stderr = &w.log, &w.log
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the Bazel remote worker: %w", err)
	}
	go func() {
		w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		w.Kill()
		if t.Failed() {
			t.Logf("the Bazel remote worker on %s printed:\n%s", w.Addr, w.Log())
		}
	})
	if err := w.waitReady(t); err != nil {
		w.Kill()
		return nil, err
	}
	return w, nil
}

// waitReady waits until the worker answers a Capabilities call, it exits, or
// startTimeout passes.
func (w *Worker) waitReady(t testing.TB) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	go func() {
		select {
		case <-w.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn := Dial(t, w.Addr)
	caps := repb.NewCapabilitiesClient(conn)
	callCtx := WithMetadata(t, ctx, "capabilities")
	pause := 20 * time.Millisecond
	for {
		_, err := caps.GetCapabilities(callCtx, &repb.GetCapabilitiesRequest{})
		if err == nil {
			return nil
		}
		select {
		case <-w.exited:
			return fmt.Errorf("the Bazel remote worker exited before answering (%v):\n%s", w.cmd.ProcessState, w.Log())
		case <-ctx.Done():
			return fmt.Errorf("the Bazel remote worker did not answer within %v: %v\n%s", startTimeout, err, w.Log())
		case <-time.After(pause): // the connection is refused until it listens
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// missingError is a missing JDK or missing worker sources: the test skips.
type missingError string

func (m missingError) Error() string { return string(m) }

var compiled struct {
	once sync.Once
	dir  string
	err  error
}

// compileWorker compiles the worker's sources once per test binary run into a
// directory under the user's cache named by a hash of the sources and the jar (or
// under the temporary directory when there is no user cache), and returns it.
func compileWorker() (string, error) {
	compiled.once.Do(func() { compiled.dir, compiled.err = compileWorkerFrom(workerSources, workerJar) })
	return compiled.dir, compiled.err
}

// compileWorkerFrom compiles the sources under dir against jar, or finds them
// compiled in the cache.
func compileWorkerFrom(dir, jar string) (string, error) {
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", missingError(fmt.Sprintf("the Bazel remote worker needs a JDK: %s is not on PATH", tool))
		}
	}
	for _, p := range []string{dir, jar} {
		if _, err := os.Stat(p); err != nil {
			return "", missingError(fmt.Sprintf("the Bazel remote worker needs %s, which does not exist", p))
		}
	}
	var sources []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(path) == ".java" {
			sources = append(sources, path)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(sources)
	h := sha256.New()
	for _, p := range append(sources, jar) {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", p)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	out := filepath.Join(base, "gantry-tests", "bazel-worker-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(out, "done")); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// Compiled beside and renamed into place, so that test binaries compiling at
	// once never see half a directory.
	tmp, err := os.MkdirTemp(filepath.Dir(out), "compiling-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	args := append([]string{"-nowarn", "-d", tmp, "-cp", jar}, sources...)
	if out, err := exec.Command("javac", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the Bazel remote worker: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		if _, statErr := os.Stat(filepath.Join(out, "done")); statErr != nil {
			return "", err
		}
	}
	return out, nil
}

// LockedBuffer is a bytes.Buffer safe for a process's (or goroutine's) writes and
// the test's reads at once.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

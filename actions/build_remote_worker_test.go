package actions

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/internal/testreapi"
	"github.com/gantry-build/gantry/job"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"google.golang.org/protobuf/proto"
)

// The tests that run jobs in real worker processes re-execute the test binary
// with childEnv set; TestMain then runs the job handlers, as `gantry job` does.
const childEnv = "GANTRY_ACTIONS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(job.RunChild(Handlers()))
	}
	os.Exit(m.Run())
}

// countingProxy forwards TCP connections to addr and counts them; drop ends
// those open as a server going away would, and clientsGone says when the
// client has closed its side of them.
type countingProxy struct {
	addr  string
	conns atomic.Int32

	mu    sync.Mutex
	open  []*proxied
	gone  int
	moved chan struct{} // a client closed its side
}

type proxied struct{ client, server *net.TCPConn }

func startCountingProxy(t *testing.T, addr string) *countingProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: lis.Addr().String(), moved: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.client.Close()
			c.server.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			c := &proxied{client: in.(*net.TCPConn), server: out.(*net.TCPConn)}
			p.mu.Lock()
			p.open = append(p.open, c)
			p.mu.Unlock()
			wg.Add(2)
			go func() { // to the client: the server's end is the client's EOF
				defer wg.Done()
				_, _ = io.Copy(c.client, c.server)
				_ = c.client.CloseWrite()
			}()
			go func() { // to the server, until the client closes
				defer wg.Done()
				_, _ = io.Copy(c.server, c.client)
				c.server.Close()
				c.client.Close()
				p.mu.Lock()
				p.gone++
				p.mu.Unlock()
				select {
				case p.moved <- struct{}{}:
				default:
				}
			}()
		}
	}()
	return p
}

// drop closes the server's side of every connection open.
func (p *countingProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.server.Close()
	}
}

// waitGone waits until the clients have closed n connections in all.
func (p *countingProxy) waitGone(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		gone := p.gone
		p.mu.Unlock()
		if gone >= n {
			return
		}
		select {
		case <-p.moved:
		case <-timeout:
			t.Fatalf("the clients closed %d connections within 30s; want %d", gone, n)
		}
	}
}

// startEmptyBuildsFake starts a REAPI fake whose every build makes an empty
// install root: nothing runs.
func startEmptyBuildsFake(t *testing.T) *testreapi.Fake {
	t.Helper()
	fake := testreapi.StartFake(t, testreapi.FakeOptions{RequireMetadata: true})
	tree, err := proto.Marshal(&repb.Tree{Root: &repb.Directory{}})
	if err != nil {
		t.Fatal(err)
	}
	empty := &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "../install", TreeDigest: fake.PutBlob("", tree)}}}
	fake.Faults(func(f *testreapi.Faults) {
		f.Result = func(*repb.Action, *repb.Command) *repb.ExecuteResponse { return &repb.ExecuteResponse{Result: empty} }
	})
	return fake
}

// remoteThroughProxy starts an empty builds fake behind a counting proxy, and
// returns them with a new cache and the configuration of remote execution on
// the proxy.
func remoteThroughProxy(t *testing.T) (*testreapi.Fake, *countingProxy, *cache.Cache, rexec.Config) {
	t.Helper()
	fake := startEmptyBuildsFake(t)
	proxy := startCountingProxy(t, fake.Addr)
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fake, proxy, c, rexec.Config{Execution: remote.Spec{URL: "grpc://" + proxy.addr}}
}

// remoteSession runs n remote builds, one after another, through a pool of
// job workers of a session of its own (a Build's), and returns the session's
// invocation id, the workers' pids and the builds' logs. before, if not nil,
// runs before each build.
func remoteSession(t *testing.T, c *cache.Cache, cfg rexec.Config, n int, before func(i int)) (invocation string, pids map[int]bool, logged []string) {
	t.Helper()
	b := &Build{Remote: cfg}
	pool := job.NewWorkers(job.Options{Command: []string{os.Args[0]}, Env: append(os.Environ(), childEnv+"=1")})
	defer pool.Close()
	pids = map[int]bool{}
	logs := t.TempDir()
	for i := range n {
		if before != nil {
			before(i)
		}
		name := fmt.Sprintf("e%d.toml", i)
		spec := &buildSpec{CacheDir: c.Root, Project: "p", Element: name, Key: cache.DigestOf([]byte(logs + name)).Hash, Kind: "manual",
			Sandbox: "bwrap", WorkDir: c.TempName("build"),
			Bwrap: &element.Resolved{Env: map[string]string{}, Commands: map[string][]string{"build-commands": {"echo " + name}}}}
		spec.Remote, spec.RemoteInvocation = &cfg, b.sessionInvocation()
		log := filepath.Join(logs, name+".log")
		j := runBuildJob(t, pool, i, spec, log)
		b, _ := os.ReadFile(log)
		if out := j.Wait(); !out.Result.OK {
			t.Fatalf("build of %s: %+v\n%s", name, out, b)
		}
		pids[j.Pid()] = true
		logged = append(logged, string(b))
	}
	return b.invocation, pids, logged
}

// The remote builds a job worker runs share one client: one set of
// connections, each asking the Capabilities once, for all of them, and every
// call carries the session's invocation id; another session has another.
func TestRemoteBuildsShareTheWorkersClient(t *testing.T) {
	fake, proxy, c, cfg := remoteThroughProxy(t)
	const builds = 4
	calls := func(from int) (capabilities, executes int, invocations map[string]int) {
		invocations = map[string]int{}
		for _, call := range fake.Calls()[from:] {
			switch call.Method {
			case "GetCapabilities":
				capabilities++
			case "Execute":
				executes++
			}
			invocations[call.Metadata.GetToolInvocationId()]++
		}
		return capabilities, executes, invocations
	}

	first, pids, logs := remoteSession(t, c, cfg, builds, nil)
	// The remote slot goes back once the action is done, before its outputs are
	// fetched and cached (see Build.PrepareOn).
	for i, log := range logs {
		done, fetched := strings.Index(log, "[slot done]"), strings.Index(log, "remote build: action ")
		if done < 0 || fetched < 0 || done > fetched || !strings.Contains(log[:done], "[status] fetching outputs") {
			t.Errorf("build %d gave its slot back (at %d) not between its action's end and the import of its outputs (at %d):\n%s", i, done, fetched, log)
		}
	}
	caps, executes, invocations := calls(0)
	if len(pids) != 1 || executes != builds {
		t.Fatalf("%d builds ran in workers %v and executed %d actions; want one worker, %d actions", builds, pids, executes, builds)
	}
	// Two connections, the execution service's and the CAS store's, each
	// asking the Capabilities once.
	if n := proxy.conns.Load(); n != 2 || caps != 2 {
		t.Errorf("%d remote builds in one worker made %d connections and %d Capabilities calls; want 2 and 2", builds, n, caps)
	}
	if len(invocations) != 1 || invocations[first] == 0 {
		t.Errorf("the calls of one session carried the invocation ids %v; want only the session's %q", invocations, first)
	}

	seen := len(fake.Calls())
	second, _, _ := remoteSession(t, c, cfg, builds, nil)
	caps, _, invocations = calls(seen)
	if second == first || len(invocations) != 1 || invocations[second] == 0 {
		t.Errorf("a second session's calls carried the invocation ids %v (the first's was %q); want only its own", invocations, first)
	}
	if n := proxy.conns.Load(); n != 4 || caps != 2 {
		t.Errorf("a second session's worker made %d connections in all and %d Capabilities calls; want 4 and 2", n, caps)
	}
}

// A job worker's client whose connections the server closed is dialled again
// by the next build, in the same worker.
func TestRemoteBuildRedialsABrokenClient(t *testing.T) {
	_, proxy, c, cfg := remoteThroughProxy(t)
	_, pids, logged := remoteSession(t, c, cfg, 3, func(i int) {
		if i == 2 {
			proxy.drop()
			proxy.waitGone(t, 2)
		}
	})
	if len(pids) != 1 || proxy.conns.Load() != 4 {
		t.Errorf("3 builds, the server gone after the second, ran in workers %v and made %d connections; want one worker, 4 connections", pids, proxy.conns.Load())
	}
	if !strings.Contains(logged[2], "is broken: closed (<nil>), opening another") || !strings.Contains(logged[2], "remote build: connected to") {
		t.Errorf("the log of the build after the server went does not say its client was dialled again:\n%s", logged[2])
	}
}

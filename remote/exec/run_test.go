package exec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/testpki"
	"github.com/gantry-build/gantry/internal/testtree"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

func openTestCache(t testing.TB) *cache.Cache {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storeTree stores a tree of files (path → content; "->target" is a
// symlink) in c and returns its root's digest.
func storeTree(t testing.TB, c *cache.Cache, files map[string]string) cache.Digest {
	t.Helper()
	spec := map[string]string{}
	for p, content := range files {
		if target, ok := strings.CutPrefix(content, "->"); ok {
			spec[p] = "symlink:" + target
		} else if strings.HasSuffix(p, "/") {
			spec[strings.TrimSuffix(p, "/")] = "dir"
		} else {
			spec[p] = "file:" + content
		}
	}
	dir := t.TempDir()
	testtree.Write(t, dir, spec, nil)
	d, err := c.StoreTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dial connects to the fake at url, with a short backoff.
func dial(t testing.TB, url string, cfg Config) *Client {
	t.Helper()
	cfg.Execution.URL = url
	cl, err := DialSession(context.Background(), cfg, remote.NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	cl.retryBase = time.Millisecond
	t.Cleanup(func() { cl.Close() })
	return cl
}

// testBuild is a build of hello.toml over base.toml, with sources.
func testBuild(t testing.TB, c *cache.Cache) Build {
	return Build{
		Element:     "hello.toml",
		Deps:        []Layer{{Name: "base.toml", Files: storeTree(t, c, map[string]string{"bin/sh": "#!busybox", "etc/motd": "hi"}), At: "/"}},
		Sources:     storeTree(t, c, map[string]string{"Makefile": "all:", "hello.c": "int main(){}"}),
		BuildRoot:   "/gantry/build",
		InstallRoot: "/gantry/install",
		Steps: []Step{
			{Name: "build-commands", Commands: []string{"make"}},
			{Name: "install-commands", Commands: []string{"make DESTDIR=/gantry/install install"}},
		},
		Env: map[string]string{"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
	}
}

// installWork is a worker whose builds install usr/bin/hello and say so.
func installWork(files map[string]string) func(*fakeREAPI, *repb.Command, *repb.Directory) *repb.ActionResult {
	return func(srv *fakeREAPI, cmd *repb.Command, _ *repb.Directory) *repb.ActionResult {
		tree, _ := srv.putTree(files)
		return &repb.ActionResult{
			OutputDirectories: []*repb.OutputDirectory{{Path: outputNamed(cmd, "install"), TreeDigest: tree.Proto()}},
			StdoutRaw:         []byte("built\n"),
			ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: "worker-7"},
		}
	}
}

// startHello starts a fake whose builds install usr/bin/hello, set by knobs,
// and returns it, a client of it and a local cache.
func startHello(t *testing.T, knobs func(*fakeREAPI)) (*fakeREAPI, *Client, *cache.Cache) {
	t.Helper()
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/bin/hello": "ELF"})
	if knobs != nil {
		knobs(srv)
	}
	return srv, dial(t, srv.start(t), Config{}), openTestCache(t)
}

// outputNamed is the output path of cmd ending in name.
func outputNamed(cmd *repb.Command, name string) string {
	for _, p := range cmd.OutputPaths {
		if strings.HasSuffix(p, name) {
			return p
		}
	}
	return ""
}

func TestRunExecutesTheActionAndImportsItsOutputs(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/bin/hello": "ELF"})
	cl := dial(t, srv.start(t), Config{Platform: map[string]string{"OSFamily": "linux", "ISA": "aarch64", "pool": "big"}, Timeout: time.Hour})
	c := openTestCache(t)
	b := testBuild(t, c)
	b.Platform = map[string]string{"pool": "huge"}
	var stages []Stage
	b.Status = func(s Stage) { stages = append(stages, s) }
	res, err := cl.Run(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Worker != "worker-7" || string(res.Stdout) != "built\n" || res.Cached {
		t.Errorf("result: exit %d, worker %q, stdout %q, cached %v; want 0, worker-7, built, false", res.ExitCode, res.Worker, res.Stdout, res.Cached)
	}
	if res.Message != "details: http://fake/operations/x" {
		t.Errorf("message %q, want the server's", res.Message)
	}
	if want := []Stage{Uploading, Queued, Fetching}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v", stages, want)
	}
	var got []string
	if err := c.WalkTree(res.Install, func(e cache.TreeEntry) error { got = append(got, e.Path); return nil }); err != nil {
		t.Fatalf("the install tree is not in the local CAS: %v", err)
	}
	if !slices.Contains(got, "usr/bin/hello") {
		t.Errorf("install tree %v, want usr/bin/hello", got)
	}

	cmd, act := srv.commands[0], srv.actions[0]
	if cmd.WorkingDirectory != "gantry/build" {
		t.Errorf("working_directory %q, want gantry/build", cmd.WorkingDirectory)
	}
	if want := []string{"../failed-build", "../install"}; !slices.Equal(cmd.OutputPaths, want) || !slices.Equal(cmd.OutputDirectories, want) {
		t.Errorf("output_paths %v, output_directories %v; want both %v", cmd.OutputPaths, cmd.OutputDirectories, want)
	}
	if !slices.Equal(cmd.Arguments[:3], []string{"/bin/sh", "-e", "-c"}) || !strings.Contains(cmd.Arguments[3], "'[gantry] install-commands 1/1: make DESTDIR=/gantry/install install'") {
		t.Errorf("arguments %q: want /bin/sh -e -c and a labelled script", cmd.Arguments)
	}
	var env []string
	for _, e := range cmd.EnvironmentVariables {
		env = append(env, e.Name+"="+e.Value)
	}
	if want := []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}; !slices.Equal(env, want) {
		t.Errorf("environment %v, want %v", env, want)
	}
	var props []string
	for _, p := range act.Platform.GetProperties() {
		props = append(props, p.Name+"="+p.Value)
	}
	if want := []string{"ISA=aarch64", "OSFamily=linux", "pool=huge"}; !slices.Equal(props, want) {
		t.Errorf("platform %v, want %v", props, want)
	}
	if act.Timeout.AsDuration() != time.Hour || act.DoNotCache {
		t.Errorf("timeout %v, do_not_cache %v; want 1h, false", act.Timeout.AsDuration(), act.DoNotCache)
	}
}

func TestRunInputRootIsTheMergedTrees(t *testing.T) {
	srv := newFakeREAPI()
	var root *repb.Directory
	inner := installWork(map[string]string{"x": "x"})
	srv.work = func(s *fakeREAPI, cmd *repb.Command, r *repb.Directory) *repb.ActionResult {
		root = r
		return inner(s, cmd, r)
	}
	cl := dial(t, srv.start(t), Config{})
	c := openTestCache(t)
	b := testBuild(t, c)
	// A dependency that installs into the install root: it is not in the input root.
	b.Deps = append(b.Deps, Layer{Name: "odd.toml", Files: storeTree(t, c, map[string]string{"gantry/install/x": "x", "etc/motd": "other"}), At: "/"})
	res, err := cl.Run(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range root.Directories {
		names = append(names, d.Name+"/")
	}
	if want := []string{"bin/", "dev/", "etc/", "gantry/", "proc/", "tmp/"}; !slices.Equal(names, want) {
		t.Errorf("input root %v, want %v", names, want)
	}
	var paths []string
	c.WalkTree(srv.actionRoot(t), func(e cache.TreeEntry) error { paths = append(paths, e.Path); return nil })
	for _, want := range []string{"gantry/build/Makefile", "bin/sh", "etc/motd"} {
		if !slices.Contains(paths, want) {
			t.Errorf("input root lacks %s: %v", want, paths)
		}
	}
	if slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, "gantry/install") }) {
		t.Errorf("input root has the install root: %v", paths)
	}
	if len(res.Overlaps) != 1 || res.Overlaps[0] != (Overlap{Path: "/etc/motd", By: 1, Over: 0}) {
		t.Errorf("overlaps %v, want /etc/motd by odd.toml over base.toml", res.Overlaps)
	}
}

// actionRoot is the input root of the first action the server ran (its
// blobs are in the client's cache too).
func (srv *fakeREAPI) actionRoot(t testing.TB) cache.Digest {
	return cache.DigestFromProto(srv.actions[0].InputRootDigest)
}

func TestRunActionCacheHitSkipsExecute(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/bin/hello": "ELF"})
	url := srv.start(t)
	c := openTestCache(t)
	if _, err := dial(t, url, Config{}).Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	// Another machine, a clean cache: the action cache answers.
	c2 := openTestCache(t)
	res, err := dial(t, url, Config{}).Run(context.Background(), c2, testBuild(t, c2))
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.count("Execute"); n != 1 {
		t.Errorf("%d Execute calls, want 1: the second build is an action cache hit", n)
	}
	if !res.Cached || res.Install.IsZero() || !c2.HasBlob(cache.DigestOf([]byte("ELF"))) {
		t.Errorf("cached %v, install %v, hello fetched %v: want a hit with its outputs fetched", res.Cached, res.Install, c2.HasBlob(cache.DigestOf([]byte("ELF"))))
	}
	if got, want := srv.methods(), []string{"GetActionResult", "Execute", "GetActionResult"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}

func TestRunExecutesAgainWhenTheCachedOutputsAreGone(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/bin/hello": "ELF"})
	url := srv.start(t)
	c := openTestCache(t)
	if _, err := dial(t, url, Config{}).Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	delete(srv.blobs, cache.DigestOf([]byte("ELF"))) // evicted: the action cache names it still
	srv.mu.Unlock()
	c2 := openTestCache(t)
	res, err := dial(t, url, Config{}).Run(context.Background(), c2, testBuild(t, c2))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(srv.skipLookups, []bool{false, true}) || res.Cached || !c2.HasBlob(cache.DigestOf([]byte("ELF"))) {
		t.Errorf("Execute calls skipping the cache %v, cached %v: want a second Execute skipping it, and its outputs", srv.skipLookups, res.Cached)
	}
}

func TestRunUploadsOnlyMissingBlobs(t *testing.T) {
	srv, cl, c := startHello(t, nil)
	b := testBuild(t, c)
	have := srv.put([]byte("#!busybox")) // the server has bin/sh already
	if _, err := cl.Run(context.Background(), c, b); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(srv.uploaded, have) {
		t.Errorf("uploaded %v, which the server had", have)
	}
	for _, want := range []string{"hi", "all:", "int main(){}"} {
		if !slices.Contains(srv.uploaded, cache.DigestOf([]byte(want))) {
			t.Errorf("blob %q not uploaded", want)
		}
	}
	// Once more: the server has everything, nothing is uploaded again.
	n := len(srv.uploaded)
	srv.ac = map[cache.Digest]*repb.ActionResult{}
	if _, err := cl.Run(context.Background(), c, b); err != nil {
		t.Fatal(err)
	}
	if len(srv.uploaded) != n {
		t.Errorf("the second run uploaded %v", srv.uploaded[n:])
	}
}

func TestRunBrokenStreamWaitsForTheExecution(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.breakStreams = 1
	})
	res, err := cl.Run(context.Background(), c, testBuild(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := srv.methods(), []string{"GetActionResult", "Execute", "WaitExecution"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if res.Install.IsZero() {
		t.Error("no install tree")
	}
}

func TestRunOperationGoneExecutesAgain(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.breakStreams, s.waitNotFound = 1, 1
	})
	if _, err := cl.Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.methods(), []string{"GetActionResult", "Execute", "WaitExecution", "Execute"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}

func TestRunCancelledCancelsTheOperation(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.hold = true
	})
	b := testBuild(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	b.Status = func(s Stage) {
		if s == Executing {
			cancel()
		}
	}
	done := make(chan error, 1)
	go func() { _, err := cl.Run(ctx, c, b); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !slices.Equal(srv.cancelled, []string{"operations/x"}) {
		t.Errorf("cancelled %v, want [operations/x]", srv.cancelled)
	}
}

func TestRunBacksOffWhileUnavailable(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.unavailable = 2
	})
	if _, err := cl.Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	if n := srv.count("Execute"); n != 3 {
		t.Errorf("%d Execute calls, want 3", n)
	}

	srv.unavailable = 10
	srv.ac = map[cache.Digest]*repb.ActionResult{}
	_, err := cl.Run(context.Background(), c, testBuild(t, c))
	var infra *InfraError
	if !errors.As(err, &infra) {
		t.Fatalf("Run: %v, want an *InfraError", err)
	}
	want := "remote execution: executing action " + infra.Op[len("executing action "):] + ": Unavailable: the scheduler is restarting"
	if !strings.HasPrefix(infra.Op, "executing action ") || !strings.HasSuffix(infra.Op, "(4 attempts)") || err.Error() != want {
		t.Errorf("error %q, want %q after 4 attempts", err, want)
	}
}

// A CAS that is busy (RESOURCE_EXHAUSTED, as BuildGrid over its limit of
// concurrent calls) is waited out with backoff, not reported at once as the
// build's infrastructure failure; one that stays busy is, after 4 attempts.
func TestRunRetriesABusyCAS(t *testing.T) {
	srv, cl, c := startHello(t, nil)
	cl.retryBase = time.Millisecond
	srv.mu.Lock()
	srv.busy = 2
	srv.mu.Unlock()
	if _, err := cl.Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatalf("Run with the CAS busy twice: %v", err)
	}
	if n := srv.count("FindMissingBlobs"); n < 3 {
		t.Errorf("%d FindMissingBlobs calls, want the two refused ones and one more", n)
	}
	srv.mu.Lock()
	srv.busy, srv.ac = 100, map[cache.Digest]*repb.ActionResult{}
	srv.mu.Unlock()
	b := testBuild(t, c)
	b.Env["SALT"] = "another action"
	_, err := cl.Run(context.Background(), c, b)
	var infra *InfraError
	if !errors.As(err, &infra) || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Fatalf("Run with the CAS busy for good: %v, want an *InfraError saying ResourceExhausted", err)
	}
}

func TestRunStatusNotOKIsAnInfrastructureFailure(t *testing.T) {
	srv := newFakeREAPI()
	srv.badStatus = status.New(codes.Internal, "the bot died")
	cl := dial(t, srv.start(t), Config{})
	c := openTestCache(t)
	_, err := cl.Run(context.Background(), c, testBuild(t, c))
	var infra *InfraError
	if !errors.As(err, &infra) || !strings.HasSuffix(err.Error(), "(4 attempts): the server answered Internal: the bot died") {
		t.Fatalf("Run: %v, want an *InfraError ending (4 attempts): the server answered Internal: the bot died", err)
	}
	if n := srv.count("Execute"); n != 4 {
		t.Errorf("%d Execute calls, want 4 (retried)", n)
	}
	if len(srv.ac) != 0 {
		t.Error("the failure was cached")
	}
}

func TestRunNonZeroExitIsABuildFailureWithItsTrees(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = func(s *fakeREAPI, cmd *repb.Command, _ *repb.Directory) *repb.ActionResult {
		install, _ := s.putTree(map[string]string{"half": "h"})
		failed, _ := s.putTree(map[string]string{"Makefile": "all:", "hello.o": "obj"})
		stderr := s.put([]byte("[gantry] build-commands 1/1: make\nerror: no\n[gantry] build-commands 1/1 failed with exit code 2\n"))
		return &repb.ActionResult{ExitCode: 2, StderrDigest: stderr.Proto(), OutputDirectories: []*repb.OutputDirectory{
			{Path: outputNamed(cmd, "install"), TreeDigest: install.Proto()},
			{Path: outputNamed(cmd, "failed-build"), TreeDigest: failed.Proto()},
		}}
	}
	cl := dial(t, srv.start(t), Config{})
	c := openTestCache(t)
	res, err := cl.Run(context.Background(), c, testBuild(t, c))
	if err != nil {
		t.Fatalf("Run: %v, want a result", err)
	}
	if res.ExitCode != 2 || res.FailedCommand != "build-commands 1/1" || !strings.Contains(string(res.Stderr), "error: no") {
		t.Errorf("exit %d, failed command %q, stderr %q", res.ExitCode, res.FailedCommand, res.Stderr)
	}
	var paths []string
	if err := c.WalkTree(res.BuildTree, func(e cache.TreeEntry) error { paths = append(paths, e.Path); return nil }); err != nil || !slices.Contains(paths, "hello.o") {
		t.Errorf("build tree %v (%v), want hello.o in the local CAS", paths, err)
	}
	if res.Install.IsZero() {
		t.Error("no install tree")
	}
}

func TestRunFlagsEscapingSymlinks(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/lib/ok": "->../share/x", "usr/lib/abs": "->/etc/passwd",
		"usr/lib/out": "->../../../etc/shadow", "usr/share/x": "x"})
	cl := dial(t, srv.start(t), Config{})
	c := openTestCache(t)
	res, err := cl.Run(context.Background(), c, testBuild(t, c))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"../install/usr/lib/abs -> /etc/passwd", "../install/usr/lib/out -> ../../../etc/shadow"}
	if !slices.Equal(res.Flagged, want) {
		t.Errorf("flagged %q, want %q", res.Flagged, want)
	}
}

func TestEveryCallCarriesRequestMetadata(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.breakStreams = 1
	})
	dialed := len(srv.calls) // Capabilities, and a FindMissingBlobs connecting the CAS's connection
	if _, err := cl.Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, call := range srv.calls {
		seen[call.method] = true
		md := call.md
		if md == nil {
			t.Errorf("%s: no RequestMetadata", call.method)
			continue
		}
		if md.ToolDetails.GetToolName() != "gantry" || md.ToolDetails.GetToolVersion() == "" || md.ToolInvocationId != cl.invocation {
			t.Errorf("%s: RequestMetadata %v", call.method, md)
		}
		switch call.method {
		case "GetActionResult", "Execute", "WaitExecution", "FindMissingBlobs":
			if i >= dialed && md.ActionId != "hello.toml" {
				t.Errorf("%s: action id %q, want hello.toml", call.method, md.ActionId)
			}
		}
	}
	for _, m := range []string{"GetCapabilities", "GetActionResult", "FindMissingBlobs", "BatchUpdateBlobs", "Execute", "WaitExecution", "BatchReadBlobs"} {
		if !seen[m] {
			t.Errorf("no %s call", m)
		}
	}
}

func TestDialChecksCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fakeREAPI)
		want string
	}{
		{"exec disabled", func(s *fakeREAPI) { s.execDisabled = true },
			"remote execution service URL: it does not execute actions (exec_enabled is false): is it a cache only? set execution-service to an execution server"},
		{"no sha256", func(s *fakeREAPI) { s.digestFn = repb.DigestFunction_MD5 },
			"remote execution service URL: it does not execute with SHA-256 digests (it offers [MD5]); gantry's CAS is SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeREAPI()
			tc.set(srv)
			url := srv.start(t)
			_, err := DialSession(context.Background(), Config{Execution: remote.Spec{URL: url}}, remote.NewUUID())
			if want := strings.ReplaceAll(tc.want, "URL", url); err == nil || err.Error() != want {
				t.Errorf("Dial: %v, want %s", err, want)
			}
		})
	}
	_, err := DialSession(context.Background(), Config{Execution: remote.Spec{URL: "grpc://127.0.0.1:1"}, Wrap: "docker"}, remote.NewUUID())
	if want := `remote execution: wrap = "docker": the only wrapper is "bwrap"`; err == nil || err.Error() != want {
		t.Errorf("Dial: %v, want %s", err, want)
	}
}

func TestRunOverMutualTLSWithATokenAndAnInstance(t *testing.T) {
	pki := testpki.New(t)
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	srv := newFakeREAPI()
	srv.work = installWork(map[string]string{"usr/bin/hello": "ELF"})
	url := strings.Replace(srv.start(t, grpc.Creds(creds)), "grpc://", "grpcs://", 1)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := remote.Spec{URL: url, Instance: "main", ServerCA: pki.CA, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, TokenFile: token}
	cl := dial(t, url, Config{Execution: svc})
	c := openTestCache(t)
	if _, err := cl.Run(context.Background(), c, testBuild(t, c)); err != nil {
		t.Fatal(err)
	}
	for _, call := range srv.calls {
		if call.auth != "Bearer s3cret" {
			t.Errorf("%s: authorization %q, want Bearer s3cret", call.method, call.auth)
		}
		if call.instance != "" && call.instance != "main" {
			t.Errorf("%s: instance %q, want main", call.method, call.instance)
		}
	}
	if !slices.Equal(srv.execInstances, []string{"main"}) {
		t.Errorf("Execute instances %q, want [main]", srv.execInstances)
	}

	svc.TokenFile = filepath.Join(t.TempDir(), "absent")
	_, err = DialSession(context.Background(), Config{Execution: svc}, remote.NewUUID())
	if want := "remote execution: remote " + url + ": reading token-file: open " + svc.TokenFile + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("Dial: %v, want %s", err, want)
	}
}

func TestRunImportsARootDirectoryDigestOnly(t *testing.T) {
	srv := newFakeREAPI()
	srv.work = func(s *fakeREAPI, cmd *repb.Command, _ *repb.Directory) *repb.ActionResult {
		_, root := s.putTree(map[string]string{"usr/share/doc/x": "doc"})
		return &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: outputNamed(cmd, "install"), RootDirectoryDigest: root.Proto()}}}
	}
	cl := dial(t, srv.start(t), Config{})
	c := openTestCache(t)
	res, err := cl.Run(context.Background(), c, testBuild(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(t, c, res.Install), []string{"usr/", "usr/share/", "usr/share/doc/", "usr/share/doc/x = doc"}; !slices.Equal(got, want) {
		t.Errorf("install tree %q, want %q", got, want)
	}
}

func TestDialUnreachableIsAnInfrastructureFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "grpc://" + lis.Addr().String()
	lis.Close() // nothing listens there now
	_, err = DialSession(context.Background(), Config{Execution: remote.Spec{URL: url}}, remote.NewUUID())
	var infra *InfraError
	want := "remote execution: asking the execution service " + url + " its capabilities: Unavailable: "
	if !errors.As(err, &infra) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Dial: %v, want an *InfraError starting %q", err, want)
	}
}

// An ExecuteResponse refusing the action as configured (a timeout over the
// server's maximum: INVALID_ARGUMENT) fails at once, marked Refused: sending it
// again cannot help.
func TestRunRefusedActionIsNotRetried(t *testing.T) {
	srv, cl, c := startHello(t, func(s *fakeREAPI) {
		s.badStatus = status.New(codes.InvalidArgument, "Action timeout is larger than the server's maximum execution timeout.")
	})
	_, err := cl.Run(context.Background(), c, testBuild(t, c))
	var infra *InfraError
	if !errors.As(err, &infra) || !infra.Refused {
		t.Fatalf("Run: %v, want a Refused *InfraError", err)
	}
	if n := srv.count("Execute"); n != 1 {
		t.Errorf("%d Execute calls, want 1", n)
	}
}

package cli

// End-to-end tests of build-once leases: several real `gantry build` sessions with
// empty local caches sharing one real `gantry cache serve`.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/cache/serve"
)

// leaseProjects writes the same project n times (each with its own empty cache), its
// push remote s over HTTP with the test's token. elements maps element files to
// their content.
func leaseProjects(t *testing.T, s *serveProc, n int, elements map[string]string) []*e2eProject {
	t.Helper()
	return leaseProjectsAt(t, "http://"+s.http, s, n, elements)
}

// leaseProjectsAt is leaseProjects with the push remote at url (the server's HTTP
// or gRPC address, with or without a path prefix).
func leaseProjectsAt(t *testing.T, url string, s *serveProc, n int, elements map[string]string) []*e2eProject {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"project.toml": projectTOML("app.toml") +
		fmt.Sprintf("\n[[remote]]\nurl = %q\npush = true\ntoken-file = %q\n", url, tokenFile)}
	for name, content := range elements {
		files["elements/"+name] = content
	}
	var ps []*e2eProject
	for range n {
		ps = append(ps, newE2EProject(t, files))
	}
	return ps
}

// Three sessions of the same project at once, one server: every element is built
// exactly once across the three, and all three succeed.
func TestE2ELeasesBuildOnce(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	// Each build takes a moment, so that the sessions overlap: without leases each
	// would build everything.
	build := "sleep 0.3"
	ps := leaseProjects(t, s, 3, map[string]string{
		"base.toml": manualElement(nil, build),
		"a.toml":    manualElement([]string{"base.toml"}, build+"; echo a"),
		"b.toml":    manualElement([]string{"base.toml"}, build+"; echo b"),
		"app.toml":  manualElement([]string{"a.toml", "b.toml"}, build+"; echo app"),
	})
	var runs []*gantryProc
	for _, p := range ps {
		runs = append(runs, p.start("build", "--ui", "json", "--sandbox", "host"))
	}
	builds := map[string]int{}
	for i, g := range runs {
		if code := g.wait(e2eTimeout); code != 0 {
			t.Fatalf("session %d: exit code %d\n%s", i, code, g.output())
		}
		for _, e := range g.snapshot() {
			if e.is("job-start", "build", "") {
				builds[e.Element]++
			}
		}
	}
	for _, el := range []string{"base.toml", "a.toml", "b.toml", "app.toml"} {
		if builds[el] != 1 {
			t.Errorf("%s was built %d times across the three sessions, want once", el, builds[el])
		}
		for i, p := range ps {
			if st := p.state(el); st != "cached" {
				t.Errorf("session %d: %s is %s, want cached", i, el, st)
			}
		}
	}
	if t.Failed() {
		for i, g := range runs {
			t.Logf("session %d:\n%s", i, g.output())
		}
	}
}

// Three sessions of 2 builders each share 12 independent elements of 2 s (and the
// target that needs them all) through one server, over HTTP under a path prefix and
// over gRPC: every element is built once, no session holds more leases than it has
// builders (so it never builds more than 2 at once), and the work is spread: each
// session builds at least two. The wall time against one session alone is a figure
// of bench/leases.sh, not asserted here.
func TestE2ELeasesShareWork(t *testing.T) {
	t.Parallel()
	elements := map[string]string{}
	var deps []string
	for i := range 12 {
		name := fmt.Sprintf("e%02d.toml", i)
		elements[name] = manualElement(nil, fmt.Sprintf("sleep 2; echo %d", i))
		deps = append(deps, name)
	}
	elements["app.toml"] = manualElement(deps, "true")
	for _, tc := range []struct {
		name string
		url  func(s *serveProc) string
	}{
		{"http-prefix", func(s *serveProc) string { return "http://" + s.http + "/team/" }},
		{"grpc", func(s *serveProc) string { return "grpc://" + s.grpc }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t)
			ps := leaseProjectsAt(t, tc.url(s), s, 3, elements)
			var runs []*gantryProc
			for _, p := range ps {
				runs = append(runs, p.start("build", "--ui", "json", "--sandbox", "host", "--builders", "2"))
			}
			builds := map[string]int{}
			for i, g := range runs {
				if code := g.wait(e2eTimeout); code != 0 {
					t.Fatalf("session %d: exit code %d\n%s", i, code, g.output())
				}
				running, most, mine := 0, 0, 0
				for _, e := range g.snapshot() {
					switch {
					case e.is("job-start", "build", ""):
						builds[e.Element]++
						running++
						most = max(most, running)
						if e.Element != "app.toml" {
							mine++
						}
					case e.is("job-end", "build", ""):
						running--
					}
				}
				if most > 2 {
					t.Errorf("session %d ran %d builds at once with 2 builders: it leased more than it could build", i, most)
				}
				if mine < 2 {
					t.Errorf("session %d built %d of the 12 elements, want at least 2: the leases were not shared", i, mine)
				}
				t.Logf("session %d built %d of the 12", i, mine)
			}
			for el := range elements {
				if n := builds[el]; n != 1 {
					t.Errorf("%s was built %d times across the three sessions, want once", el, n)
				}
			}
			if t.Failed() {
				for i, g := range runs {
					t.Logf("session %d:\n%s", i, g.output())
				}
			}
		})
	}
}

// The session holding a lease is killed (kill -9) while it builds: its lease expires
// after the default TTL, a waiting session takes it over within 5 s of the kill,
// builds and pushes, and succeeds.
func TestE2ELeaseTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	// The first build of base.toml hangs (it is the one killed); the next goes through.
	first := filepath.Join(t.TempDir(), "first")
	ps := leaseProjects(t, s, 2, map[string]string{
		"base.toml": manualElement(nil, fmt.Sprintf("if mkdir %s; then sleep 600; fi", first)),
		"app.toml":  manualElement([]string{"base.toml"}, "true"),
	})
	holder := ps[0].start("build", "--ui", "json", "--sandbox", "host")
	killGroupOnCleanup(t, holder.pid())
	holder.waitEvent("job-start", "build", "base.toml")
	eventually(t, e2eTimeout, "the first build of base.toml to start its command", func() bool {
		_, err := os.Stat(first)
		return err == nil
	})
	waiter := ps[1].start("build", "--ui", "json", "--sandbox", "host")
	waited := waiter.waitEvent("job-end", "pull", "base.toml")
	if waited.Result != "waiting" || !strings.Contains(waited.Reason, "waiting for another builder of base.toml (lease held by ci") {
		t.Fatalf("the second session's first pull of base.toml ended %q (%s), want waiting for the lease holder\n%s",
			waited.Result, waited.Reason, waiter.output())
	}
	if err := syscall.Kill(holder.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waiter.waitEvent("job-start", "build", "base.toml")
	if took := time.Since(killedAt); took > takeoverBound {
		t.Errorf("the waiter started building base.toml %v after the holder was killed, want within %v (lease TTL %v)",
			took.Round(time.Millisecond), takeoverBound, serve.DefaultLeaseTTL)
	}
	if code := waiter.wait(e2eTimeout); code != 0 {
		t.Fatalf("the waiting session failed after the holder was killed: exit code %d\n%s", code, waiter.output())
	}
	if _, built := findEvent(waiter.snapshot(), "job-start", "build", "base.toml"); !built {
		t.Fatalf("the waiting session did not build base.toml after taking the lease over:\n%s", waiter.output())
	}
	for _, el := range []string{"base.toml", "app.toml"} {
		if st := ps[1].state(el); st != "cached" {
			t.Errorf("%s is %s after the takeover, want cached", el, st)
		}
	}
}

// takeoverBound is how soon after its holder is killed a lease is taken over: the
// default TTL (3 s) and one wait of the waiter (at most a second).
const takeoverBound = 5 * time.Second

// A session whose build fails gives its lease up at once, though it goes on (with
// other work): the waiting session takes it over without waiting for the holder's
// end (its renewals would keep the lease until then).
func TestE2ELeaseReleasedOnFailure(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	dir := t.TempDir()
	first, fail, finish := filepath.Join(dir, "first"), filepath.Join(dir, "fail"), filepath.Join(dir, "finish")
	waitFor := func(file string) string { return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", file) }
	// The first build of base.toml fails once the test says so; the next succeeds.
	// other.toml keeps the holder's session going until the test ends it.
	ps := leaseProjects(t, s, 2, map[string]string{
		"base.toml":  manualElement(nil, fmt.Sprintf("if mkdir %s; then %s; exit 1; fi", first, waitFor(fail))),
		"app.toml":   manualElement([]string{"base.toml"}, "true"),
		"other.toml": manualElement(nil, waitFor(finish)),
	})
	holder := ps[0].start("build", "--ui", "json", "--sandbox", "host", "--on-error", "continue", "app.toml", "other.toml")
	defer os.WriteFile(finish, nil, 0o644)
	holder.waitEvent("job-start", "build", "base.toml")
	waiter := ps[1].start("build", "--ui", "json", "--sandbox", "host")
	if e := waiter.waitEvent("job-end", "pull", "base.toml"); e.Result != "waiting" {
		t.Fatalf("the second session's pull of base.toml ended %q, want waiting\n%s", e.Result, waiter.output())
	}
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := waiter.wait(e2eTimeout); code != 0 {
		t.Fatalf("the waiting session: exit code %d\n%s", code, waiter.output())
	}
	if _, built := findEvent(waiter.snapshot(), "job-start", "build", "base.toml"); !built {
		t.Fatalf("the waiting session did not build base.toml:\n%s", waiter.output())
	}
	if err := os.WriteFile(finish, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(e2eTimeout); code == 0 {
		t.Fatalf("the holder's build of base.toml should have failed:\n%s", holder.output())
	}
}

// The lease client of the HTTP store against gantry's server: granted, told to wait
// (with the holder's name), renewed, given up and taken with a higher token; an entry
// pushed with the older token is refused over HTTP and gRPC (header and metadata).
// Against a server without leases, Lease says ErrNoLeases.
func TestE2ELeaseClient(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(url string) remote.Store {
		t.Helper()
		st, err := remote.Open(remote.Spec{URL: url, Push: true, TokenFile: tokenFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	// Over gRPC, the same table through gantry.lease.v1.Leases; over HTTP under a path
	// prefix, as behind a path-prefix proxy.
	for _, url := range []string{"grpc://" + s.grpc, "http://" + s.http + "/team"} {
		leaser := open(url).(remote.Leaser)
		key := "lease-client-test-key " + url
		first, err := leaser.Lease(ctx, key, 0)
		if err != nil || !first.Granted || first.Token == 0 {
			t.Fatalf("%s: first ask: %+v, %v: want the lease", url, first, err)
		}
		if r, err := leaser.Lease(ctx, key, 0); err != nil || r.Granted || r.Present || r.WaitMs <= 0 || r.Holder != "ci" {
			t.Fatalf("%s: second ask: %+v, %v: want to wait for holder ci", url, r, err)
		}
		if err := leaser.ReleaseLease(ctx, key, first.Token); err != nil {
			t.Fatal(err)
		}
		if r, err := leaser.Lease(ctx, key, 0); err != nil || !r.Granted || r.Token <= first.Token {
			t.Fatalf("%s: ask after the holder gave up: %+v, %v: want a lease with a token above %d", url, r, err, first.Token)
		}
	}
	if err := open("grpc://"+plainREAPIServer(t)).(remote.Leaser).ReleaseLease(ctx, "k", 0); !errors.Is(err, remote.ErrNoLeases) {
		t.Errorf("ReleaseLease against a gRPC server without leases: %v, want ErrNoLeases", err)
	}

	leaser := open("http://" + s.http).(remote.Leaser)
	key := "lease-client-test-key"
	first, err := leaser.Lease(ctx, key, 0)
	if err != nil || !first.Granted || first.Token == 0 {
		t.Fatalf("first ask: %+v, %v: want the lease", first, err)
	}
	if r, err := leaser.Lease(ctx, key, 0); err != nil || r.Granted || r.Present || r.WaitMs <= 0 || r.Holder != "ci" {
		t.Fatalf("second ask: %+v, %v: want to wait for holder ci", r, err)
	}
	if r, err := leaser.Lease(ctx, key, first.Token); err != nil || !r.Granted || r.Token != first.Token {
		t.Fatalf("renewal: %+v, %v", r, err)
	}
	if err := leaser.ReleaseLease(ctx, key, first.Token); err != nil {
		t.Fatal(err)
	}
	second, err := leaser.Lease(ctx, key, 0)
	if err != nil || !second.Granted || second.Token <= first.Token {
		t.Fatalf("ask after the holder gave up: %+v, %v: want a lease with a token above %d", second, err, first.Token)
	}
	_, h := randomBlob(t, 10)
	d := cache.Digest{Hash: h, Size: 10}
	entry := &remote.Entry{Files: d, Tree: d, Record: d}
	for _, url := range []string{"http://" + s.http, "grpc://" + s.grpc} {
		err := open(url).UpdateEntry(remote.WithFencingToken(ctx, first.Token), key, entry)
		if !remote.IsKind(err, remote.Refused) {
			t.Errorf("%s: an entry pushed with the superseded token: %v, want refused", url, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: http.NotFoundHandler()}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	if _, err := open("http://"+ln.Addr().String()).(remote.Leaser).Lease(ctx, key, 0); !errors.Is(err, remote.ErrNoLeases) {
		t.Errorf("Lease against a server without leases: %v, want ErrNoLeases", err)
	}
}

// plainREAPIServer is the address of a gRPC server on 127.0.0.1 that serves the REAPI CAS and
// nothing of gantry's own (as any other REAPI server): closed when the test ends.
func plainREAPIServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	repb.RegisterContentAddressableStorageServer(g, repb.UnimplementedContentAddressableStorageServer{})
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

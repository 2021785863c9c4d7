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

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// leaseProjects writes the same project n times (each with its own empty cache), its
// push remote s over HTTP with the test's token. elements maps element files to
// their content.
func leaseProjects(t *testing.T, s *serveProc, n int, elements map[string]string) []*e2eProject {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"project.toml": projectTOML("app.toml") +
		fmt.Sprintf("\n[[remote]]\nurl = %q\npush = true\ntoken-file = %q\n", "http://"+s.http, tokenFile)}
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

// The session holding a lease is killed (kill -9) while it builds: its lease expires
// after the TTL, a waiting session takes it over, builds and pushes, and succeeds.
func TestE2ELeaseTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--lease-ttl", "2s")
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
	if code := waiter.wait(e2eTimeout); code != 0 {
		t.Fatalf("the waiting session failed after the holder was killed: exit code %d\n%s", code, waiter.output())
	}
	if _, built := findEvent(waiter.snapshot(), "job-start", "build", "base.toml"); !built {
		t.Fatalf("the waiting session did not build base.toml after taking the lease over:\n%s", waiter.output())
	}
	t.Logf("the waiter finished %v after the kill (lease TTL 2s)", time.Since(killedAt).Round(time.Millisecond))
	for _, el := range []string{"base.toml", "app.toml"} {
		if st := ps[1].state(el); st != "cached" {
			t.Errorf("%s is %s after the takeover, want cached", el, st)
		}
	}
}

// A session whose build fails gives its lease up at once, though it goes on (with
// other work): the waiting session takes it over without waiting for the TTL (30 s
// here, beyond the test's timeout) or for the holder's end.
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

package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/rwapipb"
	"github.com/gantry-build/gantry/internal/testreapi"
	"github.com/gantry-build/gantry/sandbox"
)

// fakeBots is a Bots service that records what the bot reports. Like BuildGrid,
// it holds an OK bot's UpdateBotSession until the call ends and answers any
// other at once; offer, if set, goes out as a lease in the next answer.
type fakeBots struct {
	rwapipb.UnimplementedBotsServer
	repb.UnimplementedContentAddressableStorageServer

	mu       sync.Mutex
	sessions []*rwapipb.BotSession // every CreateBotSession and UpdateBotSession, in order
	changed  chan struct{}         // closed and replaced on each
	offer    *rwapipb.Lease
	// busy FindMissingBlobs calls are answered RESOURCE_EXHAUSTED, as BuildGrid
	// answers when its threads are all taken; finds counts the calls.
	busy, finds atomic.Int32
}

func (f *fakeBots) record(s *rwapipb.BotSession) *rwapipb.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions = append(f.sessions, proto.Clone(s).(*rwapipb.BotSession))
	close(f.changed)
	f.changed = make(chan struct{})
	offer := f.offer
	f.offer = nil
	return offer
}

func (f *fakeBots) CreateBotSession(_ context.Context, req *rwapipb.CreateBotSessionRequest) (*rwapipb.BotSession, error) {
	f.record(req.GetBotSession())
	s := proto.Clone(req.GetBotSession()).(*rwapipb.BotSession)
	s.Name = req.GetParent() + "/session-1"
	return s, nil
}

func (f *fakeBots) UpdateBotSession(ctx context.Context, req *rwapipb.UpdateBotSessionRequest) (*rwapipb.BotSession, error) {
	s := proto.Clone(req.GetBotSession()).(*rwapipb.BotSession)
	if offer := f.record(s); offer != nil {
		s.Leases = append(s.Leases, offer)
		return s, nil
	}
	if s.GetStatus() == rwapipb.BotStatus_OK {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s, nil
}

func (f *fakeBots) FindMissingBlobs(_ context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	f.finds.Add(1)
	if f.busy.Add(-1) >= 0 {
		return nil, grpcstatus.Error(codes.ResourceExhausted, "Concurrent RPC limit exceeded!")
	}
	return &repb.FindMissingBlobsResponse{MissingBlobDigests: req.GetBlobDigests()}, nil
}

// waitSession waits until a reported session satisfies cond and returns it.
func (f *fakeBots) waitSession(t *testing.T, what string, cond func(*rwapipb.BotSession) bool) *rwapipb.BotSession {
	t.Helper()
	timeout := time.After(30 * time.Second)
	seen := 0
	for {
		f.mu.Lock()
		sessions, changed := f.sessions[seen:], f.changed
		seen = len(f.sessions)
		f.mu.Unlock()
		for _, s := range sessions {
			if cond(s) {
				return s
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no session reported %s within 30s", what)
		}
	}
}

func reported(want rwapipb.BotStatus) func(*rwapipb.BotSession) bool {
	return func(s *rwapipb.BotSession) bool { return s.GetStatus() == want }
}

// startFakeBots serves a fakeBots (Bots and CAS) on 127.0.0.1.
func startFakeBots(t *testing.T) (*fakeBots, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBots{changed: make(chan struct{})}
	srv := grpc.NewServer()
	rwapipb.RegisterBotsServer(srv, f)
	repb.RegisterContentAddressableStorageServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f, "grpc://" + l.Addr().String()
}

// runBot runs a bot with cfg's blanks filled against url until the test ends.
func runBot(t *testing.T, url string, cfg Config) *testreapi.LockedBuffer {
	t.Helper()
	saved := workerUnhealthyPoll
	workerUnhealthyPoll = 10 * time.Millisecond
	log := &testreapi.LockedBuffer{}
	cfg.Bots, cfg.BotID, cfg.Sandbox, cfg.Log = remote.Spec{URL: url, Instance: "farm"}, "health-bot", sandbox.Host, log
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	cfg.HealthInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		workerUnhealthyPoll = saved
		if t.Failed() {
			t.Logf("the bot's log:\n%s", log)
		}
	})
	return log
}

// A failing sandbox self-check makes the bot UNHEALTHY from its first report, said
// once in its log however many checks fail; passing again makes it OK.
func TestHealthSandboxCheck(t *testing.T) {
	f, url := startFakeBots(t)
	var broken atomic.Bool
	broken.Store(true)
	log := runBot(t, url, Config{SandboxCheck: func() error {
		if broken.Load() {
			return errors.New("bwrap test failed: no user namespaces")
		}
		return nil
	}})
	first := f.waitSession(t, "anything", func(*rwapipb.BotSession) bool { return true })
	if first.GetStatus() != rwapipb.BotStatus_UNHEALTHY {
		t.Fatalf("CreateBotSession's status %v, want UNHEALTHY", first.GetStatus())
	}
	// Several reports (and more checks) later, the reason is still said once.
	for range 5 {
		f.waitSession(t, "UNHEALTHY again", reported(rwapipb.BotStatus_UNHEALTHY))
	}
	want := "gantry worker health-bot: UNHEALTHY, taking no leases: the sandbox fails its self-check: bwrap test failed: no user namespaces\n"
	if got := strings.Count(log.String(), "UNHEALTHY"); got != 1 || !strings.HasPrefix(log.String(), want) {
		t.Fatalf("log:\n%s\nwant the line %q once, first", log, want)
	}
	broken.Store(false)
	f.waitSession(t, "OK", reported(rwapipb.BotStatus_OK))
	if want := "gantry worker health-bot: healthy again (was: the sandbox fails its self-check: bwrap test failed: no user namespaces)\n"; !strings.Contains(log.String(), want) {
		t.Fatalf("log:\n%s\nwant %q", log, want)
	}
}

// A work directory where no action can be staged makes the bot UNHEALTHY until it
// can again.
func TestHealthWorkDirNotWritable(t *testing.T) {
	f, url := startFakeBots(t)
	dir := t.TempDir()
	log := runBot(t, url, Config{WorkDir: dir})
	f.waitSession(t, "OK", reported(rwapipb.BotStatus_OK))
	run := filepath.Join(dir, "run")
	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(run, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitSession(t, "UNHEALTHY", reported(rwapipb.BotStatus_UNHEALTHY))
	want := fmt.Sprintf("gantry worker health-bot: UNHEALTHY, taking no leases: the work directory %s is not writable (mkdir %s: not a directory): fix its permissions or give another --work-dir\n", dir, run)
	if !strings.Contains(log.String(), want) {
		t.Fatalf("log:\n%s\nwant %q", log, want)
	}
	if err := os.Remove(run); err != nil {
		t.Fatal(err)
	}
	f.waitSession(t, "OK again", reported(rwapipb.BotStatus_OK))
}

// A work directory with less free space than MinFree is full.
func TestHealthWorkDirFull(t *testing.T) {
	f, url := startFakeBots(t)
	dir := t.TempDir()
	log := runBot(t, url, Config{WorkDir: dir, MinFree: 1 << 60})
	f.waitSession(t, "UNHEALTHY", reported(rwapipb.BotStatus_UNHEALTHY))
	want := regexp.MustCompile(`(?m)^gantry worker health-bot: UNHEALTHY, taking no leases: the work directory ` + regexp.QuoteMeta(dir) +
		` is full: [0-9]+ MiB free, under the 1099511627776 MiB needed: free space or give another --work-dir$`)
	if !want.MatchString(log.String()) {
		t.Fatalf("log:\n%s\nwant a line matching %s", log, want)
	}
}

// A CAS that does not answer two checks in a row makes the bot UNHEALTHY.
func TestHealthCASUnreachable(t *testing.T) {
	f, url := startFakeBots(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cas := "grpc://" + l.Addr().String()
	l.Close() // nothing listens there now
	log := runBot(t, url, Config{CAS: remote.Spec{URL: cas, Instance: "farm"}})
	f.waitSession(t, "UNHEALTHY", reported(rwapipb.BotStatus_UNHEALTHY))
	want := regexp.MustCompile(`(?m)^gantry worker health-bot: UNHEALTHY, taking no leases: the CAS ` + regexp.QuoteMeta(cas) +
		` has not answered since [0-9:]+ \(.*\): check that it runs and that --cas reaches it$`)
	if !want.MatchString(log.String()) {
		t.Fatalf("log:\n%s\nwant a line matching %s", log, want)
	}
}

// A lease given to an unhealthy bot goes back at once, UNAVAILABLE (which
// BuildGrid re-queues for another bot), and nothing of it runs.
func TestHealthUnhealthyHandsLeaseBack(t *testing.T) {
	f, url := startFakeBots(t)
	log := runBot(t, url, Config{SandboxCheck: func() error { return errors.New("bwrap is not installed") }})
	f.waitSession(t, "UNHEALTHY", reported(rwapipb.BotStatus_UNHEALTHY))
	payload, err := anypb.New(&repb.Action{})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.offer = &rwapipb.Lease{Id: "lease-1", State: rwapipb.LeaseState_ACTIVE, Payload: payload}
	f.mu.Unlock()
	s := f.waitSession(t, "lease-1 completed", func(s *rwapipb.BotSession) bool { return len(s.GetLeases()) > 0 })
	lease := s.GetLeases()[0]
	want := "gantry worker health-bot is unhealthy: the sandbox fails its self-check: bwrap is not installed"
	if lease.GetId() != "lease-1" || lease.GetState() != rwapipb.LeaseState_COMPLETED ||
		codes.Code(lease.GetStatus().GetCode()) != codes.Unavailable || lease.GetStatus().GetMessage() != want {
		t.Fatalf("lease %v, want lease-1 COMPLETED with UNAVAILABLE %q", lease, want)
	}
	if !strings.Contains(log.String(), "lease lease-1 handed back: unhealthy\n") || strings.Contains(log.String(), "accepted") {
		t.Fatalf("log:\n%s\nwant lease-1 handed back, none accepted", log)
	}
}

// A CAS too busy to answer (RESOURCE_EXHAUSTED) is asked again, with backoff,
// rather than failing the lease.
func TestUploadRetriesABusyCAS(t *testing.T) {
	f, url := startFakeBots(t)
	saved := workerRetryBase
	workerRetryBase = time.Millisecond
	t.Cleanup(func() { workerRetryBase = saved })
	store, err := remote.Open(remote.Spec{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	local, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := local.PutBlob([]byte("an output\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := &bot{store: store, cas: local}
	f.busy.Store(transferAttempts - 1)
	// The blob is reported missing once the CAS answers; the fake stores nothing,
	// so the upload then fails: what matters is that FindMissingBlobs was asked
	// until it answered.
	_ = b.upload(context.Background(), []cache.Digest{d})
	if got := f.finds.Load(); got != transferAttempts {
		t.Fatalf("FindMissingBlobs called %d times, want %d (%d busy answers, then one)", got, transferAttempts, transferAttempts-1)
	}
	f.finds.Store(0)
	f.busy.Store(transferAttempts)
	err = b.upload(context.Background(), []cache.Digest{d})
	if got := f.finds.Load(); got != transferAttempts || codes.Code(grpcstatus.Code(err)) != codes.Unavailable {
		t.Fatalf("a CAS busy every time: %d calls, %v; want %d and UNAVAILABLE", got, err, transferAttempts)
	}
}

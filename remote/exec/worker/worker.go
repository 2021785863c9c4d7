// Package worker is `gantry worker`: a Remote Workers API bot (BuildGrid's Bots
// service) running a cluster's Actions in gantry's sandbox. It is apart from
// remote/exec, the execution client, which the project model imports and which must
// not reach the sandbox.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/sync/errgroup"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/internal/backoff"
	"github.com/gantry-build/gantry/internal/rwapipb"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/sandbox"
)

// Config is a `gantry worker`: a Remote Workers API bot serving a cluster's
// leases (BuildGrid's) with gantry's sandbox.
type Config struct {
	// Bots is the server of the Bots service; its Instance is the farm (the
	// CreateBotSession parent, BuildGrid's instance name).
	Bots remote.Spec
	// CAS is the storage the actions' inputs and outputs go through; URL "": Bots's.
	CAS remote.Spec
	// BotID names the bot to the server (and in ActionResults' worker field).
	BotID string
	// Platform are the properties the bot advertises: the primary device's.
	Platform map[string]string
	// Slots is how many leases run at once (the bot's capacity).
	Slots int
	// Sandbox is sandbox.Bwrap (the input root is /) or sandbox.Host (the command
	// runs in the input root's directory).
	Sandbox sandbox.Kind
	// WorkDir holds the local CAS (cache/) and the actions' directories (run/).
	WorkDir string
	// Log receives a line per lease and per problem; nil discards them.
	Log io.Writer
	// JobCommand is the argv of a job child (job.Options.Command) whose
	// job.RunChild serves Handlers: each lease's command runs in one, under the
	// job's process-tree rules.
	JobCommand []string
	// SandboxCheck, if set, is the sandbox's self-check, run with the health
	// checks: an error makes the bot UNHEALTHY.
	SandboxCheck func() error
	// HealthInterval is how often the bot checks its health (0:
	// DefaultHealthInterval); MinFree the free bytes its work directory needs
	// (0: DefaultMinFree).
	HealthInterval time.Duration
	MinFree        int64
}

// Worker timing. BuildGrid holds an UpdateBotSession for 80% of its deadline,
// waiting for new leases (unless that is under 3 s: it then answers at once), and
// does not end the wait when it cancels a lease: a bot running leases polls with
// a short deadline (a cancelled lease is noticed within 80% of it), and a bot at
// capacity, which BuildGrid answers at once, reports on a heartbeat.
var (
	workerPoll       = 30 * time.Second
	workerActivePoll = 4 * time.Second
	workerHeartbeat  = 500 * time.Millisecond
	workerCallLimit  = 10 * time.Second
	// actionGrace is how long a cancelled action's processes have between SIGTERM
	// and SIGKILL.
	actionGrace = 2 * time.Second
)

// Run runs the bot until ctx ends: it then kills the running actions, hands
// their leases back (UNAVAILABLE, which BuildGrid re-queues) and returns nil.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	if cfg.CAS.URL == "" {
		cfg.CAS = cfg.Bots
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.MinFree <= 0 {
		cfg.MinFree = DefaultMinFree
	}
	conn, err := remote.DialGRPC(cfg.Bots)
	if err != nil {
		return err
	}
	defer conn.Close()
	store, err := remote.Open(cfg.CAS)
	if err != nil {
		return err
	}
	defer store.Close()
	local, err := cache.Open(filepath.Join(cfg.WorkDir, "cache"))
	if err != nil {
		return fmt.Errorf("worker: opening the local CAS in %s: %w", cfg.WorkDir, err)
	}
	runDir := filepath.Join(cfg.WorkDir, "run")
	if err := os.RemoveAll(runDir); err != nil { // a killed worker's leftovers
		return fmt.Errorf("worker: clearing %s: %w", runDir, err)
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	jobs := job.NewWorkers(job.Options{Command: cfg.JobCommand, Grace: actionGrace})
	defer jobs.Close()
	b := &bot{cfg: cfg, bots: rwapipb.NewBotsClient(conn), store: store, cas: local, runDir: runDir, jobs: jobs,
		leases: map[string]*leaseRun{}, changed: make(chan struct{}, 1)}
	b.checkHealth(ctx)
	go b.watchHealth(ctx)
	return b.loop(ctx)
}

type bot struct {
	cfg    Config
	bots   rwapipb.BotsClient
	store  remote.Store
	cas    *cache.Cache
	runDir string
	jobs   *job.Workers
	health health

	mu      sync.Mutex
	leases  map[string]*leaseRun // by lease id: running or finished, not yet reported
	changed chan struct{}        // a lease finished
}

// leaseRun is one lease the bot holds.
type leaseRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Set once done:
	result *repb.ActionResult
	status *rpcstatus.Status
}

func (b *bot) logf(format string, args ...any) {
	fmt.Fprintf(b.cfg.Log, "gantry worker %s: "+format+"\n", append([]any{b.cfg.BotID}, args...)...)
}

// session is the BotSession to report: the bot's status and every lease it holds.
func (b *bot) session(name, version string, health rwapipb.BotStatus) (*rwapipb.BotSession, []string) {
	dev := &rwapipb.Device{Handle: b.cfg.BotID}
	keys := make([]string, 0, len(b.cfg.Platform))
	for k := range b.cfg.Platform {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		dev.Properties = append(dev.Properties, &rwapipb.Device_Property{Key: k, Value: b.cfg.Platform[k]})
	}
	s := &rwapipb.BotSession{Name: name, BotId: b.cfg.BotID, Status: health, Version: version,
		Worker: &rwapipb.Worker{Devices: []*rwapipb.Device{dev},
			Configs: []*rwapipb.Worker_Config{{Key: "capacity", Value: fmt.Sprint(b.cfg.Slots)}}}}
	b.mu.Lock()
	defer b.mu.Unlock()
	var completed []string
	ids := make([]string, 0, len(b.leases))
	for id := range b.leases {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		l := b.leases[id]
		lease := &rwapipb.Lease{Id: id, State: rwapipb.LeaseState_ACTIVE}
		select {
		case <-l.done:
			lease.State, lease.Status = rwapipb.LeaseState_COMPLETED, l.status
			if l.result != nil {
				if any, err := anypb.New(l.result); err == nil {
					lease.Result = any
				}
			}
			completed = append(completed, id)
		default:
		}
		s.Leases = append(s.Leases, lease)
	}
	return s, completed
}

func (b *bot) loop(ctx context.Context) error {
	var session *rwapipb.BotSession
	for session == nil {
		call, stop := context.WithTimeout(ctx, workerCallLimit)
		health, _ := b.status()
		s, _ := b.session("", "", health)
		var err error
		session, err = b.bots.CreateBotSession(call, &rwapipb.CreateBotSessionRequest{Parent: b.cfg.Bots.Instance, BotSession: s})
		stop()
		if ctx.Err() != nil {
			return nil
		}
		if fix := credentialsFix(err); fix != "" {
			st := status.Convert(err)
			return fmt.Errorf("worker: creating a bot session on %s: %v: %s: %s", b.cfg.Bots.Display(), st.Code(), st.Message(), fix)
		}
		if err != nil {
			b.logf("creating a bot session on %s: %v (retrying)", b.cfg.Bots.Display(), err)
			if !sleepCtx(ctx, time.Second) {
				return nil
			}
		}
	}
	b.logf("bot session %s on %s, %d slots", session.GetName(), b.cfg.Bots.Display(), b.cfg.Slots)
	b.take(ctx, session)
	version := session.GetVersion()
	for ctx.Err() == nil {
		health, _ := b.status()
		s, completed := b.session(session.GetName(), version, health)
		busy := len(s.Leases)-len(completed) >= b.cfg.Slots
		unhealthy := health != rwapipb.BotStatus_OK
		limit := workerPoll
		if len(s.Leases) > 0 {
			limit = workerActivePoll
		}
		if busy || unhealthy || len(completed) > 0 {
			limit = workerCallLimit // BuildGrid answers at once: at capacity, not OK, or a change
		}
		call, stop := context.WithTimeout(ctx, limit)
		if !busy && !unhealthy && len(completed) == 0 {
			// A lease finishing ends the long poll, to report it at once.
			go func() {
				select {
				case <-b.changed:
					stop()
				case <-call.Done():
				}
			}()
		}
		resp, err := b.bots.UpdateBotSession(call, &rwapipb.UpdateBotSessionRequest{Name: session.GetName(), BotSession: s})
		stop()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if status.Code(err) != codes.Canceled && status.Code(err) != codes.DeadlineExceeded {
				b.logf("updating bot session %s: %v", session.GetName(), err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		b.forget(completed)
		version = resp.GetVersion()
		b.take(ctx, resp)
		if busy || unhealthy {
			pace := workerHeartbeat
			if !busy {
				pace = workerUnhealthyPoll
			}
			select {
			case <-b.changed:
			case <-time.After(pace):
			case <-ctx.Done():
			}
		}
	}
	b.shutdown(session.GetName(), version)
	return nil
}

// take starts the leases of resp new to the bot and cancels those the server
// cancelled or dropped.
func (b *bot) take(ctx context.Context, resp *rwapipb.BotSession) {
	seen := map[string]bool{}
	for _, lease := range resp.GetLeases() {
		id := lease.GetId()
		seen[id] = true
		b.mu.Lock()
		l := b.leases[id]
		b.mu.Unlock()
		switch {
		case lease.GetState() == rwapipb.LeaseState_CANCELLED:
			if l != nil {
				b.cancelLease(id, l)
			}
		case l == nil && (lease.GetState() == rwapipb.LeaseState_PENDING || lease.GetState() == rwapipb.LeaseState_ACTIVE):
			if health, why := b.status(); health != rwapipb.BotStatus_OK {
				b.handBack(id, why)
				continue
			}
			b.start(ctx, id, lease)
		}
	}
	b.mu.Lock()
	var dropped []string
	for id, l := range b.leases {
		select {
		case <-l.done:
		default:
			if !seen[id] {
				dropped = append(dropped, id)
			}
		}
	}
	b.mu.Unlock()
	for _, id := range dropped { // BuildGrid drops a cancelled lease from the session
		b.mu.Lock()
		l := b.leases[id]
		b.mu.Unlock()
		b.cancelLease(id, l)
	}
}

// cancelLease kills the lease's action and forgets it: the server no longer
// wants its result.
func (b *bot) cancelLease(id string, l *leaseRun) {
	b.logf("lease %s cancelled", id)
	l.cancel()
	<-l.done
	b.forget([]string{id})
}

func (b *bot) forget(ids []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		delete(b.leases, id)
	}
}

func (b *bot) start(ctx context.Context, id string, lease *rwapipb.Lease) {
	run, cancel := context.WithCancel(ctx)
	l := &leaseRun{cancel: cancel, done: make(chan struct{})}
	b.mu.Lock()
	b.leases[id] = l
	b.mu.Unlock()
	b.logf("lease %s accepted", id)
	go func() {
		defer cancel()
		result, err := b.execute(run, id, lease)
		st := status.Convert(err).Proto()
		if run.Err() != nil && ctx.Err() != nil {
			st = status.New(codes.Unavailable, "gantry worker "+b.cfg.BotID+" stopped").Proto()
		}
		l.result, l.status = result, st
		close(l.done)
		if err != nil {
			b.logf("lease %s: %v", id, err)
		} else {
			b.logf("lease %s done: exit code %d", id, result.GetExitCode())
		}
		b.wake()
	}()
}

// handBack completes lease id at once with UNAVAILABLE, which BuildGrid re-queues
// for another bot: an unhealthy bot runs nothing.
func (b *bot) handBack(id, why string) {
	l := &leaseRun{cancel: func() {}, done: make(chan struct{}),
		status: status.New(codes.Unavailable, "gantry worker "+b.cfg.BotID+" is unhealthy: "+why).Proto()}
	close(l.done)
	b.mu.Lock()
	b.leases[id] = l
	b.mu.Unlock()
	b.logf("lease %s handed back: unhealthy", id)
	b.wake()
}

// shutdown kills what still runs and hands the leases back.
func (b *bot) shutdown(name, version string) {
	b.mu.Lock()
	ls := make([]*leaseRun, 0, len(b.leases))
	for _, l := range b.leases {
		ls = append(ls, l)
	}
	b.mu.Unlock()
	for _, l := range ls {
		l.cancel()
		<-l.done
	}
	s, _ := b.session(name, version, rwapipb.BotStatus_BOT_TERMINATING)
	call, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if _, err := b.bots.UpdateBotSession(call, &rwapipb.UpdateBotSessionRequest{Name: name, BotSession: s}); err != nil {
		b.logf("handing back the leases of %s: %v", name, err)
	}
}

// credentialsFix says what to do about an error retrying will not mend: the
// server's certificate not trusted, the worker's certificate or token refused;
// "" for any other error.
func credentialsFix(err error) string {
	msg := status.Convert(err).Message()
	switch {
	case err == nil:
		return ""
	case strings.Contains(msg, "x509:"):
		return "give the CA that signed the server's certificate with --server-ca FILE (server-ca in [worker.bots])"
	case strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unknown certificate authority"):
		return "give a client certificate the server trusts with --client-cert FILE and --client-key FILE (client-cert and client-key in [worker.bots])"
	case status.Code(err) == codes.Unauthenticated, status.Code(err) == codes.PermissionDenied:
		return "give a token the server accepts with --token-file FILE (token-file in [worker.bots])"
	}
	return ""
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// execute runs one lease's Action and returns its result: a nil error (lease
// status OK) whenever the command ran, whatever its exit code; DEADLINE_EXCEEDED
// with the partial result when the Action's timeout ended it; another error when
// the worker could not run it.
func (b *bot) execute(ctx context.Context, id string, lease *rwapipb.Lease) (*repb.ActionResult, error) {
	started := time.Now()
	action := &repb.Action{}
	if err := lease.GetPayload().UnmarshalTo(action); err != nil {
		var d repb.Digest
		if errD := lease.GetPayload().UnmarshalTo(&d); errD != nil {
			return nil, status.Errorf(codes.InvalidArgument, "lease %s: the payload %s is neither an Action nor its Digest", id, lease.GetPayload().GetTypeUrl())
		}
		if err := b.readMessage(ctx, cache.DigestFromProto(&d), action); err != nil {
			return nil, err
		}
	}
	command := &repb.Command{}
	if err := b.readMessage(ctx, cache.DigestFromProto(action.GetCommandDigest()), command); err != nil {
		return nil, err
	}
	root := cache.DigestFromProto(action.GetInputRootDigest())
	if err := b.fetchTree(ctx, root); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.runDir, "lease-")
	if err != nil {
		return nil, status.Errorf(codes.Internal, "staging lease %s: %v", id, err)
	}
	defer os.RemoveAll(dir)
	inputRoot := filepath.Join(dir, "root")
	if err := b.cas.Checkout(root, inputRoot, cache.CheckoutOptions{}); err != nil {
		return nil, status.Errorf(codes.Internal, "staging the input root of lease %s: %v", id, err)
	}
	fetched := time.Now()
	wd := path.Clean("/" + command.GetWorkingDirectory())[1:]
	if err := os.MkdirAll(filepath.Join(inputRoot, wd), 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "creating the working directory %s: %v", wd, err)
	}
	outputs := commandOutputs(command)
	for _, o := range outputs {
		if err := os.MkdirAll(filepath.Join(inputRoot, wd, filepath.Dir(o.path)), 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "creating the parent of output %s: %v", o.path, err)
		}
	}

	env := map[string]string{}
	for _, kv := range command.GetEnvironmentVariables() {
		env[kv.GetName()] = kv.GetValue()
	}
	spec := actionSpec{Sandbox: b.cfg.Sandbox, InputRoot: inputRoot, Dir: wd, Env: env,
		Script: shellWords(command.GetArguments()), Timeout: action.GetTimeout().AsDuration(),
		Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr")}
	out, runErr := b.run(ctx, id, filepath.Join(dir, "job.log"), spec)
	executed := time.Now()
	switch {
	case ctx.Err() != nil: // cancelled or the worker stopping: no result
		return nil, status.Errorf(codes.Canceled, "lease %s cancelled", id)
	case runErr != nil:
		return nil, status.Errorf(codes.Internal, "running lease %s: %v", id, runErr)
	}
	result := &repb.ActionResult{ExitCode: int32(out.ExitCode)}
	stdout, err := os.ReadFile(spec.Stdout)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the stdout of lease %s: %v", id, err)
	}
	stderr, err := os.ReadFile(spec.Stderr)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the stderr of lease %s: %v", id, err)
	}
	var blobs []cache.Digest
	if blobs, err = b.collect(filepath.Join(inputRoot, wd), outputs, result, stdout, stderr); err != nil {
		return nil, status.Errorf(codes.Internal, "collecting the outputs of lease %s: %v", id, err)
	}
	if err := b.upload(ctx, blobs); err != nil {
		return nil, err
	}
	result.ExecutionMetadata = &repb.ExecutedActionMetadata{Worker: b.cfg.BotID,
		WorkerStartTimestamp: timestamppb.New(started), InputFetchStartTimestamp: timestamppb.New(started),
		InputFetchCompletedTimestamp: timestamppb.New(fetched), ExecutionStartTimestamp: timestamppb.New(fetched),
		ExecutionCompletedTimestamp: timestamppb.New(executed), OutputUploadStartTimestamp: timestamppb.New(executed),
		OutputUploadCompletedTimestamp: timestamppb.New(time.Now()), WorkerCompletedTimestamp: timestamppb.New(time.Now())}
	if out.TimedOut {
		return result, status.Errorf(codes.DeadlineExceeded, "lease %s exceeded the Action's timeout of %s", id, action.GetTimeout().AsDuration())
	}
	return result, nil
}

// shellWords is argv as one sh command: each word single-quoted.
func shellWords(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return "exec " + strings.Join(words, " ")
}

// output is one path the Command asks for; dir says it was listed as an output
// directory (output_paths leave the kind to what the command made).
type output struct {
	path string
	dir  bool
	any  bool
}

func commandOutputs(c *repb.Command) []output {
	var out []output
	if len(c.GetOutputPaths()) > 0 {
		for _, p := range c.GetOutputPaths() {
			out = append(out, output{path: p, any: true})
		}
		return out
	}
	for _, p := range c.GetOutputFiles() {
		out = append(out, output{path: p})
	}
	for _, p := range c.GetOutputDirectories() {
		out = append(out, output{path: p, dir: true})
	}
	return out
}

// collect stores the outputs, stdout and stderr in the local CAS, records them in
// result and returns the blobs the result reaches.
func (b *bot) collect(wd string, outputs []output, result *repb.ActionResult, stdout, stderr []byte) ([]cache.Digest, error) {
	var blobs []cache.Digest
	for _, data := range [][]byte{stdout, stderr} {
		d, err := b.cas.PutBlob(data)
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, d)
	}
	result.StdoutDigest, result.StderrDigest = blobs[0].Proto(), blobs[1].Proto()
	for _, o := range outputs {
		p := filepath.Join(wd, o.path)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // an output the command did not make is left out
		}
		if err != nil {
			return nil, err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			link := &repb.OutputSymlink{Path: o.path, Target: target}
			result.OutputSymlinks = append(result.OutputSymlinks, link)
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				result.OutputDirectorySymlinks = append(result.OutputDirectorySymlinks, link)
			} else {
				result.OutputFileSymlinks = append(result.OutputFileSymlinks, link)
			}
		case fi.IsDir():
			if !o.dir && !o.any {
				return nil, fmt.Errorf("output file %s is a directory", o.path)
			}
			root, err := b.cas.StoreTree(p)
			if err != nil {
				return nil, err
			}
			tree, treeBlobs, err := b.tree(root)
			if err != nil {
				return nil, err
			}
			data, err := proto.MarshalOptions{Deterministic: true}.Marshal(tree)
			if err != nil {
				return nil, err
			}
			td, err := b.cas.PutBlob(data)
			if err != nil {
				return nil, err
			}
			blobs = append(append(blobs, td), treeBlobs...)
			result.OutputDirectories = append(result.OutputDirectories, &repb.OutputDirectory{
				Path: o.path, TreeDigest: td.Proto(), RootDirectoryDigest: root.Proto(), IsTopologicallySorted: false})
		case fi.Mode().IsRegular():
			if o.dir {
				return nil, fmt.Errorf("output directory %s is a file", o.path)
			}
			d, err := b.cas.PutFile(p)
			if err != nil {
				return nil, err
			}
			blobs = append(blobs, d)
			result.OutputFiles = append(result.OutputFiles, &repb.OutputFile{
				Path: o.path, Digest: d.Proto(), IsExecutable: fi.Mode()&0o111 != 0})
		default:
			return nil, fmt.Errorf("output %s is neither a file, a directory nor a symlink", o.path)
		}
	}
	return blobs, nil
}

// tree is the Tree of the Directory root in the local CAS, and the file blobs it
// reaches.
func (b *bot) tree(root cache.Digest) (*repb.Tree, []cache.Digest, error) {
	tree := &repb.Tree{}
	var files []cache.Digest
	seen := map[cache.Digest]bool{}
	var walk func(d cache.Digest, top bool) error
	walk = func(d cache.Digest, top bool) error {
		dir, err := b.cas.ReadDirectory(d)
		if err != nil {
			return err
		}
		if top {
			tree.Root = dir
		} else if !seen[d] {
			seen[d] = true
			tree.Children = append(tree.Children, dir)
		}
		for _, f := range dir.GetFiles() {
			files = append(files, cache.DigestFromProto(f.GetDigest()))
		}
		for _, sub := range dir.GetDirectories() {
			if err := walk(cache.DigestFromProto(sub.GetDigest()), false); err != nil {
				return err
			}
		}
		return nil
	}
	return tree, files, walk(root, true)
}

// transferAttempts is how many times a CAS call is tried when it fails for a
// reason that may pass: BuildGrid answers RESOURCE_EXHAUSTED ("Concurrent RPC
// limit exceeded!") while all its threads are busy.
const transferAttempts = 4

// workerRetryBase is the first wait before trying a CAS call again.
var workerRetryBase = 250 * time.Millisecond

// retry calls f until it succeeds, fails for good, or has been tried
// transferAttempts times.
func retry(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		var re *remote.Error
		if err == nil || attempt == transferAttempts || !errors.As(err, &re) || !re.Temporary() {
			return err
		}
		if !sleepCtx(ctx, backoff.Exponential(workerRetryBase, attempt)) {
			return err
		}
	}
}

// upload sends the blobs the remote CAS lacks.
func (b *bot) upload(ctx context.Context, blobs []cache.Digest) error {
	var missing []cache.Digest
	err := retry(ctx, func() (err error) {
		missing, err = b.store.FindMissing(ctx, dedupe(blobs))
		return err
	})
	if err != nil {
		return status.Errorf(codes.Unavailable, "uploading outputs: %v", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, d := range missing {
		g.Go(func() error {
			return retry(gctx, func() error {
				return b.store.WriteBlob(gctx, d, func() (io.ReadCloser, error) { return b.cas.OpenBlob(d) })
			})
		})
	}
	if err := g.Wait(); err != nil {
		return status.Errorf(codes.Unavailable, "uploading outputs: %v", err)
	}
	return nil
}

func dedupe(ds []cache.Digest) []cache.Digest {
	seen := map[cache.Digest]bool{}
	out := ds[:0:0]
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// fetch brings blobs into the local CAS from the remote, those it lacks only.
func (b *bot) fetch(ctx context.Context, ds []cache.Digest) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, d := range dedupe(ds) {
		if b.cas.HasBlob(d) {
			continue
		}
		g.Go(func() error {
			var imp *cache.BlobImport
			err := retry(gctx, func() error {
				var err error
				if imp, err = b.cas.StartBlobImport(d); err != nil {
					return err
				}
				if err = b.store.ReadBlob(gctx, d, imp); err != nil {
					imp.Abort()
				}
				return err
			})
			if err != nil {
				if errors.Is(err, cache.ErrNotFound) {
					return status.Errorf(codes.FailedPrecondition, "blob %s is missing from %s: %v", d, b.store.Name(), err)
				}
				return status.Errorf(codes.Unavailable, "fetching blob %s: %v", d, err)
			}
			if err := imp.Commit(); err != nil {
				return status.Errorf(codes.Unavailable, "fetching blob %s: %v", d, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// readMessage fetches blob d and decodes it into m.
func (b *bot) readMessage(ctx context.Context, d cache.Digest, m proto.Message) error {
	if err := b.fetch(ctx, []cache.Digest{d}); err != nil {
		return err
	}
	data, err := b.cas.ReadBlob(d)
	if err != nil {
		return status.Errorf(codes.Internal, "reading blob %s: %v", d, err)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "decoding blob %s as %s: %v", d, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// fetchTree brings the Directory tree under root and its files into the local CAS.
func (b *bot) fetchTree(ctx context.Context, root cache.Digest) error {
	level := []cache.Digest{root}
	for len(level) > 0 {
		if err := b.fetch(ctx, level); err != nil {
			return err
		}
		var next, files []cache.Digest
		for _, d := range level {
			dir, err := b.cas.ReadDirectory(d)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "input root: %v", err)
			}
			for _, f := range dir.GetFiles() {
				files = append(files, cache.DigestFromProto(f.GetDigest()))
			}
			for _, sub := range dir.GetDirectories() {
				next = append(next, cache.DigestFromProto(sub.GetDigest()))
			}
		}
		if err := b.fetch(ctx, files); err != nil {
			return err
		}
		level = dedupe(next)
	}
	return nil
}

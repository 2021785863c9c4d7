package testreapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/rwapipb"
)

// TestBuildGrid starts one BuildGrid and talks REAPI and the Remote Workers API to it.
// The subtests run in order: the queued action is cancelled before a bot exists.
func TestBuildGrid(t *testing.T) {
	bg := StartBuildGrid(t, BuildGridOptions{})
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("CapabilitiesWithExecution", func(t *testing.T) {
		caps, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: bg.Instance})
		if err != nil {
			t.Fatal(err)
		}
		exec := caps.GetExecutionCapabilities()
		if !exec.GetExecEnabled() {
			t.Errorf("exec_enabled is false: %v", exec)
		}
		if exec.GetDigestFunction() != repb.DigestFunction_SHA256 {
			t.Errorf("execution digest function %v, want SHA256", exec.GetDigestFunction())
		}
		if !caps.GetCacheCapabilities().GetActionCacheUpdateCapabilities().GetUpdateEnabled() {
			t.Errorf("action cache updates disabled: %v", caps.GetCacheCapabilities())
		}
	})

	t.Run("CASRoundTrip", func(t *testing.T) {
		cas := repb.NewContentAddressableStorageClient(conn)
		data := []byte("a blob for BuildGrid's CAS\n")
		d := bgDigest(data)
		if missing := bgMissing(ctx, t, cas, bg.Instance, d); len(missing) != 1 {
			t.Fatalf("FindMissingBlobs before the upload: %v, want the blob", missing)
		}
		bgUpload(ctx, t, cas, bg.Instance, data)
		if missing := bgMissing(ctx, t, cas, bg.Instance, d); len(missing) != 0 {
			t.Fatalf("FindMissingBlobs after the upload: %v, want none", missing)
		}
		read, err := cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{InstanceName: bg.Instance, Digests: []*repb.Digest{d}})
		if err != nil {
			t.Fatal(err)
		}
		if r := read.GetResponses(); len(r) != 1 || r[0].GetStatus().GetCode() != 0 || !bytes.Equal(r[0].GetData(), data) {
			t.Fatalf("BatchReadBlobs: %v, want %q", read, data)
		}
		// The same blob through ByteStream.
		stream, err := bspb.NewByteStreamClient(conn).Read(ctx, &bspb.ReadRequest{
			ResourceName: fmt.Sprintf("blobs/%s/%d", d.GetHash(), d.GetSizeBytes())})
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("ByteStream.Read: %v", err)
			}
			got = append(got, chunk.GetData()...)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("ByteStream.Read: %q, want %q", got, data)
		}
	})

	t.Run("ExecuteStaysQueuedWithoutBots", func(t *testing.T) {
		cas := repb.NewContentAddressableStorageClient(conn)
		cmd := bgMarshal(t, &repb.Command{Arguments: []string{"/bin/sh", "-c", "echo hi"}})
		root := bgMarshal(t, &repb.Directory{})
		action := bgMarshal(t, &repb.Action{CommandDigest: bgDigest(cmd), InputRootDigest: bgDigest(root), DoNotCache: true})
		bgUpload(ctx, t, cas, bg.Instance, cmd, root, action)

		// No bot ever connects: the operation is queued and stays so for the 3s it is
		// watched after its first message; BuildGrid sends nothing more meanwhile.
		streamCtx, stopStream := context.WithCancel(ctx)
		defer stopStream()
		stream, err := repb.NewExecutionClient(conn).Execute(streamCtx, &repb.ExecuteRequest{
			InstanceName: bg.Instance, ActionDigest: bgDigest(action), SkipCacheLookup: true})
		if err != nil {
			t.Fatal(err)
		}
		first, err := stream.Recv()
		if err != nil {
			t.Fatalf("Execute stream: %v", err)
		}
		name := first.GetName()
		updates := make(chan *longrunningpb.Operation)
		go func() {
			defer close(updates)
			for {
				op, err := stream.Recv()
				if err != nil {
					return
				}
				select {
				case updates <- op:
				case <-streamCtx.Done():
					return
				}
			}
		}()
		watch := time.After(3 * time.Second)
		for op, open := first, true; open; {
			if stage := bgStage(t, op); op.GetDone() || stage != repb.ExecutionStage_QUEUED {
				t.Fatalf("operation %s: done=%v stage %v with no bot, want QUEUED", name, op.GetDone(), stage)
			}
			select {
			case op, open = <-updates:
				if !open {
					t.Fatalf("the Execute stream of %s ended while queued", name)
				}
			case <-watch:
				open = false
			}
		}
		stopStream()

		ops := longrunningpb.NewOperationsClient(conn)
		if _, err := ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name}); err != nil {
			t.Fatalf("CancelOperation %s: %v", name, err)
		}
		op, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
		if err != nil {
			t.Fatalf("GetOperation %s: %v", name, err)
		}
		if !op.GetDone() || bgStage(t, op) != repb.ExecutionStage_COMPLETED {
			t.Fatalf("cancelled operation %s: done=%v stage %v, want done and COMPLETED", name, op.GetDone(), bgStage(t, op))
		}
		if code := bgCancelCode(t, op); code != codes.Canceled {
			t.Fatalf("cancelled operation %s: status %v, want CANCELLED (%v)", name, code, op)
		}
	})

	bots := rwapipb.NewBotsClient(conn)
	var session *rwapipb.BotSession // the bot's, once created
	t.Run("BotsCreateBotSession", func(t *testing.T) {
		// BuildGrid holds a CreateBotSession for leases for 80% of its deadline unless
		// that is under 3s: with a 3.5s deadline it answers at once.
		call, stop := context.WithTimeout(ctx, 3500*time.Millisecond)
		defer stop()
		resp, err := bots.CreateBotSession(call, &rwapipb.CreateBotSessionRequest{Parent: bg.Instance,
			BotSession: &rwapipb.BotSession{BotId: "gantry-test-bot", Status: rwapipb.BotStatus_OK,
				Worker: &rwapipb.Worker{Devices: []*rwapipb.Device{{Handle: "gantry-test-bot-device",
					Properties: []*rwapipb.Device_Property{{Key: "OSFamily", Value: "linux"}}}}}}})
		if err != nil {
			t.Fatalf("CreateBotSession for gantry-test-bot: %v", err)
		}
		session = resp
		if got := resp.GetBotId(); got != "gantry-test-bot" {
			t.Errorf("bot_id %q, want gantry-test-bot", got)
		}
		if resp.GetName() == "" {
			t.Errorf("the bot session has no name: %v", resp)
		}
		if n := len(resp.GetLeases()); n != 0 {
			t.Errorf("%d leases with nothing queued: %v", n, resp)
		}
	})

	t.Run("BotLeasedTheQueuedAction", func(t *testing.T) {
		cas := repb.NewContentAddressableStorageClient(conn)
		cmd := bgMarshal(t, &repb.Command{Arguments: []string{"/bin/sh", "-c", "echo leased"}})
		root := bgMarshal(t, &repb.Directory{})
		action := bgMarshal(t, &repb.Action{CommandDigest: bgDigest(cmd), InputRootDigest: bgDigest(root), DoNotCache: true})
		bgUpload(ctx, t, cas, bg.Instance, cmd, root, action)
		stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{
			InstanceName: bg.Instance, ActionDigest: bgDigest(action), SkipCacheLookup: true})
		if err != nil {
			t.Fatal(err)
		}
		op, err := stream.Recv()
		if err != nil {
			t.Fatalf("Execute stream: %v", err)
		}
		defer func() {
			_, _ = longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: op.GetName()})
		}()
		if stage := bgStage(t, op); stage != repb.ExecutionStage_QUEUED {
			t.Fatalf("operation %s: stage %v before the bot asked for work, want QUEUED", op.GetName(), stage)
		}

		// The bot's long poll ends when the scheduler assigns it the queued action.
		if session == nil {
			t.Skip("no bot session")
		}
		call, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		resp, err := bots.UpdateBotSession(call, &rwapipb.UpdateBotSessionRequest{Name: session.GetName(), BotSession: session})
		if err != nil {
			t.Fatalf("UpdateBotSession %s: %v", session.GetName(), err)
		}
		if len(resp.GetLeases()) != 1 {
			t.Fatalf("%d leases, want the queued action's: %v", len(resp.GetLeases()), resp)
		}
		lease := resp.GetLeases()[0]
		// BuildGrid 0.9.1 moves the job to EXECUTING when it assigns it, so the lease
		// comes ACTIVE, not PENDING; its payload is the Action itself.
		if lease.GetState() != rwapipb.LeaseState_ACTIVE {
			t.Errorf("lease state %v, want ACTIVE", lease.GetState())
		}
		if lease.GetId() == "" {
			t.Errorf("the lease has no id: %v", lease)
		}
		var got repb.Action
		if err := lease.GetPayload().UnmarshalTo(&got); err != nil {
			t.Fatalf("lease payload %s: %v, want the Action", lease.GetPayload().GetTypeUrl(), err)
		}
		if !bytes.Equal(bgMarshal(t, &got), action) {
			t.Errorf("lease payload %v, want the Action uploaded", &got)
		}
		// The client sees the action executing.
		for stage := repb.ExecutionStage_QUEUED; stage == repb.ExecutionStage_QUEUED; {
			next, err := stream.Recv()
			if err != nil {
				t.Fatalf("Execute stream after the lease: %v", err)
			}
			if stage = bgStage(t, next); stage != repb.ExecutionStage_QUEUED && stage != repb.ExecutionStage_EXECUTING {
				t.Errorf("operation %s: stage %v once leased, want EXECUTING", op.GetName(), stage)
			}
		}
	})
}

// TestBuildGridMissingSkipsOrFails: without the venv, outside CI the test skips with
// the install line; with CI=true it fails.
func TestBuildGridMissingSkipsOrFails(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			venv := t.TempDir()
			t.Setenv(BuildGridVenvEnv, venv)
			rec := &recordTB{TB: t}
			done := make(chan struct{})
			go func() { // Skip and Fatal end the goroutine, as they would a test's
				defer close(done)
				StartBuildGrid(rec, BuildGridOptions{})
			}()
			<-done
			want := "BuildGrid 0.9.1 is not installed (no " + venv + "/bin/bgd): bash .ci/run installs it; " +
				"by hand: python3.13 -m venv DIR && DIR/bin/pip install buildgrid==0.9.1 -c .ci/buildgrid-constraints.txt, " +
				"then GANTRY_BUILDGRID_VENV=DIR (default /var/cache/gantry-ci/buildgrid-0.9.1); " +
				"its scheduler needs PostgreSQL: apt-get install postgresql"
			if rec.msg != want {
				t.Fatalf("message\n%s\nwant\n%s", rec.msg, want)
			}
			if want := ci != "true"; rec.skipped != want {
				t.Fatalf("skipped=%v failed=%v, want skipped=%v", rec.skipped, rec.failed, want)
			}
			if rec.failed == rec.skipped {
				t.Fatalf("skipped=%v failed=%v, want exactly one", rec.skipped, rec.failed)
			}
		})
	}
}

// recordTB records a Skip or Fatal instead of ending the test.
type recordTB struct {
	testing.TB
	msg             string
	skipped, failed bool
}

func (r *recordTB) Helper() {}
func (r *recordTB) Skipf(format string, args ...any) {
	r.msg, r.skipped = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.msg, r.failed = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}

func bgDigest(data []byte) *repb.Digest {
	sum := sha256.Sum256(data)
	return &repb.Digest{Hash: hex.EncodeToString(sum[:]), SizeBytes: int64(len(data))}
}

func bgMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func bgUpload(ctx context.Context, t *testing.T, cas repb.ContentAddressableStorageClient, instance string, blobs ...[]byte) {
	t.Helper()
	req := &repb.BatchUpdateBlobsRequest{InstanceName: instance}
	for _, b := range blobs {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: bgDigest(b), Data: b})
	}
	resp, err := cas.BatchUpdateBlobs(ctx, req)
	if err != nil {
		t.Fatalf("BatchUpdateBlobs: %v", err)
	}
	for _, r := range resp.GetResponses() {
		if r.GetStatus().GetCode() != 0 {
			t.Fatalf("BatchUpdateBlobs %v: %v", r.GetDigest(), r.GetStatus())
		}
	}
}

func bgMissing(ctx context.Context, t *testing.T, cas repb.ContentAddressableStorageClient, instance string, ds ...*repb.Digest) []*repb.Digest {
	t.Helper()
	resp, err := cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{InstanceName: instance, BlobDigests: ds})
	if err != nil {
		t.Fatalf("FindMissingBlobs: %v", err)
	}
	return resp.GetMissingBlobDigests()
}

func bgStage(t *testing.T, op *longrunningpb.Operation) repb.ExecutionStage_Value {
	t.Helper()
	var md repb.ExecuteOperationMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil {
		t.Fatalf("operation %s metadata: %v", op.GetName(), err)
	}
	return md.GetStage()
}

// bgCancelCode is the status a done operation ended with: its error, or its
// ExecuteResponse's status.
func bgCancelCode(t *testing.T, op *longrunningpb.Operation) codes.Code {
	t.Helper()
	if e := op.GetError(); e != nil {
		return codes.Code(e.GetCode())
	}
	var resp repb.ExecuteResponse
	if err := op.GetResponse().UnmarshalTo(&resp); err != nil {
		t.Fatalf("operation %s response: %v", op.GetName(), err)
	}
	return codes.Code(resp.GetStatus().GetCode())
}

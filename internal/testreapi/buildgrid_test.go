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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
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

	bots := newBotsMessages(t)
	var session *dynamicpb.Message // the bot's, once created
	t.Run("BotsCreateBotSession", func(t *testing.T) {
		// BuildGrid holds a CreateBotSession for leases for 80% of its deadline unless
		// that is under 3s: with a 3.5s deadline it answers at once.
		call, stop := context.WithTimeout(ctx, 3500*time.Millisecond)
		defer stop()
		resp := bots.create(call, t, conn, bg.Instance, "gantry-test-bot")
		session = resp
		if got := resp.Get(bots.field(resp, "bot_id")).String(); got != "gantry-test-bot" {
			t.Errorf("bot_id %q, want gantry-test-bot", got)
		}
		if got := resp.Get(bots.field(resp, "name")).String(); got == "" {
			t.Errorf("the bot session has no name: %v", resp)
		}
		if n := resp.Get(bots.field(resp, "leases")).List().Len(); n != 0 {
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
		resp := bots.update(call, t, conn, session)
		leases := resp.Get(bots.field(resp, "leases")).List()
		if leases.Len() != 1 {
			t.Fatalf("%d leases, want the queued action's: %v", leases.Len(), resp)
		}
		lease := leases.Get(0).Message()
		// BuildGrid 0.9.1 moves the job to EXECUTING when it assigns it, so the lease
		// comes ACTIVE, not PENDING; its payload is the Action itself.
		if state := lease.Get(lease.Descriptor().Fields().ByName("state")).Enum(); state != 2 {
			t.Errorf("lease state %d, want ACTIVE (2)", state)
		}
		if id := lease.Get(lease.Descriptor().Fields().ByName("id")).String(); id == "" {
			t.Errorf("the lease has no id: %v", lease)
		}
		payload := &anypb.Any{}
		if err := proto.Unmarshal(bgMarshalReflect(t, lease.Get(lease.Descriptor().Fields().ByName("payload")).Message()), payload); err != nil {
			t.Fatal(err)
		}
		var got repb.Action
		if err := payload.UnmarshalTo(&got); err != nil {
			t.Fatalf("lease payload %s: %v, want the Action", payload.GetTypeUrl(), err)
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

// botsMessages describes the part of google.devtools.remoteworkers.v1test2 the test
// sends and reads; neither the remote-apis module nor the current genproto carries Go
// code for it. Field numbers as in bots.proto and worker.proto; fields left out
// (expire_time, configs, update_mask, most of Lease) stay unknown fields.
type botsMessages struct{ file protoreflect.FileDescriptor }

func newBotsMessages(t *testing.T) botsMessages {
	t.Helper()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	enum := descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ, Label: label}
		if typeName != "" {
			f.TypeName = proto.String(".google.devtools.remoteworkers.v1test2." + typeName)
		}
		return f
	}
	property := &descriptorpb.DescriptorProto{Name: proto.String("Property"), Field: []*descriptorpb.FieldDescriptorProto{
		field("key", 1, str, opt, ""), field("value", 2, str, opt, "")}}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("gantry_test/remoteworkers_v1test2_subset.proto"),
		Package:    proto.String("google.devtools.remoteworkers.v1test2"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/any.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("BotStatus"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("BOT_STATUS_UNSPECIFIED"), Number: proto.Int32(0)},
			{Name: proto.String("OK"), Number: proto.Int32(1)},
		}}, {Name: proto.String("LeaseState"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("LEASE_STATE_UNSPECIFIED"), Number: proto.Int32(0)},
			{Name: proto.String("PENDING"), Number: proto.Int32(1)},
			{Name: proto.String("ACTIVE"), Number: proto.Int32(2)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Worker"), NestedType: []*descriptorpb.DescriptorProto{property}, Field: []*descriptorpb.FieldDescriptorProto{
				field("devices", 1, msg, rep, "Device"), field("properties", 2, msg, rep, "Worker.Property")}},
			{Name: proto.String("Device"), NestedType: []*descriptorpb.DescriptorProto{proto.Clone(property).(*descriptorpb.DescriptorProto)}, Field: []*descriptorpb.FieldDescriptorProto{
				field("handle", 1, str, opt, ""), field("properties", 2, msg, rep, "Device.Property")}},
			{Name: proto.String("BotSession"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, str, opt, ""), field("bot_id", 2, str, opt, ""),
				field("status", 3, enum, opt, "BotStatus"), field("worker", 4, msg, opt, "Worker"),
				field("leases", 5, msg, rep, "Lease"), field("version", 7, str, opt, "")}},
			{Name: proto.String("Lease"), Field: []*descriptorpb.FieldDescriptorProto{
				field("state", 2, enum, opt, "LeaseState"), field("id", 7, str, opt, ""),
				{Name: proto.String("payload"), Number: proto.Int32(8), Type: msg, Label: opt, TypeName: proto.String(".google.protobuf.Any")}}},
			{Name: proto.String("CreateBotSessionRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("parent", 1, str, opt, ""), field("bot_session", 2, msg, opt, "BotSession")}},
			{Name: proto.String("UpdateBotSessionRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, str, opt, ""), field("bot_session", 2, msg, opt, "BotSession")}},
		},
	}
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return botsMessages{file}
}

func (b botsMessages) desc(name string) protoreflect.MessageDescriptor {
	return b.file.Messages().ByName(protoreflect.Name(name))
}

func (b botsMessages) field(m *dynamicpb.Message, name string) protoreflect.FieldDescriptor {
	return m.Descriptor().Fields().ByName(protoreflect.Name(name))
}

// create calls Bots.CreateBotSession for a new bot.
func (b botsMessages) create(ctx context.Context, t *testing.T, conn grpc.ClientConnInterface, instance, botID string) *dynamicpb.Message {
	t.Helper()
	req := dynamicpb.NewMessage(b.desc("CreateBotSessionRequest"))
	req.Set(b.field(req, "parent"), protoreflect.ValueOfString(instance))
	req.Set(b.field(req, "bot_session"), protoreflect.ValueOfMessage(b.session(botID, map[string]string{"OSFamily": "linux"})))
	resp := dynamicpb.NewMessage(b.desc("BotSession"))
	if err := conn.Invoke(ctx, "/google.devtools.remoteworkers.v1test2.Bots/CreateBotSession", req, resp); err != nil {
		t.Fatalf("CreateBotSession for %s: %v", botID, err)
	}
	return resp
}

// update calls Bots.UpdateBotSession with session, which it long-polls for leases.
func (b botsMessages) update(ctx context.Context, t *testing.T, conn grpc.ClientConnInterface, session *dynamicpb.Message) *dynamicpb.Message {
	t.Helper()
	name := session.Get(b.field(session, "name")).String()
	req := dynamicpb.NewMessage(b.desc("UpdateBotSessionRequest"))
	req.Set(b.field(req, "name"), protoreflect.ValueOfString(name))
	req.Set(b.field(req, "bot_session"), protoreflect.ValueOfMessage(session))
	resp := dynamicpb.NewMessage(b.desc("BotSession"))
	if err := conn.Invoke(ctx, "/google.devtools.remoteworkers.v1test2.Bots/UpdateBotSession", req, resp); err != nil {
		t.Fatalf("UpdateBotSession %s: %v", name, err)
	}
	return resp
}

func bgMarshalReflect(t *testing.T, m protoreflect.Message) []byte {
	t.Helper()
	data, err := proto.Marshal(m.Interface())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// session is a BotSession with status OK and one device with the given properties,
// which BuildGrid matches actions' platforms against.
func (b botsMessages) session(botID string, props map[string]string) *dynamicpb.Message {
	device := dynamicpb.NewMessage(b.desc("Device"))
	device.Set(b.field(device, "handle"), protoreflect.ValueOfString(botID+"-device"))
	list := device.Mutable(b.field(device, "properties")).List()
	for k, v := range props {
		p := dynamicpb.NewMessage(b.desc("Device").Messages().ByName("Property"))
		p.Set(b.field(p, "key"), protoreflect.ValueOfString(k))
		p.Set(b.field(p, "value"), protoreflect.ValueOfString(v))
		list.Append(protoreflect.ValueOfMessage(p))
	}
	worker := dynamicpb.NewMessage(b.desc("Worker"))
	worker.Mutable(b.field(worker, "devices")).List().Append(protoreflect.ValueOfMessage(device))
	s := dynamicpb.NewMessage(b.desc("BotSession"))
	s.Set(b.field(s, "bot_id"), protoreflect.ValueOfString(botID))
	s.Set(b.field(s, "status"), protoreflect.ValueOfEnum(1)) // OK
	s.Set(b.field(s, "worker"), protoreflect.ValueOfMessage(worker))
	return s
}

package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/backoff"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InfraError is a remote build that failed for the infrastructure, not the
// build: the service unreachable, an Execute answered with a status other
// than OK. It is retryable and never cached as the element's failure.
type InfraError struct {
	Op  string // what was being done
	Err error
	// Refused: the service refused the action as it is configured
	// (INVALID_ARGUMENT, PERMISSION_DENIED, UNIMPLEMENTED: a timeout over its
	// maximum, a platform it has no worker for, an instance it does not know);
	// building again will not help, changing the configuration may.
	Refused bool
}

func (e *InfraError) Error() string { return "remote execution: " + e.Op + ": " + e.Err.Error() }
func (e *InfraError) Unwrap() error { return e.Err }

// Result is what a remote build gave.
type Result struct {
	ExitCode int
	Install  cache.Digest // the install root's tree, in the local CAS
	// BuildTree is, for a failed build (ExitCode ≠ 0), its build root's tree in
	// the local CAS; zero when the build succeeded or the server sent none.
	BuildTree      cache.Digest
	Stdout, Stderr []byte
	Worker         string    // where it ran (ExecutedActionMetadata.worker)
	Cached         bool      // the action cache had it: nothing ran
	Overlaps       []Overlap // of the input root's merge
	Action         cache.Digest
	// Flagged are the output symlinks that are absolute or escape their
	// output root ("usr/lib/x -> /etc/x"): imported as they are, never followed.
	Flagged []string
	// Message is what the server said of the execution for the user (a link
	// to its own page of it, say); "" when nothing.
	Message string
	// FailedCommand is the label of the command that failed ("build-commands
	// 2/3"), from the script's marker lines; "" when unknown or none failed.
	FailedCommand string
}

// Run builds b on the execution service: it merges the input root in c,
// looks the action up in the action cache, uploads the blobs the CAS lacks,
// executes the action and imports its outputs into c. A build whose command
// fails is a Result with its exit code, not an error; an error is a
// *InfraError, a *ConflictError of the input root, a failure of the local
// cache, or ctx's cause (after the operation was cancelled).
func (cl *Client) Run(ctx context.Context, c *cache.Cache, b Build) (Result, error) {
	ctx = cl.actionContext(ctx, b.Element)
	say := func(s Stage) {
		if b.Status != nil {
			b.Status(s)
		}
	}
	d, err := Describe(c, cl.cfg, b)
	if err != nil {
		return Result{}, err
	}
	root, overlaps, cmdDigest, actDigest := d.InputRoot, d.Overlaps, d.Command, d.Action
	res := Result{Overlaps: overlaps, Action: actDigest}

	ar, err := cl.lookup(ctx, actDigest)
	if err != nil {
		return res, err
	}
	if ar != nil {
		res.Cached = true
		say(Fetching)
		err := cl.results(ctx, c, ar, b, &res)
		if !errors.Is(err, cache.ErrNotFound) {
			return res, err
		}
		// The action cache names outputs the CAS no longer has: build again,
		// without a lookup that would answer the same.
		res = Result{Overlaps: overlaps, Action: actDigest}
	}
	say(Uploading)
	if err := cl.retrying(ctx, func() error { return cl.upload(ctx, c, root, cmdDigest, actDigest) }); err != nil {
		return res, err
	}
	resp, err := cl.execute(ctx, c, actDigest, root, cmdDigest, ar != nil, say)
	if err != nil {
		return res, err
	}
	res.Cached, res.Message = resp.CachedResult, resp.GetMessage()
	say(Fetching)
	if err := cl.retrying(ctx, func() error { return cl.results(ctx, c, resp.Result, b, &res) }); err != nil {
		return res, err
	}
	return res, nil
}

// retrying runs a transfer f (an upload, the fetch of the outputs) until it
// succeeds, fails for good, or has failed cl.attempts times with an
// *InfraError — a server that is busy (RESOURCE_EXHAUSTED: BuildGrid's limit of
// concurrent calls) or unavailable for a moment — waiting with backoff between.
func (cl *Client) retrying(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		var infra *InfraError
		if err == nil || !errors.As(err, &infra) || attempt >= cl.attempts {
			return err
		}
		t := time.NewTimer(backoff.Exponential(cl.retryBase, attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
}

// lookup asks the action cache for the result of the action; nil on a miss.
// Some servers' Execute does not look there itself. A failed lookup is a miss.
func (cl *Client) lookup(ctx context.Context, d cache.Digest) (*repb.ActionResult, error) {
	ar, err := cl.ac.GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: cl.acInstance, ActionDigest: d.Proto()})
	switch {
	case err == nil && ar.GetExitCode() == 0:
		return ar, nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	}
	return nil, nil
}

// upload sends the CAS what it lacks of the input root, the command and the
// action.
func (cl *Client) upload(ctx context.Context, c *cache.Cache, root, cmd, act cache.Digest) error {
	_, all, err := treeBlobs(c, root)
	if err != nil {
		return fmt.Errorf("reading the input root: %w", err)
	}
	return cl.sendMissing(ctx, c, append(all, act, cmd))
}

// storeFailure is err of the CAS, an *InfraError when retrying may mend it.
func (cl *Client) storeFailure(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var re interface{ Temporary() bool }
	if errors.As(err, &re) && re.Temporary() {
		return &InfraError{Op: op, Err: err}
	}
	return err
}

// execute runs the action: Execute, following its operation's stream; when the
// stream breaks, WaitExecution on the operation; when the operation is gone
// (NOT_FOUND), Execute again (the action is deterministic: idempotent). An
// unavailable service is retried with backoff, so is a result whose status is
// not OK; when ctx ends, the operation is cancelled. skipCache asks the server
// not to answer from its action cache.
func (cl *Client) execute(ctx context.Context, c *cache.Cache, act, root, cmd cache.Digest, skipCache bool, say func(Stage)) (*repb.ExecuteResponse, error) {
	var (
		name     string // the operation being followed; "" to Execute
		attempt  int    // failures in a row
		tries    int    // failures in all
		lastErr  error
		uploaded bool
	)
	for {
		resp, progress, err := cl.attempt(ctx, act, skipCache, &name, say)
		if ctx.Err() != nil {
			cl.cancel(ctx, name)
			return nil, context.Cause(ctx)
		}
		if err == nil {
			st := status.FromProto(resp.GetStatus())
			if refused(st.Code()) {
				return nil, &InfraError{Op: "executing action " + act.String(), Err: fmt.Errorf("the server answered %s: %s", st.Code(), st.Message()), Refused: true}
			}
			switch st.Code() {
			case codes.OK:
				if resp.GetResult() == nil {
					return nil, &InfraError{Op: "executing action " + act.String(), Err: errors.New("the server's answer holds no result")}
				}
				return resp, nil
			case codes.DeadlineExceeded:
				return nil, &InfraError{Op: "executing action " + act.String(), Err: fmt.Errorf("the action timed out: %s", st.Message())}
			case codes.FailedPrecondition:
				if !uploaded { // blobs gone from the CAS since they were found there: once more
					uploaded = true
					if err := cl.upload(ctx, c, root, cmd, act); err != nil {
						return nil, err
					}
				}
			}
			name, lastErr, progress = "", fmt.Errorf("the server answered %s: %s", st.Code(), st.Message()), false
		} else {
			switch code := status.Code(err); {
			case code == codes.NotFound && name != "":
				name = "" // the operation is gone: execute again, at once
				continue
			case retryable(code):
				lastErr = errors.New(statusText(err))
			default:
				return nil, &InfraError{Op: "executing action " + act.String(), Err: errors.New(statusText(err)), Refused: refused(code)}
			}
		}
		if progress {
			attempt = 0 // a stream broke after it said something: follow it again at once
		}
		attempt++
		if tries++; attempt >= cl.attempts || tries >= 4*cl.attempts {
			return nil, &InfraError{Op: fmt.Sprintf("executing action %s (%d attempts)", act, attempt), Err: lastErr}
		}
		if !progress {
			t := time.NewTimer(backoff.Exponential(cl.retryBase, attempt))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				cl.cancel(ctx, name)
				return nil, context.Cause(ctx)
			}
		}
	}
}

// attempt makes one Execute call, or WaitExecution when *name is set, and
// follows its stream (follow).
func (cl *Client) attempt(ctx context.Context, act cache.Digest, skipCache bool, name *string, say func(Stage)) (*repb.ExecuteResponse, bool, error) {
	ctx, stop := context.WithCancel(ctx) // ends the stream, read to its end or not
	defer stop()
	var stream grpc.ServerStreamingClient[longrunningpb.Operation]
	var err error
	if *name == "" {
		stream, err = cl.exec.Execute(ctx, &repb.ExecuteRequest{InstanceName: cl.instance, ActionDigest: act.Proto(), SkipCacheLookup: skipCache})
	} else {
		stream, err = cl.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: *name})
	}
	if err != nil {
		return nil, false, err
	}
	return follow(stream, name, say)
}

// retryable is whether a call that failed with code may succeed later.
// refused says whether a call failing with code was refused as configured
// (InfraError.Refused).
func refused(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unimplemented, codes.OutOfRange:
		return true
	}
	return false
}

func retryable(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.Aborted, codes.Internal, codes.Unknown, codes.ResourceExhausted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// follow reads an operation stream to its end: the operation's name into
// *name, its stages to say, and its response when done. progress is whether
// the stream delivered anything. A stream that ends before the operation is
// done is an Unavailable error.
func follow(stream grpc.ServerStreamingClient[longrunningpb.Operation], name *string, say func(Stage)) (resp *repb.ExecuteResponse, progress bool, err error) {
	for {
		op, err := stream.Recv()
		if err == io.EOF {
			return nil, progress, status.Error(codes.Unavailable, "the operation's stream ended before it was done")
		}
		if err != nil {
			return nil, progress, err
		}
		progress = true
		if op.GetName() != "" {
			*name = op.GetName()
		}
		if md := op.GetMetadata(); md != nil {
			var m repb.ExecuteOperationMetadata
			if md.UnmarshalTo(&m) == nil {
				switch m.Stage {
				case repb.ExecutionStage_QUEUED:
					say(Queued)
				case repb.ExecutionStage_EXECUTING:
					say(Executing)
				}
			}
		}
		if !op.GetDone() {
			continue
		}
		if e := op.GetError(); e != nil {
			return nil, progress, status.FromProto(e).Err()
		}
		resp = &repb.ExecuteResponse{}
		if r := op.GetResponse(); r == nil || r.UnmarshalTo(resp) != nil {
			return nil, progress, status.Error(codes.Internal, "the finished operation holds no ExecuteResponse")
		}
		return resp, progress, nil
	}
}

// cancel asks the server to cancel operation name, if there is one, under a
// short deadline of its own (ctx has ended).
func (cl *Client) cancel(ctx context.Context, name string) {
	if name == "" {
		return
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	cl.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name})
}

// results fills res from ar: exit code, where it ran, stdout and stderr, and
// the output trees imported into c.
func (cl *Client) results(ctx context.Context, c *cache.Cache, ar *repb.ActionResult, b Build, res *Result) error {
	res.ExitCode = int(ar.GetExitCode())
	res.Worker = ar.GetExecutionMetadata().GetWorker()
	var err error
	if res.Stdout, err = cl.output(ctx, ar.GetStdoutRaw(), ar.GetStdoutDigest()); err != nil {
		return cl.storeFailure(ctx, "reading the build's stdout", err)
	}
	if res.Stderr, err = cl.output(ctx, ar.GetStderrRaw(), ar.GetStderrDigest()); err != nil {
		return cl.storeFailure(ctx, "reading the build's stderr", err)
	}
	install, failed := outputNames(cl.cfg, b)
	for _, od := range ar.GetOutputDirectories() {
		var into *cache.Digest
		switch od.GetPath() {
		case install:
			into = &res.Install
		case failed:
			if res.ExitCode == 0 {
				continue // a success's build tree is not kept
			}
			into = &res.BuildTree
		default:
			continue
		}
		d, flagged, err := cl.importTree(ctx, c, od)
		if err != nil {
			return err
		}
		*into = d
		for _, f := range flagged {
			res.Flagged = append(res.Flagged, od.GetPath()+"/"+f)
		}
	}
	if res.ExitCode != 0 {
		res.FailedCommand = FailedCommand(res.Stderr)
	} else if res.Install.IsZero() {
		return &InfraError{Op: "reading the build's result", Err: fmt.Errorf("the server sent no output directory %s: the install root", install)}
	}
	return nil
}

// output is stdout or stderr: raw, or read from the CAS by digest.
func (cl *Client) output(ctx context.Context, raw []byte, d *repb.Digest) ([]byte, error) {
	if len(raw) > 0 || d == nil {
		return raw, nil
	}
	return cl.readBlob(ctx, cache.DigestFromProto(d))
}

// readBlob reads blob d from the CAS and checks it against d.
func (cl *Client) readBlob(ctx context.Context, d cache.Digest) ([]byte, error) {
	var buf bytes.Buffer
	if err := cl.cas.ReadBlob(ctx, d, &buf); err != nil {
		return nil, err
	}
	if got := cache.DigestOf(buf.Bytes()); got != d {
		return nil, cache.Mismatch(d, got, "blob "+d.String()+" from "+cl.cas.Name())
	}
	return buf.Bytes(), nil
}

package exec

import (
	"context"
	"errors"
	"fmt"
	"io"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The cache-only mode (docs/remote-execution.md): an action-cache service
// without an execution service. A build runs here, but it is described as
// the Action a remote build of it sends (Describe: the same input root,
// Command, platform and timeout, so both modes share action cache entries);
// its result is looked up before the build (CachedResult) and a successful
// build's is recorded after it (Record).

// Described is a build's Action, stored in the local CAS with its Command and
// input root.
type Described struct {
	Action, Command, InputRoot cache.Digest
	Overlaps                   []Overlap // of the input root's merge
}

// Describe merges b's input root in c and stores the Command and the Action a
// remote build of b under cfg sends.
func Describe(c *cache.Cache, cfg Config, b Build) (Described, error) {
	root, overlaps, err := inputRoot(c, cfg, b)
	if err != nil {
		return Described{}, err
	}
	cmdBlob, err := proto.MarshalOptions{Deterministic: true}.Marshal(command(cfg, b))
	if err != nil {
		return Described{}, fmt.Errorf("encoding the command of %s: %w", b.Element, err)
	}
	cmd, err := c.PutBlob(cmdBlob)
	if err != nil {
		return Described{}, err
	}
	actBlob, err := proto.MarshalOptions{Deterministic: true}.Marshal(action(cfg, b, cmd, root))
	if err != nil {
		return Described{}, fmt.Errorf("encoding the action of %s: %w", b.Element, err)
	}
	act, err := c.PutBlob(actBlob)
	if err != nil {
		return Described{}, err
	}
	return Described{Action: act, Command: cmd, InputRoot: root, Overlaps: overlaps}, nil
}

// DialActionCache connects to the action cache of a cache-only configuration
// and to its CAS: the storage service, else the action cache's server. It
// asks nothing yet: the session asked their capabilities before it started.
func DialActionCache(cfg Config) (*Client, error) {
	if cfg.ActionCache.URL == "" {
		return nil, errors.New("action cache: no action-cache-service url")
	}
	cl := &Client{cfg: cfg, name: remote.RedactURL(cfg.ActionCache.URL), acInstance: cfg.ActionCache.Instance,
		invocation: remote.NewUUID()}
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(cl.unaryMetadata), grpc.WithChainStreamInterceptor(cl.streamMetadata)}
	conn, err := remote.DialGRPC(cfg.ActionCache, opts...)
	if err != nil {
		return nil, fmt.Errorf("action cache: %w", err)
	}
	cl.conns = append(cl.conns, conn)
	cl.ac = repb.NewActionCacheClient(conn)
	spec := cfg.Storage
	if spec.URL == "" {
		spec = cfg.ActionCache
	}
	spec.DialOptions = opts
	if cl.cas, err = remote.Open(spec); err != nil {
		cl.Close()
		return nil, fmt.Errorf("action cache: storage-service: %w", err)
	}
	return cl, nil
}

// CachedResult looks d, b's Action, up in the action cache. On a hit (a
// result with exit code 0 whose outputs the CAS has) the outputs are imported
// into c and ok is true. A miss is ok false and no error; an error is a
// lookup or an import that failed (the caller builds instead: the cache is
// not the build) or ctx's cause.
func (cl *Client) CachedResult(ctx context.Context, c *cache.Cache, b Build, d Described) (res Result, ok bool, err error) {
	ctx = cl.actionContext(ctx, b.Element)
	ar, err := cl.ac.GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: cl.acInstance, ActionDigest: d.Action.Proto()})
	switch {
	case ctx.Err() != nil:
		return Result{}, false, context.Cause(ctx)
	case status.Code(err) == codes.NotFound:
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, &InfraError{Op: "looking action " + d.Action.String() + " up", Err: errors.New(statusText(err))}
	case ar.GetExitCode() != 0:
		return Result{}, false, nil // a failure is not a result to reuse
	}
	res = Result{Overlaps: d.Overlaps, Action: d.Action, Cached: true}
	if err := cl.results(ctx, c, ar, b, &res); err != nil {
		if errors.Is(err, cache.ErrNotFound) {
			return Result{}, false, nil // the CAS no longer has its outputs: build again
		}
		return Result{}, false, err
	}
	return res, true, nil
}

// UpdateRefusedError is an action cache that does not take results from this
// client (PERMISSION_DENIED, UNIMPLEMENTED): a read-only cache.
type UpdateRefusedError struct {
	Service string
	Err     error
}

func (e *UpdateRefusedError) Error() string {
	return fmt.Sprintf("the action cache %s does not record results from this client (%s): results are looked up there, not recorded", e.Service, statusText(e.Err))
}

func (e *UpdateRefusedError) Unwrap() error { return e.Err }

// Record records in the action cache the result of d, b's Action, built here
// with exit code 0: install (the install root's tree in c) as its install
// output directory (a Tree, and its root Directory's digest for v2.3
// readers), stdout as its stdout, worker in its metadata. Only what a reader
// needs is uploaded, what the CAS lacks of: the Action and its Command (REAPI
// asks a client to upload them before it updates a result; they help other
// clients see what ran), the output tree (its Tree blob, Directories and
// files) and stdout; not the input root, which no reader of the result
// fetches (as Bazel's --remote_upload_local_results). A refusal is an
// *UpdateRefusedError.
func (cl *Client) Record(ctx context.Context, c *cache.Cache, b Build, d Described, install cache.Digest, stdout []byte, worker string) error {
	ctx = cl.actionContext(ctx, b.Element)
	dirs, blobs, err := treeBlobs(c, install)
	if err != nil {
		return fmt.Errorf("reading the install root's tree: %w", err)
	}
	treeBlob, err := proto.MarshalOptions{Deterministic: true}.Marshal(&repb.Tree{Root: dirs[0], Children: dirs[1:]})
	if err != nil {
		return fmt.Errorf("encoding the install root's tree: %w", err)
	}
	tree, err := c.PutBlob(treeBlob)
	if err != nil {
		return err
	}
	blobs = append(blobs, d.Action, d.Command, tree)
	installName, _ := outputNames(cl.cfg, b)
	ar := &repb.ActionResult{
		OutputDirectories: []*repb.OutputDirectory{{Path: installName, TreeDigest: tree.Proto(), RootDirectoryDigest: install.Proto()}},
		ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: worker},
	}
	if len(stdout) > 0 {
		out, err := c.PutBlob(stdout)
		if err != nil {
			return err
		}
		blobs = append(blobs, out)
		ar.StdoutDigest = out.Proto()
	}
	if err := cl.sendMissing(ctx, c, blobs); err != nil {
		return err
	}
	_, err = cl.ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{InstanceName: cl.acInstance, ActionDigest: d.Action.Proto(), ActionResult: ar})
	switch code := status.Code(err); {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case code == codes.PermissionDenied || code == codes.Unimplemented:
		return &UpdateRefusedError{Service: cl.name, Err: err}
	default:
		return &InfraError{Op: "recording action " + d.Action.String(), Err: errors.New(statusText(err))}
	}
}

// treeBlobs are the Directories of the tree root (root first, each once) and
// the digests of its blobs: the Directories' and the files'.
func treeBlobs(c *cache.Cache, root cache.Digest) ([]*repb.Directory, []cache.Digest, error) {
	var dirs []*repb.Directory
	var all []cache.Digest
	// Apart: an empty file and an empty Directory have the same digest.
	seenDir, seenBlob := map[cache.Digest]bool{}, map[cache.Digest]bool{}
	add := func(d cache.Digest) {
		if !seenBlob[d] {
			seenBlob[d] = true
			all = append(all, d)
		}
	}
	var walk func(d cache.Digest) error
	walk = func(d cache.Digest) error {
		if seenDir[d] {
			return nil
		}
		seenDir[d] = true
		add(d)
		dir, err := c.ReadDirectory(d)
		if err != nil {
			return c.BlobReadFailed(d, err)
		}
		dirs = append(dirs, dir)
		for _, f := range dir.Files {
			add(cache.DigestFromProto(f.Digest))
		}
		for _, sub := range dir.Directories {
			if err := walk(cache.DigestFromProto(sub.Digest)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, nil, err
	}
	return dirs, all, nil
}

// sendMissing uploads those of blobs (in c) the CAS lacks.
func (cl *Client) sendMissing(ctx context.Context, c *cache.Cache, blobs []cache.Digest) error {
	missing, err := cl.cas.FindMissing(ctx, blobs)
	if err != nil {
		return cl.storeFailure(ctx, "finding the blobs the CAS lacks", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, d := range missing {
		g.Go(func() error {
			err := cl.cas.WriteBlob(gctx, d, func() (io.ReadCloser, error) { return c.OpenBlob(d) })
			return cl.storeFailure(gctx, "uploading blob "+d.String(), err)
		})
	}
	return g.Wait()
}

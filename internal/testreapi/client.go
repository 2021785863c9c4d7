package testreapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// metadataKey is the gRPC header REAPI carries a RequestMetadata in.
const metadataKey = "build.bazel.remote.execution.v2.requestmetadata-bin"

// DigestOf is the SHA-256 digest of data.
func DigestOf(data []byte) *repb.Digest {
	sum := sha256.Sum256(data)
	return &repb.Digest{Hash: hex.EncodeToString(sum[:]), SizeBytes: int64(len(data))}
}

// key is a digest as a map key.
func key(d *repb.Digest) string { return fmt.Sprintf("%s/%d", d.GetHash(), d.GetSizeBytes()) }

// Marshal is m's wire form; deterministic, so its digest is stable.
func Marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// WithMetadata is ctx carrying a RequestMetadata naming the tests as the tool and
// actionID as the action, as every call to the Bazel worker must.
func WithMetadata(t testing.TB, ctx context.Context, actionID string) context.Context {
	t.Helper()
	md := &repb.RequestMetadata{
		ToolDetails:      &repb.ToolDetails{ToolName: "gantry-tests", ToolVersion: "0"},
		ActionId:         actionID,
		ToolInvocationId: "test-invocation",
	}
	return metadata.AppendToOutgoingContext(ctx, metadataKey, string(Marshal(t, md)))
}

// Dial connects to addr (host:port) without TLS and closes the connection when the
// test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Blobs is content to upload, by digest key; Add returns each blob's digest.
type Blobs map[string][]byte

// Add adds data and returns its digest.
func (b Blobs) Add(data []byte) *repb.Digest {
	d := DigestOf(data)
	b[key(d)] = data
	return d
}

// AddMessage adds m's wire form and returns its digest.
func (b Blobs) AddMessage(t testing.TB, m proto.Message) *repb.Digest {
	t.Helper()
	return b.Add(Marshal(t, m))
}

// Upload stores the blobs in the CAS of conn's instance with one BatchUpdateBlobs
// call, failing the test on any error.
func (b Blobs) Upload(t testing.TB, ctx context.Context, conn *grpc.ClientConn, instance string) {
	t.Helper()
	req := &repb.BatchUpdateBlobsRequest{InstanceName: instance}
	for _, data := range b {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: DigestOf(data), Data: data})
	}
	resp, err := repb.NewContentAddressableStorageClient(conn).BatchUpdateBlobs(ctx, req)
	if err != nil {
		t.Fatalf("uploading %d blobs: %v", len(b), err)
	}
	for _, r := range resp.Responses {
		if r.Status.GetCode() != 0 {
			t.Fatalf("uploading blob %s: %v", r.Digest.GetHash(), r.Status)
		}
	}
}

// Read reads one blob from the CAS of conn's instance with ByteStream (the Bazel
// worker has no BatchReadBlobs).
func Read(t testing.TB, ctx context.Context, conn *grpc.ClientConn, instance string, d *repb.Digest) []byte {
	t.Helper()
	name := fmt.Sprintf("blobs/%s/%d", d.GetHash(), d.GetSizeBytes())
	if instance != "" {
		name = instance + "/" + name
	}
	stream, err := bspb.NewByteStreamClient(conn).Read(ctx, &bspb.ReadRequest{ResourceName: name})
	if err != nil {
		t.Fatalf("reading blob %s: %v", d.GetHash(), err)
	}
	var data []byte
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return data
		}
		if err != nil {
			t.Fatalf("reading blob %s: %v", d.GetHash(), err)
		}
		data = append(data, resp.Data...)
	}
}

// Dir adds the Directory messages and files of an input root to b and returns
// the root's digest. files are by slash-separated path: a path ending in "/" is an
// empty directory, one ending in "*" an executable file (the "*" is not part of
// its name), content starting with "->" a symlink to the rest.
func (b Blobs) Dir(t testing.TB, files map[string]string) *repb.Digest {
	t.Helper()
	type node struct {
		files map[string]string
		dirs  map[string]*node
	}
	newNode := func() *node { return &node{files: map[string]string{}, dirs: map[string]*node{}} }
	root := newNode()
	for path, content := range files {
		n := root
		parts := splitPath(path)
		for i, p := range parts {
			if i == len(parts)-1 && p != "" {
				n.files[p] = content
				break
			}
			if p == "" {
				break
			}
			if n.dirs[p] == nil {
				n.dirs[p] = newNode()
			}
			n = n.dirs[p]
		}
	}
	var put func(n *node) *repb.Digest
	put = func(n *node) *repb.Digest {
		dir := &repb.Directory{}
		for _, name := range sortedKeys(n.files) {
			c := n.files[name]
			if strings.HasPrefix(c, "->") {
				dir.Symlinks = append(dir.Symlinks, &repb.SymlinkNode{Name: name, Target: c[2:]})
				continue
			}
			base, exec := strings.CutSuffix(name, "*")
			dir.Files = append(dir.Files, &repb.FileNode{Name: base, Digest: b.Add([]byte(c)), IsExecutable: exec})
		}
		for _, name := range sortedKeys(n.dirs) {
			dir.Directories = append(dir.Directories, &repb.DirectoryNode{Name: name, Digest: put(n.dirs[name])})
		}
		return b.AddMessage(t, dir)
	}
	return put(root)
}

// splitPath splits a slash-separated path; a trailing "/" gives a last "" part.
func splitPath(path string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(path); i++ {
		if path[i] == '/' {
			parts = append(parts, path[start:i])
			start = i + 1
		}
	}
	return append(parts, path[start:])
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

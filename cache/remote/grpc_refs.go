package remote

import (
	"bytes"
	"context"
	"fmt"
	"io"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/internal/bstpb"
	"google.golang.org/protobuf/proto"
)

// How an artifact is kept by BuildStream 1.x's ReferenceStorage
// (bst-artifact-server), which has no ActionCache: the reference
// "gantry/<Key(key) hash>" names a Directory holding
//   - the directory "files", the root of the files tree,
//   - the file "gantry-artifact.json", the artifact record,
//   - the file "log", the build log, when there is one.
//
// bst-artifact-server walks everything a reference reaches on GetReference and
// drops the reference if a blob is missing, so the entry's blobs must all be
// there first (UpdateEntry's contract); the Directory itself is uploaded here.
const (
	refPrefix   = "gantry/"
	refLogName  = "log"
	refMaxBytes = 64 << 10 // an entry Directory is a few hundred bytes
)

// referenceName is the reference under which the artifact of key is kept.
func referenceName(key string) string { return refPrefix + Key(key).Hash }

// referenceDirectory encodes e as the Directory a reference names.
func referenceDirectory(e *Entry) *repb.Directory {
	dir := &repb.Directory{
		Directories: []*repb.DirectoryNode{{Name: acFilesPath, Digest: e.Files.Proto()}},
		Files:       []*repb.FileNode{{Name: acRecordPath, Digest: e.Record.Proto()}}, // sorted: "gantry-artifact.json" < "log"
	}
	if !e.Log.IsZero() {
		dir.Files = append(dir.Files, &repb.FileNode{Name: refLogName, Digest: e.Log.Proto()})
	}
	return dir
}

// directoryEntry decodes a Directory written by referenceDirectory. Tree
// stays zero: the reader walks the Directories from Files.
func directoryEntry(dir *repb.Directory) (*Entry, error) {
	var e Entry
	var err error
	for _, n := range dir.Directories {
		if n.Name == acFilesPath {
			if e.Files, err = digestFromProto(n.Digest); err != nil {
				return nil, fmt.Errorf("directory %q: %w", n.Name, err)
			}
		}
	}
	for _, n := range dir.Files {
		switch n.Name {
		case acRecordPath:
			e.Record, err = digestFromProto(n.Digest)
		case refLogName:
			e.Log, err = digestFromProto(n.Digest)
		}
		if err != nil {
			return nil, fmt.Errorf("file %q: %w", n.Name, err)
		}
	}
	if e.Files.IsZero() || e.Record.IsZero() {
		return nil, fmt.Errorf("not a gantry artifact: no %q directory or no %q file", acFilesPath, acRecordPath)
	}
	return &e, nil
}

// getReference resolves the reference of key and decodes its Directory.
func (s *grpcStore) getReference(ctx context.Context, op, key string) (*Entry, error) {
	var resp *bstpb.GetReferenceResponse
	err := s.call(ctx, op, func(ctx context.Context) (err error) {
		resp, err = s.refs.GetReference(ctx, &bstpb.GetReferenceRequest{InstanceName: s.instance, Key: referenceName(key)})
		return err
	})
	if err != nil {
		return nil, err
	}
	corrupt := func(err error) (*Entry, error) {
		return nil, &Error{Remote: s.name, Op: op, Kind: Corrupt, Err: err}
	}
	d, err := digestFromProto(resp.Digest)
	if err != nil {
		return corrupt(fmt.Errorf("reference %s: %w", referenceName(key), err))
	}
	if d.Size > refMaxBytes {
		return corrupt(fmt.Errorf("reference %s names a %d-byte directory: not a gantry artifact", referenceName(key), d.Size))
	}
	var buf bytes.Buffer
	if err := s.ReadBlob(ctx, d, &buf); err != nil {
		return nil, err
	}
	if got := cache.DigestOf(buf.Bytes()); got != d {
		return corrupt(fmt.Errorf("directory %s: received bytes with digest %s", d, got))
	}
	dir := &repb.Directory{}
	if err := proto.Unmarshal(buf.Bytes(), dir); err != nil {
		return corrupt(fmt.Errorf("directory %s: %w", d, err))
	}
	e, err := directoryEntry(dir)
	if err != nil {
		return corrupt(fmt.Errorf("directory %s: %w", d, err))
	}
	return e, nil
}

// updateReference uploads the Directory of e and points the reference of key
// at it.
func (s *grpcStore) updateReference(ctx context.Context, op, key string, e *Entry) error {
	data, err := cache.MarshalDirectory(referenceDirectory(e))
	if err != nil {
		return fmt.Errorf("%s on remote %s: encoding the entry: %w", op, s.name, err)
	}
	d := cache.DigestOf(data)
	if err := s.WriteBlob(ctx, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }); err != nil {
		return err
	}
	return s.call(ctx, op, func(ctx context.Context) error {
		_, err := s.refs.UpdateReference(ctx, &bstpb.UpdateReferenceRequest{InstanceName: s.instance, Keys: []string{referenceName(key)}, Digest: d.Proto()})
		return err
	})
}

package exec

import (
	"context"
	"fmt"
	"path"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

// Importing an output directory into the local CAS by digest: its Tree (or,
// from a v2.3 server sending only root_directory_digest, its Directories one
// by one), then the file blobs the local CAS lacks. Symlinks are imported as
// nodes, never followed; those absolute or escaping the output root are
// flagged.

// importTree imports od into c and returns its root Directory's digest and
// its flagged symlinks ("path -> target", relative to the output root).
func (cl *Client) importTree(ctx context.Context, c *cache.Cache, od *repb.OutputDirectory) (cache.Digest, []string, error) {
	op := "fetching output directory " + od.GetPath()
	dirs := map[cache.Digest]*repb.Directory{} // by the digest their parents name them by
	var root cache.Digest
	switch {
	case od.GetTreeDigest() != nil && od.GetTreeDigest().GetHash() != "":
		data, err := cl.readBlob(ctx, cache.DigestFromProto(od.GetTreeDigest()))
		if err != nil {
			return cache.Digest{}, nil, cl.storeFailure(ctx, op, err)
		}
		tree := &repb.Tree{}
		if err := proto.Unmarshal(data, tree); err != nil || tree.Root == nil {
			return cache.Digest{}, nil, &InfraError{Op: op, Err: fmt.Errorf("its Tree blob %s does not decode: %v", od.GetTreeDigest().GetHash(), err)}
		}
		for _, d := range append([]*repb.Directory{tree.Root}, tree.Children...) {
			b, err := cache.MarshalDirectory(d)
			if err != nil {
				return cache.Digest{}, nil, err
			}
			dirs[cache.DigestOf(b)] = d
		}
		b, _ := cache.MarshalDirectory(tree.Root)
		root = cache.DigestOf(b)
	case od.GetRootDirectoryDigest() != nil:
		root = cache.DigestFromProto(od.GetRootDirectoryDigest())
		if err := cl.fetchDirectories(ctx, c, root, dirs); err != nil {
			return cache.Digest{}, nil, cl.storeFailure(ctx, op, err)
		}
	default:
		return cache.Digest{}, nil, &InfraError{Op: op, Err: fmt.Errorf("the server named neither its tree nor its root directory")}
	}

	var files []cache.Digest
	var flagged []string
	seen := map[cache.Digest]bool{}
	var store func(d cache.Digest, at string) error
	store = func(d cache.Digest, at string) error {
		dir := dirs[d]
		if dir == nil {
			return &InfraError{Op: op, Err: fmt.Errorf("its tree lacks directory %s (at %q)", d, at)}
		}
		if err := cache.ValidateDirectory(dir); err != nil {
			return &InfraError{Op: op, Err: fmt.Errorf("directory %q: %v", at, err)}
		}
		for _, sub := range dir.Directories {
			if err := store(cache.DigestFromProto(sub.Digest), path.Join(at, sub.Name)); err != nil {
				return err
			}
		}
		for _, f := range dir.Files {
			if fd := cache.DigestFromProto(f.Digest); !seen[fd] && !c.HasIntactBlob(fd) {
				seen[fd] = true
				files = append(files, fd)
			}
		}
		for _, s := range dir.Symlinks {
			if escapes(at, s.Target) {
				flagged = append(flagged, path.Join(at, s.Name)+" -> "+s.Target)
			}
		}
		if _, err := c.PutDirectory(dir); err != nil {
			return err
		}
		return nil
	}
	if err := store(root, ""); err != nil {
		return cache.Digest{}, nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, d := range files {
		g.Go(func() error {
			data, err := cl.readBlob(gctx, d)
			if err != nil {
				return cl.storeFailure(gctx, op, err)
			}
			_, err = c.PutBlob(data)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return cache.Digest{}, nil, err
	}
	return root, flagged, nil
}

// fetchDirectories reads the Directory d and those below it into dirs, from
// the local CAS where it has them, else from the remote one.
func (cl *Client) fetchDirectories(ctx context.Context, c *cache.Cache, d cache.Digest, dirs map[cache.Digest]*repb.Directory) error {
	if dirs[d] != nil {
		return nil
	}
	dir, err := c.ReadDirectory(d)
	if err != nil {
		if dir, err = cl.readDirectory(ctx, d); err != nil {
			return err
		}
	}
	dirs[d] = dir
	for _, sub := range dir.Directories {
		if err := cl.fetchDirectories(ctx, c, cache.DigestFromProto(sub.Digest), dirs); err != nil {
			return err
		}
	}
	return nil
}

// readDirectory reads Directory d from the remote CAS.
func (cl *Client) readDirectory(ctx context.Context, d cache.Digest) (*repb.Directory, error) {
	data, err := cl.readBlob(ctx, d)
	if err != nil {
		return nil, err
	}
	dir := &repb.Directory{}
	if err := proto.Unmarshal(data, dir); err != nil {
		return nil, fmt.Errorf("directory %s does not decode: %v", d, err)
	}
	return dir, nil
}

// escapes reports whether a symlink in dir (relative to an output root) with
// target is absolute or leads out of the output root.
func escapes(dir, target string) bool {
	if strings.HasPrefix(target, "/") {
		return true
	}
	p := path.Join(dir, target)
	return p == ".." || strings.HasPrefix(p, "../")
}

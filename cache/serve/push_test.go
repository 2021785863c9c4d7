package serve

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

// damage flips the first byte of the blob at path, keeping its size.
func damage(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
}

// startGantryServer serves a new store over HTTP and gRPC on 127.0.0.1 until the
// test ends, and returns its directory and a spec of each protocol with a token.
func startGantryServer(t *testing.T) (dir string, specs map[string]remote.Spec) {
	t.Helper()
	dir = t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := serveForTest(t, Options{Dir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TokenFile: tokens, ShutdownGrace: time.Second})
	h, g := srv.Addrs()
	return dir, map[string]remote.Spec{
		"http": {URL: "http://" + h, TokenFile: tokenFile},
		"grpc": {URL: "grpc://" + g, TokenFile: tokenFile},
	}
}

// TestPushToGantryServerNeverUploadsADamagedBlob: against gantry's own server,
// which checks what it receives, a damaged local blob is still found by the
// client as it reads it (a *BlobError, the blob removed, the artifact for the
// caller to drop), not taken for the server's refusal; the server stores
// neither the blob nor the entry. Over gRPC, a small blob travels in a batch,
// the large one over ByteStream.
func TestPushToGantryServerNeverUploadsADamagedBlob(t *testing.T) {
	for _, proto := range []string{"http", "grpc"} {
		for _, which := range []string{"small", "large"} {
			t.Run(proto+"/"+which, func(t *testing.T) {
				dir, specs := startGantryServer(t)
				store, err := remote.Open(specs[proto])
				if err != nil {
					t.Fatal(err)
				}
				defer store.Close()
				c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
				if err != nil {
					t.Fatal(err)
				}
				src := t.TempDir()
				for name, content := range map[string]string{
					"small": "a small file\n",
					"large": strings.Repeat("large file ", 600000), // over the 4 MiB batch limit
				} {
					if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				root, err := c.StoreTree(src)
				if err != nil {
					t.Fatal(err)
				}
				a := &cache.Artifact{Project: "demo", Element: "big.toml", Key: strings.Repeat("ef", 32), Success: true, Files: root}
				if err := c.Commit(a); err != nil {
					t.Fatal(err)
				}
				if a, err = c.Lookup(a.Project, a.Element, a.Key); err != nil {
					t.Fatal(err)
				}
				var bad cache.Digest
				c.WalkTree(a.Files, func(e cache.TreeEntry) error {
					if e.Path == which {
						bad = e.Digest
					}
					return nil
				})
				damage(t, c.BlobPath(bad))
				_, pushed, err := remote.PushArtifact(context.Background(), c, store, a, nil)
				if pushed {
					t.Fatal("pushed an artifact with a damaged blob")
				}
				var be *cache.BlobError
				if !errors.As(err, &be) || be.Digest != bad || be.Missing || !errors.Is(err, cache.ErrCorrupt) {
					t.Fatalf("push of an artifact with a damaged blob: got %v, want a *BlobError for %s", err, bad)
				}
				var re *remote.Error
				if errors.As(err, &re) {
					t.Fatalf("the local damage was reported as the remote's: %v", err)
				}
				if c.HasBlob(bad) {
					t.Fatal("the damaged blob is still in the cache")
				}
				served, err := cache.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				if served.HasBlob(bad) {
					t.Fatal("the server stored the damaged blob")
				}
				if _, err := store.GetEntry(context.Background(), a.Key); !errors.Is(err, cache.ErrNotFound) {
					t.Fatalf("the server has an entry: %v", err)
				}
			})
		}
	}
}

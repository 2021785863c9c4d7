package serve

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/cache/remote"
)

// TestAssetsClient: cache/remote's asset client against the server: a miss is
// no error, a pushed file comes back, a read-only credential cannot push, and
// an http remote cannot keep assets.
func TestAssetsClient(t *testing.T) {
	a := startAssetServer(t, t.TempDir(), Options{})
	_, addr := a.srv.Addrs()
	token := func(tok string) string {
		p := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writer, err := remote.OpenAssets(remote.Spec{URL: "grpc://" + addr, TokenFile: token("s3cret"), Push: true})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	ctx := context.Background()
	qs := [][2]string{{"vcs.commit", "c1"}}
	var buf bytes.Buffer
	if found, err := writer.GetAsset(ctx, "urn:x", qs, &buf); found || err != nil {
		t.Fatalf("a miss: found %v, %v", found, err)
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("asset content"), 0o644)
	if err := writer.PutAsset(ctx, "urn:x", qs, file); err != nil {
		t.Fatal(err)
	}
	if found, err := writer.GetAsset(ctx, "urn:x", qs, &buf); !found || err != nil || buf.String() != "asset content" {
		t.Fatalf("after the push: found %v, %v, %q", found, err, buf.String())
	}

	reader, err := remote.OpenAssets(remote.Spec{URL: "grpc://" + addr, TokenFile: token("r3ad")})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	err = reader.PutAsset(ctx, "urn:y", nil, file)
	if !remote.IsKind(err, remote.Auth) {
		t.Errorf("a read-only push: %v, want credentials refused", err)
	}
	_, err = remote.OpenAssets(remote.Spec{URL: "http://" + addr})
	if want := "remote http://" + addr + ": sources are kept through the Remote Asset API, which is gRPC: use a grpc:// or grpcs:// url"; err == nil || err.Error() != want {
		t.Errorf("an http remote: %v, want %q", err, want)
	}
}

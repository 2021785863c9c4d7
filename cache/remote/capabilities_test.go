package remote

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Capabilities asks the server with the spec's credentials and REAPI's
// RequestMetadata (servers such as Bazel's remote worker refuse calls without it).
func TestCapabilitiesSendsCredentialsAndRequestMetadata(t *testing.T) {
	var seen *repb.RequestMetadata
	check := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
			return nil, status.Error(codes.Unauthenticated, "bad or missing credentials")
		}
		raw := md.Get(requestMetadataKey)
		if len(raw) != 1 {
			return nil, status.Error(codes.InvalidArgument, "no RequestMetadata")
		}
		seen = &repb.RequestMetadata{}
		if err := proto.Unmarshal([]byte(raw[0]), seen); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return h(ctx, req)
	})
	addr := newTestREAPI().start(t, check)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caps, err := Capabilities(context.Background(), Spec{URL: "grpc://" + addr, TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	if caps.GetCacheCapabilities().GetMaxBatchTotalSizeBytes() != 1<<20 {
		t.Errorf("capabilities %v", caps)
	}
	if seen.GetToolDetails().GetToolName() != "gantry" || seen.GetToolInvocationId() == "" {
		t.Errorf("request metadata %v", seen)
	}
}

// Nothing listening: a quick Unavailable naming the service.
func TestCapabilitiesOfNothingListening(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Capabilities(ctx, Spec{URL: "grpc://" + addr})
	if !IsKind(err, Unavailable) || !strings.HasPrefix(err.Error(), "remote grpc://"+addr+": asking its capabilities: Unavailable: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

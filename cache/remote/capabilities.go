package remote

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// requestMetadataKey is the header of REAPI's RequestMetadata (binary, hence -bin).
const requestMetadataKey = "build.bazel.remote.execution.v2.requestmetadata-bin"

// Capabilities asks the grpc(s):// service of spec what it offers (REAPI
// GetCapabilities for its instance), connecting with spec's TLS and credentials as
// the stores do; ctx bounds the call. For the checks before a session (a remote
// execution service is reachable): a failed call is a *Error naming the service.
func Capabilities(ctx context.Context, spec Spec) (*repb.ServerCapabilities, error) {
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "grpc" && u.Scheme != "grpcs") {
		return nil, fmt.Errorf("remote %s: not a grpc:// or grpcs:// url", spec.Display())
	}
	st, err := newGRPCStore(spec, u)
	if err != nil {
		return nil, err
	}
	s := st.(*grpcStore)
	defer s.Close()
	// Some servers (Bazel's remote worker) refuse calls without RequestMetadata.
	md, err := proto.Marshal(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "gantry"},
		ToolInvocationId: rand.Text(), ActionId: "capabilities"})
	if err != nil {
		return nil, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, requestMetadataKey, string(md))
	var caps *repb.ServerCapabilities
	err = s.call(ctx, "asking its capabilities", func(ctx context.Context) (err error) {
		caps, err = s.caps.GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: s.instance})
		return err
	})
	return caps, err
}

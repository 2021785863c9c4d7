package cli

import (
	"context"
	"net"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
)

// capsOnly is a REAPI server offering only Capabilities, executing or not.
type capsOnly struct{ exec bool }

func (c capsOnly) GetCapabilities(context.Context, *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	caps := &repb.ServerCapabilities{CacheCapabilities: &repb.CacheCapabilities{DigestFunctions: []repb.DigestFunction_Value{repb.DigestFunction_SHA256}}}
	if c.exec {
		caps.ExecutionCapabilities = &repb.ExecutionCapabilities{DigestFunction: repb.DigestFunction_SHA256, ExecEnabled: true}
	}
	return caps, nil
}

// startCapsOnly serves c on 127.0.0.1 until the test ends and returns its grpc:// url.
func startCapsOnly(t *testing.T, c capsOnly) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	repb.RegisterCapabilitiesServer(g, c)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return "grpc://" + lis.Addr().String()
}

// The check before a session: an execution service must say it executes (a cache
// such as bazel-remote or `gantry cache serve` does not); an action-cache service
// alone need not; nothing is asked when nothing is to be built.
func TestCheckRemoteExecutionAsksTheServices(t *testing.T) {
	toBuild := []*queues.Item{{Element: &element.Element{Name: "a.toml"}}}
	cacheURL, execURL := startCapsOnly(t, capsOnly{}), startCapsOnly(t, capsOnly{exec: true})

	err := checkRemoteExecution(rexec.Config{Execution: remote.Spec{URL: cacheURL}, From: "--remote-executor"}, toBuild)
	want := "remote execution: the execution-service " + cacheURL + " does not execute actions (its capabilities do not say exec_enabled): is it only a cache?\n" +
		"nothing was built: point it at an execution server, or correct --remote-executor"
	if err == nil || err.Error() != want {
		t.Errorf("a cache as the execution service: %v\nwant %s", err, want)
	}
	if err := checkRemoteExecution(rexec.Config{Execution: remote.Spec{URL: execURL}, ActionCache: remote.Spec{URL: cacheURL}}, toBuild); err != nil {
		t.Errorf("an executor and an action cache: %v", err)
	}
	if err := checkRemoteExecution(rexec.Config{ActionCache: remote.Spec{URL: cacheURL}}, toBuild); err != nil {
		t.Errorf("an action cache alone: %v", err)
	}
	cached := []*queues.Item{{Element: &element.Element{Name: "a.toml"}, Cached: true}}
	if err := checkRemoteExecution(rexec.Config{Execution: remote.Spec{URL: cacheURL}}, cached); err != nil {
		t.Errorf("nothing to build: %v", err)
	}
}

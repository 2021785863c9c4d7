package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
	rexec "github.com/gantry-build/gantry/remote/exec"
	"github.com/gantry-build/gantry/resources"
)

// checkRemoteExecutorFlag checks --remote-executor before anything is loaded.
func checkRemoteExecutorFlag(url string) error {
	if url == "" {
		return nil
	}
	if err := element.CheckServiceURL(url); err != nil {
		return usagef("--remote-executor: %v", err)
	}
	return nil
}

// remoteExecution is the session's remote execution: the user config's
// [remote-execution] over project.toml's, and --remote-executor (executor) over both.
func (s *session) remoteExecution(executor string) (rexec.Config, error) {
	return element.RemoteExecutionConfig(s.project.RemoteExecution, s.user.RemoteExecution, executor)
}

// remoteLimits adds the remote execution slots to limits.
func remoteLimits(limits map[resources.Resource]int, c rexec.Config) {
	limits[resources.Remote] = c.Jobs()
}

// reachTimeout bounds the question each remote execution service is asked before a
// session: an answer takes milliseconds, a refused connection less.
const reachTimeout = 10 * time.Second

// checkRemoteExecution fails the session before it starts, saying which service and
// what to do, when something is to be built and a configured remote execution
// service does not answer its Capabilities, or its execution service does not
// execute: a cluster that is down must not become failed builds.
func checkRemoteExecution(c rexec.Config, items []*queues.Item) error {
	services := c.Services()
	if len(services) == 0 || !somethingToBuild(items) {
		return nil
	}
	fix := "correct [remote-execution] in " + c.From
	if c.From == "--remote-executor" {
		fix = "correct --remote-executor"
	}
	for _, sv := range services {
		ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
		caps, err := remote.Capabilities(ctx, sv.Spec)
		cancel()
		if err != nil {
			return fmt.Errorf("remote execution: the %s does not answer: %v\nnothing was built: start it, or %s", sv.Key, err, fix)
		}
		if sv.Key == "execution-service" && !caps.GetExecutionCapabilities().GetExecEnabled() {
			return fmt.Errorf("remote execution: the execution-service %s does not execute actions (its capabilities do not say exec_enabled): is it only a cache?\nnothing was built: point it at an execution server, or %s", sv.Spec.Display(), fix)
		}
	}
	return nil
}

// somethingToBuild says whether a session of items builds anything.
func somethingToBuild(items []*queues.Item) bool {
	for _, it := range items {
		if !it.Cached && !it.Failed {
			return true
		}
	}
	return false
}

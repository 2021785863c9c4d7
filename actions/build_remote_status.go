package actions

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// The status lines of a remote build (job.Reporter.Status), as the TUI's job row,
// verbose plain output (STATUS) and JSON (job-status events) show them: where the
// Action is on the cluster, from the stages of the server's ExecuteOperationMetadata,
// then its outputs coming into the local cache. A build job reports each when it
// changes, not per message: a server repeats its metadata on the Execute stream and
// after WaitExecution.
const (
	statusRemoteCacheCheck = "looking in the cluster's action cache"
	statusRemoteQueued     = "queued on the cluster"
	statusRemoteExecuting  = "executing on the cluster"
	statusRemoteFetching   = "fetching outputs"
)

// remoteStageStatus is the status line of each stage a server reports (UNKNOWN:
// none; COMPLETED: the outputs are fetched next). An action cache hit has no stage:
// its line is statusRemoteFetching.
var remoteStageStatus = map[repb.ExecutionStage_Value]string{
	repb.ExecutionStage_CACHE_CHECK: statusRemoteCacheCheck,
	repb.ExecutionStage_QUEUED:      statusRemoteQueued,
	repb.ExecutionStage_EXECUTING:   statusRemoteExecuting,
	repb.ExecutionStage_COMPLETED:   statusRemoteFetching,
}

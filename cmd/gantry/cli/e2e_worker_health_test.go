package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/testreapi"
)

// TestWorkerBuildGridHostProcessTree: with --sandbox host, what an action starts in
// the background dies with the worker's kill -9 as the foreground command does: the
// action runs in a job process, under the job's process-tree rules.
func TestWorkerBuildGridHostProcessTree(t *testing.T) {
	gantryBinary(t)
	bg := testreapi.StartBuildGrid(t, testreapi.BuildGridOptions{})
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := startGantryWorker(t, bg, "gantry-host-tree-bot", "--sandbox", "host")

	// A background process, a daemonised one (setsid, its parent gone) and the
	// foreground one, marked in their command lines.
	marker := fmt.Sprintf("gantry-worker-orphan-%d", time.Now().UnixNano())
	killMarkedOnCleanup(t, marker)
	ready := filepath.Join(t.TempDir(), "ready")
	blobs := testreapi.Blobs{}
	action := bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", longLivedBuild(marker, ready)})
	op, _ := bgExecute(t, ctx, conn, bg, blobs, action)
	defer func() { // not for another worker
		_, _ = longrunningpb.NewOperationsClient(conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: op})
	}()
	eventually(t, e2eTimeout, "the action is ready", func() bool { _, err := os.Stat(ready); return err == nil })
	pids := waitMarked(t, marker, 3)
	w.kill()
	proctest.EventuallyDescribed(t, fmt.Sprintf("no process marked %s is left (was %v)", marker, pids),
		func() bool { return len(markedProcesses(marker)) == 0 },
		func() string {
			out, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,sid,stat,args", "--forest").CombinedOutput()
			return string(out)
		})
}

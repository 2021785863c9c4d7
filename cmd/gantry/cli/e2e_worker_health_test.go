package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/proctest"
	"github.com/gantry-build/gantry/internal/testpki"
	"github.com/gantry-build/gantry/internal/testreapi"
)

// TestWorkerBuildGridHealthAndProcessTree runs gantry workers under one BuildGrid:
//   - a worker whose work directory cannot hold an action reports UNHEALTHY, and
//     BuildGrid (which assigns leases to OK bots only) gives the action to a healthy
//     worker; once it recovers it reports OK and takes leases again;
//   - with --sandbox host, what an action starts in the background dies with the
//     worker's kill -9 as the foreground command does: the action runs in a job
//     process, under the job's process-tree rules. Last: BuildGrid keeps assigning
//     actions to the killed bot until its session expires.
func TestWorkerBuildGridHealthAndProcessTree(t *testing.T) {
	gantryBinary(t)
	bg := testreapi.StartBuildGrid(t, testreapi.BuildGridOptions{})
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("UnhealthyWorkerTakesNoLease", func(t *testing.T) {
		workDir := t.TempDir()
		sick := startGantryWorker(t, bg, "gantry-sick-bot", "--sandbox", "host", "--work-dir", workDir, "--health-interval", "100ms")

		run := filepath.Join(workDir, "run")
		if err := os.RemoveAll(run); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(run, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		unhealthy := fmt.Sprintf("gantry worker gantry-sick-bot: UNHEALTHY, taking no leases: the work directory %s is not writable (mkdir %s: not a directory): fix its permissions or give another --work-dir\n", workDir, run)
		eventually(t, e2eTimeout, "the worker to find itself unhealthy", func() bool { return strings.Contains(sick.log.String(), unhealthy) })

		worker := func(wait func() *repb.ExecuteResponse) string {
			t.Helper()
			resp := wait()
			if resp.GetStatus().GetCode() != 0 || resp.GetResult().GetExitCode() != 0 {
				t.Fatalf("status %v, exit code %d; want OK and 0", resp.GetStatus(), resp.GetResult().GetExitCode())
			}
			return resp.GetResult().GetExecutionMetadata().GetWorker()
		}
		blobs := testreapi.Blobs{}
		_, wait := bgExecute(t, ctx, conn, bg, blobs, bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", "echo first"}))
		healthy := startGantryWorker(t, bg, "gantry-healthy-bot", "--sandbox", "host")
		if got := worker(wait); got != "gantry-healthy-bot" {
			t.Errorf("the action ran on %s, want gantry-healthy-bot", got)
		}
		if strings.Contains(sick.log.String(), "accepted") {
			t.Errorf("the unhealthy worker accepted a lease:\n%s", sick.log)
		}
		if n := strings.Count(sick.log.String(), "UNHEALTHY"); n != 1 {
			t.Errorf("the unhealthy worker said so %d times, want once:\n%s", n, sick.log)
		}

		// Recovered, it is the only worker left and takes the next action.
		if err := os.Remove(run); err != nil {
			t.Fatal(err)
		}
		eventually(t, e2eTimeout, "the worker to recover", func() bool { return strings.Contains(sick.log.String(), "healthy again") })
		healthy.stop()
		blobs = testreapi.Blobs{}
		_, wait = bgExecute(t, ctx, conn, bg, blobs, bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", "echo second"}))
		if got := worker(wait); got != "gantry-sick-bot" {
			t.Errorf("the action ran on %s, want gantry-sick-bot (recovered)", got)
		}
	})

	t.Run("KilledHostWorkerLeavesNothingRunning", func(t *testing.T) {
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
	})
}

// TestWorkerBuildGridTLS: BuildGrid serving TLS, asking for client certificates
// and JWTs; gantry worker reaches it with --server-ca, --client-cert, --client-key
// and --token-file, or the same keys in [worker.bots], and stops with what to do
// when its CA or its token is not the server's.
func TestWorkerBuildGridTLS(t *testing.T) {
	gantryBinary(t)
	pki := testpki.New(t)
	bg := testreapi.StartBuildGrid(t, testreapi.BuildGridOptions{TLS: pki, JWTSecret: "gantry-worker-test-secret"})
	conn := bg.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runsOn := func(t *testing.T, want string) {
		t.Helper()
		blobs := testreapi.Blobs{}
		_, wait := bgExecute(t, ctx, conn, bg, blobs, bgAction(t, blobs, map[string]string{}, []string{"/bin/sh", "-c", "echo over tls"}))
		resp := wait()
		if resp.GetStatus().GetCode() != 0 || resp.GetResult().GetExitCode() != 0 {
			t.Fatalf("status %v, exit code %d; want OK and 0", resp.GetStatus(), resp.GetResult().GetExitCode())
		}
		if got := resp.GetResult().GetExecutionMetadata().GetWorker(); got != want {
			t.Errorf("the action ran on %s, want %s", got, want)
		}
	}
	credentials := []string{"--server-ca", pki.CA, "--client-cert", pki.ClientCert, "--client-key", pki.ClientKey}

	t.Run("Flags", func(t *testing.T) {
		w := startGantryWorker(t, bg, "gantry-tls-flags-bot", append([]string{"--sandbox", "host", "--token-file", bg.TokenFile}, credentials...)...)
		runsOn(t, "gantry-tls-flags-bot")
		w.stop()
	})

	t.Run("WorkerConfig", func(t *testing.T) {
		config := filepath.Join(t.TempDir(), "user.toml")
		text := fmt.Sprintf("[worker]\nsandbox = \"host\"\n[worker.bots]\nurl = %q\nserver-ca = %q\nclient-cert = %q\nclient-key = %q\ntoken-file = %q\n",
			bg.URL(), pki.CA, pki.ClientCert, pki.ClientKey, bg.TokenFile)
		if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		w := startGantryWorker(t, nil, "gantry-tls-config-bot", "--config", config)
		runsOn(t, "gantry-tls-config-bot")
		w.stop()
	})

	// What the worker says and does when the server will not have it: exit 1.
	refused := func(t *testing.T, args ...string) string {
		t.Helper()
		run, stop := context.WithTimeout(ctx, time.Minute)
		defer stop()
		cmd := exec.CommandContext(run, gantryBinary(t), append([]string{"worker", "--bots", bg.URL(), "--bot-id", "gantry-refused-bot",
			"--work-dir", t.TempDir(), "--sandbox", "host"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("gantry worker: %v, exit code %d, want 1:\n%s", err, code, &stderr)
		}
		return stderr.String()
	}

	t.Run("WrongCA", func(t *testing.T) {
		other := testpki.New(t)
		got := refused(t, "--server-ca", other.CA, "--client-cert", pki.ClientCert, "--client-key", pki.ClientKey, "--token-file", bg.TokenFile)
		want := "gantry: worker: creating a bot session on " + bg.URL() + `: Unavailable: connection error: desc = "transport: authentication handshake failed: ` +
			`tls: failed to verify certificate: x509: certificate signed by unknown authority (possibly because of \"x509: ECDSA verification failure\" ` +
			`while trying to verify candidate authority certificate \"gantry test CA\")": give the CA that signed the server's certificate with --server-ca FILE (server-ca in [worker.bots])` + "\n"
		if got != want {
			t.Fatalf("stderr:\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("NoToken", func(t *testing.T) {
		got := refused(t, credentials...)
		want := "gantry: worker: creating a bot session on " + bg.URL() + ": Unauthenticated: No valid authorization or authentication provided: " +
			"give a token the server accepts with --token-file FILE (token-file in [worker.bots])\n"
		if got != want {
			t.Fatalf("stderr:\n%s\nwant\n%s", got, want)
		}
	})
}

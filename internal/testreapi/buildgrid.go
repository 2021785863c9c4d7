package testreapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/gantry-build/gantry/internal/testpki"
)

// BuildGridVersion is the BuildGrid release the tests run against; .ci/run installs it.
const BuildGridVersion = "0.9.1"

// DefaultBuildGridVenv is where .ci/run puts BuildGrid's venv when GANTRY_BUILDGRID_VENV
// is not set.
const DefaultBuildGridVenv = "/var/cache/gantry-ci/buildgrid-" + BuildGridVersion

// BuildGridVenvEnv names the environment variable holding the venv's directory.
const BuildGridVenvEnv = "GANTRY_BUILDGRID_VENV"

// buildGridInstall is the install line a skipped test prints.
const buildGridInstall = "bash .ci/run installs it; by hand: python3.13 -m venv DIR && " +
	"DIR/bin/pip install buildgrid==" + BuildGridVersion + " -c .ci/buildgrid-constraints.txt, " +
	"then " + BuildGridVenvEnv + "=DIR (default " + DefaultBuildGridVenv + "); " +
	"its scheduler needs PostgreSQL: apt-get install postgresql"

// buildGridStartTimeout bounds each step of bringing the server up (PostgreSQL ready,
// BuildGrid answering Capabilities); a loaded CI machine imports BuildGrid's Python in
// a few seconds.
const buildGridStartTimeout = 90 * time.Second

// BuildGrid is a running `bgd server start`: execution (with the Bots and Operations
// services), CAS, ByteStream, action cache and capabilities under one instance, on
// 127.0.0.1, with a disk CAS in the test's temporary directory and a PostgreSQL of its
// own for the scheduler. Everything stops when the test ends.
type BuildGrid struct {
	Addr     string // host:port of the gRPC server
	Instance string // the REAPI instance name
	// TokenFile holds a JWT the server accepts when BuildGridOptions.JWTSecret is
	// set ("" otherwise).
	TokenFile string
	opts      BuildGridOptions
	log       *LockedBuffer
}

// URL is the server's address as gantry's remote options take it: grpcs:// with
// BuildGridOptions.TLS.
func (b *BuildGrid) URL() string {
	if b.opts.TLS != nil {
		return "grpcs://" + b.Addr
	}
	return "grpc://" + b.Addr
}

// Log is what bgd and its PostgreSQL printed so far.
func (b *BuildGrid) Log() string { return b.log.String() }

// Conn is a gRPC connection to the server (with the PKI's CA and client
// certificate, and the token, as the options ask), closed when the test ends.
func (b *BuildGrid) Conn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(b.Addr, append(b.credentials(t),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}))...)
	if err != nil {
		t.Fatalf("dialing BuildGrid at %s: %v", b.Addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// BuildGridOptions change how StartBuildGrid configures the server; the zero value is
// a plaintext server with BuildGrid's own defaults.
type BuildGridOptions struct {
	// BotKeepalive is the scheduler's bot-session-keepalive-timeout: how long a bot
	// may go without an UpdateBotSession before BuildGrid closes its session and
	// re-queues its leases (0: BuildGrid's default, 600 s). Whole seconds, at least
	// 4 s: BuildGrid holds a bot's long poll for 80 % of it and assigns no lease to
	// a poll held under 3 s. The expired sessions are then looked for every second,
	// not every 10 s.
	BotKeepalive time.Duration
	// ThreadPoolSize is bgd's thread-pool-size, which is also its limit of
	// concurrent RPCs (0: BuildGrid's default, 5 per CPU). Each Execute stream
	// and each bot's long poll holds one; a call over the limit fails with
	// ResourceExhausted: "Concurrent RPC limit exceeded!".
	ThreadPoolSize int
	// PollInterval sets the scheduler's poll-interval (operation updates),
	// bot-poll-interval and job-assignment-interval (0: BuildGrid's defaults, 1 s
	// each: about a second of latency per action).
	PollInterval time.Duration
	// TLS serves TLS with the PKI's server certificate, and asks clients for a
	// certificate signed by its CA.
	TLS *testpki.PKI
	// JWTSecret makes every call need a JWT signed with it (HS256): the server's
	// TokenFile holds one.
	JWTSecret string
}

// serverSettings are the top-level lines opts adds to bgd's configuration.
func (opts BuildGridOptions) serverSettings() string {
	if opts.ThreadPoolSize == 0 {
		return ""
	}
	return fmt.Sprintf("thread-pool-size: %d\n", opts.ThreadPoolSize)
}

// schedulerSettings are the lines opts adds to the !sql-scheduler.
func (opts BuildGridOptions) schedulerSettings(t testing.TB) string {
	t.Helper()
	var lines string
	if opts.PollInterval > 0 {
		secs := opts.PollInterval.Seconds()
		lines = fmt.Sprintf("    poll-interval: %g\n    bot-poll-interval: %g\n    job-assignment-interval: %g\n", secs, secs, secs)
	}
	if opts.BotKeepalive == 0 {
		return lines
	}
	if opts.BotKeepalive < 4*time.Second || opts.BotKeepalive%time.Second != 0 {
		t.Fatalf("BuildGridOptions.BotKeepalive %s: whole seconds, at least 4s (BuildGrid leases nothing to a poll held under 3s)", opts.BotKeepalive)
	}
	return lines + fmt.Sprintf("    bot-session-keepalive-timeout: %d\n    session-expiry-timer-interval: 1\n", opts.BotKeepalive/time.Second)
}

// StartBuildGrid starts BuildGrid on a free port of 127.0.0.1 and returns once it
// answers a Capabilities call. Without BuildGrid's venv or PostgreSQL the test skips
// with the install line, or fails with CI=true.
func StartBuildGrid(t testing.TB, opts BuildGridOptions) *BuildGrid {
	t.Helper()
	venv := os.Getenv(BuildGridVenvEnv)
	if venv == "" {
		venv = DefaultBuildGridVenv
	}
	bgd := filepath.Join(venv, "bin", "bgd")
	if _, err := os.Stat(bgd); err != nil {
		buildGridMissing(t, fmt.Sprintf("BuildGrid %s is not installed (no %s)", BuildGridVersion, bgd))
	}
	pgBin := postgresBinDir()
	if pgBin == "" {
		buildGridMissing(t, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres)")
	}

	b := &BuildGrid{Instance: "", opts: opts, log: &LockedBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("BuildGrid's output:\n%s", b.log.String())
		}
	})
	db := startPostgres(t, pgBin, b.log)
	runBounded(t, exec.Command(bgd, "migrate", "apply", db), "bgd migrate apply "+db)

	dir := t.TempDir()
	port, err := freeLocalPort()
	if err != nil {
		t.Fatal(err)
	}
	b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	config := filepath.Join(dir, "buildgrid.yml")
	text := fmt.Sprintf(buildGridConfig, opts.serverSettings(), b.serverConfig(t, dir), db, filepath.Join(dir, "cas"), opts.schedulerSettings(t), b.Instance)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bgd, "server", "start", config)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = b.log, b.log
	exited := startBuildGridProcess(t, cmd, "bgd server start", syscall.SIGTERM)

	// Ready when a Capabilities call succeeds: the call waits for the connection, and
	// the wait ends early if bgd exits.
	ctx, cancel := context.WithTimeout(context.Background(), buildGridStartTimeout)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	caps := repb.NewCapabilitiesClient(b.Conn(t))
	if _, err := caps.GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: b.Instance}, grpc.WaitForReady(true)); err != nil {
		select {
		case <-exited:
			t.Fatalf("bgd server start %s exited before answering Capabilities:\n%s", config, b.log.String())
		default:
		}
		t.Fatalf("BuildGrid at %s did not answer Capabilities within %s: %v", b.Addr, buildGridStartTimeout, err)
	}
	return b
}

// buildGridConfig is bgd's configuration: further server settings (lines), server
// and authorization (serverConfig), database, CAS directory, the scheduler's further
// settings (lines), instance. The execution service brings the Bots and Operations
// services; Capabilities is always served.
const buildGridConfig = `%s%s
connections:
  - !sql-connection &sql
    connection-string: "%s"
    pool-size: 5
storages:
  - !disk-storage &cas
    path: "%s"
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 1024
    allow-updates: true
    cache-failed-actions: true
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    action-cache: *ac
    storage: *cas
%sinstances:
  - name: "%s"
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *scheduler
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
`

// startPostgres runs a PostgreSQL of the test's own, listening only on a Unix socket in
// a new directory, and returns BuildGrid's connection string for it. PostgreSQL refuses
// to run as root: as root it runs as the postgres user.
func startPostgres(t testing.TB, pgBin string, log *LockedBuffer) string {
	t.Helper()
	// Not under t.TempDir(): the postgres user must reach it, and a socket path is
	// limited to 107 bytes.
	dir, err := os.MkdirTemp("", "gantry-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			buildGridMissing(t, "PostgreSQL refuses to run as root and there is no postgres user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "bgd", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	runBounded(t, initdb, "initdb for BuildGrid's database")

	cmd := exec.Command(filepath.Join(pgBin, "postgres"), "-D", data, "-k", dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	// SIGINT is PostgreSQL's fast shutdown.
	exited := startBuildGridProcess(t, cmd, "postgres", syscall.SIGINT)
	go func() {
		lines := bufio.NewScanner(stderr)
		seen := false
		for lines.Scan() {
			fmt.Fprintf(log, "postgres: %s\n", lines.Text())
			if !seen && strings.Contains(lines.Text(), "ready to accept connections") {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("postgres for BuildGrid exited before it was ready:\n%s", log.String())
	case <-time.After(buildGridStartTimeout):
		t.Fatalf("postgres for BuildGrid not ready within %s:\n%s", buildGridStartTimeout, log.String())
	}
	return "postgresql+psycopg://bgd@/postgres?host=" + dir
}

// startBuildGridProcess starts cmd in a process group of its own and, when the test ends, sends
// stop to its leader, then kills the whole group. The channel closes when it exits.
func startBuildGridProcess(t testing.TB, cmd *exec.Cmd, name string, stop syscall.Signal) <-chan struct{} {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// A test binary killed by its -timeout runs no cleanup: take the server along.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = syscall.Kill(pid, stop)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				// Not the test's failure: bgd's Python takes long to stop on a loaded
				// machine. Its process group is killed, which is all that matters.
				t.Logf("%s did not stop within 15s of %v; killing its process group", name, stop)
			}
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL) // anything it left in its group
		<-exited
	})
	return exited
}

// runBounded runs a setup command to its end, for at most buildGridStartTimeout.
func runBounded(t testing.TB, cmd *exec.Cmd, what string) {
	t.Helper()
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := startBuildGridProcess(t, cmd, what, syscall.SIGKILL)
	start := time.Now()
	select {
	case <-exited:
	case <-time.After(buildGridStartTimeout):
		t.Fatalf("%s did not finish within %s:\n%s", what, buildGridStartTimeout, out.String())
	}
	if !cmd.ProcessState.Success() {
		t.Fatalf("%s: %v after %s\n%s", what, cmd.ProcessState, time.Since(start).Round(time.Millisecond), out.String())
	}
}

// buildGridMissing fails the test with CI=true and skips it elsewhere.
func buildGridMissing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %s", why, buildGridInstall)
	}
	t.Skipf("%s: %s", why, buildGridInstall)
}

// postgresBinDir is the newest /usr/lib/postgresql/N/bin holding postgres and initdb,
// or "".
func postgresBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		_, errP := os.Stat(filepath.Join(d, "postgres"))
		_, errI := os.Stat(filepath.Join(d, "initdb"))
		if errP == nil && errI == nil {
			return d
		}
	}
	return ""
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// freeLocalPort is a TCP port of 127.0.0.1 free a moment ago.
func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for BuildGrid: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

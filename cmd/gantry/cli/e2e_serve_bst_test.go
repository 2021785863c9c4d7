package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testpki"
)

// BuildStream 1.x (Debian's bst 1.6.8) as a client of `gantry cache serve`:
// its artifacts are references (buildstream.v2.ReferenceStorage) to
// Directories in the CAS.

// bstTimeout bounds one bst command.
const bstTimeout = 2 * time.Minute

// bstClient is one bst user: its own caches and configuration (XDG
// directories under home), sharing the project.
type bstClient struct {
	t       *testing.T
	bst     string
	project string
	home    string
	config  string // bst's -c file
}

// writeBstProject writes a BuildStream 1.x project: hello.bst imports files
// (a subdirectory, an executable, two files with the same content, and one of
// 1.5 MiB, which bst sends and fetches over ByteStream rather than in a batch),
// stack.bst depends on it.
func writeBstProject(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "project")
	for name, content := range map[string]string{
		"project.conf":            "name: bsttest\nelement-path: elements\n",
		"elements/hello.bst":      "kind: import\nsources:\n- kind: local\n  path: files\n",
		"elements/stack.bst":      "kind: stack\ndepends:\n- hello.bst\n",
		"files/hello.txt":         "hello from bst\n",
		"files/sub/deeper/x.txt":  "deep\n",
		"files/bin/run":           "#!/bin/sh\necho run\n",
		"files/bin/same-as-hello": "hello from bst\n",
		"files/big.bin":           strings.Repeat("0123456789abcdef", 3<<15),
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "files/bin/run"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newBstClient makes a bst user whose artifact cache is url (with TLS: the
// server's CA, and a client certificate when cert is not ""), pushing when push.
func newBstClient(t *testing.T, bst, project, url string, pki *testpki.PKI, withCert, push bool) *bstClient {
	t.Helper()
	home := t.TempDir()
	conf := "artifacts:\n  url: " + url + "\n"
	if pki != nil {
		conf += "  server-cert: " + pki.CA + "\n"
		if withCert {
			conf += "  client-cert: " + pki.ClientCert + "\n  client-key: " + pki.ClientKey + "\n"
		}
	}
	conf += fmt.Sprintf("  push: %v\n", push)
	config := filepath.Join(home, "bst.conf")
	if err := os.WriteFile(config, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return &bstClient{t: t, bst: bst, project: project, home: home, config: config}
}

// run runs bst with args and returns its output and exit code.
func (b *bstClient) run(args ...string) (string, int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bstTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bst, append([]string{"--no-interactive", "--no-colors", "-c", b.config}, args...)...)
	cmd.Dir = b.project
	cmd.Env = append(os.Environ(), "HOME="+b.home, "XDG_CACHE_HOME="+filepath.Join(b.home, "cache"),
		"XDG_CONFIG_HOME="+filepath.Join(b.home, "config"), "XDG_DATA_HOME="+filepath.Join(b.home, "data"))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		b.t.Fatalf("bst %s did not finish within %v:\n%s", strings.Join(args, " "), bstTimeout, out)
	}
	if err != nil && cmd.ProcessState == nil {
		b.t.Fatalf("bst %s: %v", strings.Join(args, " "), err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// squeezed is text with every run of spaces made one: bst aligns its summary.
func squeezed(text string) string { return regexp.MustCompile(` +`).ReplaceAllString(text, " ") }

// mustRun runs bst and fails the test unless it succeeds and its output holds
// every one of want (spaces squeezed).
func (b *bstClient) mustRun(s *serveProc, args []string, want ...string) string {
	b.t.Helper()
	out, code := b.run(args...)
	if code != 0 {
		b.t.Fatalf("bst %s exited %d:\n%s\nserver log:\n%s", strings.Join(args, " "), code, out, s.log())
	}
	for _, w := range want {
		if !strings.Contains(squeezed(out), w) {
			b.t.Errorf("bst %s: no %q in its output:\n%s", strings.Join(args, " "), w, out)
		}
	}
	return out
}

// checkCheckout checks out stack.bst and compares it with the project's files.
func (b *bstClient) checkCheckout(s *serveProc) {
	b.t.Helper()
	dest := filepath.Join(b.home, "checkout")
	b.mustRun(s, []string{"checkout", "stack.bst", dest})
	for _, name := range []string{"hello.txt", "sub/deeper/x.txt", "bin/run", "bin/same-as-hello", "big.bin"} {
		want, _ := os.ReadFile(filepath.Join(b.project, "files", name))
		got, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(got) != string(want) {
			b.t.Errorf("checkout of the pulled stack.bst: %s is %q (%v), want %q", name, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "bin/run")); err != nil || fi.Mode()&0o100 == 0 {
		b.t.Errorf("checkout of the pulled stack.bst: bin/run is not executable (%v)", err)
	}
}

// TestServeBst: bst 1.6.8 pushes a project's artifacts to `gantry cache serve`
// over mutual TLS with its client certificate; a second bst with an empty
// cache and no certificate pulls them (anonymous read), checks them out, and
// its build builds nothing; without a certificate it cannot push. The server
// then serves the same store over plain gRPC, where a third bst pulls
// anonymously and cannot push either. `cache verify` finds the store clean.
func TestServeBst(t *testing.T) {
	requireTools(t, "the Debian package buildstream (bst 1.6.8)", "bst")
	bst, _ := exec.LookPath("bst")
	pki := testpki.New(t)
	project := writeBstProject(t)
	s := startServe(t, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--client-ca", pki.CA, "--allow-anonymous-read")
	url := "https://" + s.grpc

	pusher := newBstClient(t, bst, project, url, pki, true, true)
	// A build with a push remote pushes what it built.
	pusher.mustRun(s, []string{"build", "stack.bst"}, "Build Queue: processed 2, skipped 0, failed 0",
		"Pushed artifact", "Push Queue: processed 2, skipped 0, failed 0")
	// The server has them: nothing to send again.
	pusher.mustRun(s, []string{"push", "--deps", "all", "stack.bst"}, "already has", "Push Queue: processed 0, skipped 2, failed 0")

	checkBstAnonymous(t, s, bst, project, url, pki)
	s.stop()
	s.verifyStore()

	plain := restartServe(t, s, "--allow-anonymous-read")
	checkBstAnonymous(t, plain, bst, project, "http://"+plain.grpc, nil)
	plain.stop()
	plain.verifyStore()
}

// checkBstAnonymous: a bst without a certificate and with an empty cache pulls
// stack.bst and its dependency from url, its build builds nothing and its
// checkout is the project's files; a bst without a certificate cannot push.
func checkBstAnonymous(t *testing.T, s *serveProc, bst, project, url string, pki *testpki.PKI) {
	t.Helper()
	puller := newBstClient(t, bst, project, url, pki, false, false)
	puller.mustRun(s, []string{"pull", "--deps", "all", "stack.bst"}, "Pull Queue: processed 2, skipped 0, failed 0")
	puller.mustRun(s, []string{"build", "stack.bst"}, "Build Queue: processed 0, skipped 0, failed 0")
	puller.checkCheckout(s)
	checkBstPushRefused(t, newBstClient(t, bst, project, url, pki, false, true), url)
}

// checkBstPushRefused: b (configured to push to url, without credentials,
// its stack.bst built or pulled) cannot push: the server refuses it as a
// writer, and bst says so.
func checkBstPushRefused(t *testing.T, b *bstClient, url string) {
	t.Helper()
	if _, code := b.run("build", "stack.bst"); code != 0 {
		t.Fatalf("bst build stack.bst exited %d", code)
	}
	out, code := b.run("push", "stack.bst")
	if code == 0 {
		t.Fatalf("bst push without credentials succeeded:\n%s", out)
	}
	for _, want := range []string{
		"WARNING Failed to initialize remote " + url + ": credentials required",
		"No artifact caches available for pushing artifacts",
	} {
		if !strings.Contains(squeezed(out), want) {
			t.Errorf("bst push without credentials: no %q in its output:\n%s", want, out)
		}
	}
}

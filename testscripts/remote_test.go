package testscripts

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/testhttp"
	"github.com/rogpeppe/go-internal/testscript"
)

// Remote artifact caches for the scripts: a real nginx with WebDAV PUT, and a small
// misbehaving HTTP cache server (bazel-remote's protocol) in the test process.

// nginxPath finds nginx ("" when it is not installed).
func nginxPath() string {
	if path, err := exec.LookPath("nginx"); err == nil {
		return path
	}
	for _, p := range []string{"/usr/sbin/nginx", "/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// bstPython is the python of Debian's buildstream package (bst-artifact-server).
const bstPython = "/usr/bin/python3"

func haveBST() bool {
	return exec.Command(bstPython, "-c", "import buildstream._artifactcache.casserver").Run() == nil
}

// haveTools reports whether every one of tools is on PATH.
func haveTools(tools ...string) bool {
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return false
		}
	}
	return true
}

// scriptCondition adds [nginx], [bst] (bst-artifact-server), [sandbox] (bwrap and a
// static busybox: sandboxMissing), [git], [patch], [tar] and [autotools] (autoconf,
// automake, make and a C compiler): true when the tool is
// installed, and always with CI=true, so that a CI machine without it fails the script
// (`[!nginx] skip 'install nginx'`) instead of skipping it.
func scriptCondition(cond string) (bool, error) {
	ci := os.Getenv("CI") == "true"
	switch cond {
	case "nginx":
		return nginxPath() != "" || ci, nil
	case "bst":
		return haveBST() || ci, nil
	case "sandbox":
		return sandboxMissing() == "" || ci, nil
	case "git", "patch", "tar":
		_, err := exec.LookPath(cond)
		return err == nil || ci, nil
	case "autotools": // autoreconf generates the test's project; make and cc build it
		return haveTools("autoreconf", "automake", "make", "cc") || ci, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}

// bstServer runs bst-artifact-server (BuildStream 1.x) with push enabled on 127.0.0.1,
// on a port the kernel picks, printed for the script; it stops when stdin closes.
const bstServer = `
import sys
from buildstream._artifactcache.casserver import create_server
server = create_server(sys.argv[1], enable_push=True)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
`

// cmdBSTServer starts bst-artifact-server with its repository in DIR and sets $BST to
// its grpc:// URL: `bstserver DIR`.
func cmdBSTServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: bstserver DIR")
	}
	if !haveBST() {
		ts.Fatalf("bst-artifact-server is not available (apt-get install buildstream): CI must run the remote cache tests")
	}
	cmd := exec.Command(bstPython, "-c", bstServer, ts.MkAbs(args[0]))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	ts.Check(err)
	stdout, err := cmd.StdoutPipe()
	ts.Check(err)
	ts.Check(cmd.Start())
	ts.Defer(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		ts.Fatalf("bst-artifact-server did not start: %v", err)
	}
	ts.Setenv("BST", "grpc://127.0.0.1:"+strings.TrimSpace(line))
}

// freePort finds a free TCP port on 127.0.0.1.
func freePort(ts *testscript.TestScript) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// cmdNginx starts nginx serving DIR/root with WebDAV PUT on a free port of 127.0.0.1,
// its config, pid, logs and temp files under DIR, and sets $NGINX to its URL
// (http://127.0.0.1:PORT, no trailing slash) and $NGINX_HOST to 127.0.0.1:PORT: `nginx DIR`.
func cmdNginx(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: nginx DIR")
	}
	bin := nginxPath()
	if bin == "" {
		ts.Fatalf("nginx is not installed (apt-get install nginx): CI must run the remote cache tests")
	}
	dir := ts.MkAbs(args[0])
	for _, d := range []string{"root", "logs", "tmp"} {
		ts.Check(os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	port := freePort(ts)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`daemon off;
%s
pid %[2]s/nginx.pid;
error_log %[2]s/logs/error.log;
events { worker_connections 256; }
http {
  access_log %[2]s/logs/access.log;
  client_body_temp_path %[2]s/tmp/body;
  proxy_temp_path %[2]s/tmp/proxy;
  fastcgi_temp_path %[2]s/tmp/fastcgi;
  uwsgi_temp_path %[2]s/tmp/uwsgi;
  scgi_temp_path %[2]s/tmp/scgi;
  server {
    listen 127.0.0.1:%[3]d;
    client_max_body_size 0;
    location / {
      root %[2]s/root;
      dav_methods PUT DELETE;
      create_full_put_path on;
    }
  }
}
`, user, dir, port)
	confPath := filepath.Join(dir, "nginx.conf")
	ts.Check(os.WriteFile(confPath, []byte(conf), 0o644))
	cmd := exec.Command(bin, "-c", confPath, "-p", dir, "-e", filepath.Join(dir, "logs", "error.log"))
	// Its own process group, so that the workers die with the master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ts.Check(cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ts.Defer(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "logs", "error.log"))
			ts.Fatalf("nginx exited: %v\n%s", err, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			ts.Fatalf("nginx did not listen on %s within 10s", addr)
		}
	}
	ts.Setenv("NGINX", "http://"+addr)
	ts.Setenv("NGINX_HOST", addr)
}

// cacheSrvKey holds a script's *cacheSrv in its testscript Values.
type cacheSrvKey struct{}

// cacheSrv is an HTTP cache server (GET/PUT/HEAD /cas/<sha256>, /ac/<sha256>) that
// misbehaves on demand (cachefault):
//
//	ok          behaves
//	wrong       GET /cas/ answers bytes of the right length but the wrong content
//	503 N       the next N requests get 503
//	stall       GET requests send headers, then nothing
//	stallcas    GET /cas/ requests send half the blob, then nothing until the client
//	            gives up (counted as stalled-get)
//	stallput    PUT requests read the body, then answer nothing until the client
//	            gives up (or the script ends: 503)
//	401         every request gets 401
//	resetcas    GET /cas/ requests get their connection closed (entries still answer)
//	holdhead    HEAD requests wait (counted as held-head) until the next cachefault,
//	            then are answered
//	gone        the server closes its listener and every connection
type cacheSrv struct {
	srv   *httptest.Server
	stop  chan struct{}
	store *testhttp.Store

	mu      sync.Mutex
	mode    string
	n       int
	counts  map[string]int // requests by method
	change  chan struct{}  // closed and replaced when counts change
	release chan struct{}  // closed and replaced by cachefault: held requests go on
}

// count books one request of kind k. Called with mu held.
func (c *cacheSrv) count(k string) {
	c.counts[k]++
	close(c.change)
	c.change = make(chan struct{})
}

// cmdCacheSrv starts the server and sets $CACHESRV to its URL: `cachesrv`.
func cmdCacheSrv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: cachesrv")
	}
	c := ts.Value(cacheSrvKey{}).(*cacheSrv)
	if c.srv != nil {
		ts.Fatalf("cachesrv: already running")
	}
	c.store, c.mode, c.counts, c.stop, c.change = &testhttp.Store{Prefix: "/"}, "ok", map[string]int{}, make(chan struct{}), make(chan struct{})
	c.release = make(chan struct{})
	c.srv = httptest.NewServer(c)
	ts.Defer(func() {
		close(c.stop)
		c.srv.Close()
	})
	ts.Setenv("CACHESRV", c.srv.URL)
}

func cacheSrvOf(ts *testscript.TestScript) *cacheSrv {
	c := ts.Value(cacheSrvKey{}).(*cacheSrv)
	if c.srv == nil {
		ts.Fatalf("no cachesrv running")
	}
	return c
}

// cmdCacheFault sets the server's misbehaviour: `cachefault 503 2`.
func cmdCacheFault(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: cachefault ok|wrong|503 N|stall|401|gone")
	}
	c := cacheSrvOf(ts)
	if args[0] == "gone" {
		c.srv.CloseClientConnections()
		c.srv.Listener.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.release)
	c.release = make(chan struct{})
	c.mode, c.n = args[0], 0
	if len(args) > 1 {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		c.n = n
	}
}

// cmdCacheCount prints the requests the server received with METHOD, or the entries
// (ac/) it holds: `cachecount PUT`, `cachecount entries`.
func cmdCacheCount(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: cachecount METHOD|entries")
	}
	c := cacheSrvOf(ts)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counts[args[0]]
	if args[0] == "entries" {
		n += c.store.Count(func(k string) bool { return strings.HasPrefix(k, "ac/") || strings.Contains(k, "/ac/") })
	}
	fmt.Fprintf(ts.Stdout(), "%d\n", n)
}

// cmdCacheWait waits (10s at most) until the server has received N requests of kind
// K (a method, or stalled-put): `cachewait stalled-put 1`.
func cmdCacheWait(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: cachewait KIND N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	c := cacheSrvOf(ts)
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		n, change := c.counts[args[0]], c.change
		c.mu.Unlock()
		if n >= want {
			return
		}
		select {
		case <-change:
		case <-timeout:
			ts.Fatalf("cachewait: %d %s requests after 10s, want %d", n, args[0], want)
		}
	}
}

func (c *cacheSrv) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.count(r.Method)
	mode := c.mode
	if mode == "503" {
		if c.n > 0 {
			c.n--
		} else {
			mode = "ok"
		}
	}
	release := c.release
	if mode == "holdhead" && r.Method == http.MethodHead {
		c.count("held-head")
	}
	c.mu.Unlock()
	if mode == "holdhead" && r.Method == http.MethodHead {
		select {
		case <-release:
		case <-c.stop:
		case <-r.Context().Done():
		}
	}
	switch {
	case mode == "503":
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	case mode == "401":
		http.Error(w, "who are you", http.StatusUnauthorized)
		return
	case mode == "stallput" && r.Method == http.MethodPut:
		io.Copy(io.Discard, r.Body)
		c.mu.Lock()
		c.count("stalled-put")
		c.mu.Unlock()
		testhttp.Hang(r, c.stop)
		http.Error(w, "gave up", http.StatusServiceUnavailable)
		return
	case mode == "stallcas" && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/cas/"):
		data, ok := c.store.Get(c.store.Key(r))
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		c.mu.Lock()
		c.count("stalled-get")
		c.mu.Unlock()
		testhttp.Hang(r, c.stop)
		return
	case mode == "resetcas" && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/cas/"):
		panic(http.ErrAbortHandler) // closes the connection
	case mode == "stall" && r.Method == http.MethodGet:
		testhttp.Stall(w, r, c.stop)
		return
	}
	var alter func(key string, data []byte) []byte
	if mode == "wrong" {
		alter = func(key string, data []byte) []byte {
			if strings.Contains("/"+key, "/cas/") {
				return []byte(strings.Repeat("!", len(data)))
			}
			return data
		}
	}
	c.store.Serve(w, r, alter)
}

// cmdCorrupt damages, keeping its size, every regular file below DIR whose
// content holds TEXT: the first byte of each TEXT found gets its case (bit 5)
// flipped. The file is replaced (a hard link elsewhere keeps the old content)
// with its mode kept. It fails when no file holds TEXT: `corrupt DIR TEXT`.
func cmdCorrupt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: corrupt DIR TEXT")
	}
	text := []byte(args[1])
	n := 0
	ts.Check(filepath.WalkDir(ts.MkAbs(args[0]), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(data, text) {
			return err
		}
		for i := bytes.Index(data, text); i >= 0; {
			data[i] ^= 0x20
			j := bytes.Index(data[i+1:], text)
			if j < 0 {
				break
			}
			i += 1 + j
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		tmp := path + ".corrupt"
		if err := os.WriteFile(tmp, data, fi.Mode().Perm()|0o200); err != nil {
			return err
		}
		if err := os.Chmod(tmp, fi.Mode().Perm()); err != nil {
			return err
		}
		n++
		return os.Rename(tmp, path)
	}))
	if n == 0 {
		ts.Fatalf("corrupt: no file below %s holds %q", args[0], args[1])
	}
	fmt.Fprintf(ts.Stdout(), "corrupted %d files\n", n)
}

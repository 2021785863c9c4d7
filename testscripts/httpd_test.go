package testscripts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/gantry-build/gantry/internal/testhttp"
	"github.com/rogpeppe/go-internal/testscript"
)

// httpdKey holds a script's *httpd in its testscript Values.
type httpdKey struct{}

// httpd is a misbehaving file server for one script, run in the test process. The first
// element of a request's path chooses the misbehaviour; the rest names a file under dir:
//
//	/<file>                  the file
//	/flaky/N/<file>          503 for the first N requests of this path, then the file
//	/truncate/<file>         Content-Length of the whole file, half the bytes, then the
//	                         connection closes
//	/wrong/<file>            other bytes than the file's: wrongBody
//	/status/CODE/<file>      that HTTP status, always
//	/stall/<file>            the headers, then nothing until the client gives up
//
// It counts requests by path for httpcount.
type httpd struct {
	dir  string
	stop chan struct{} // closed when the script ends: stalled requests return

	mu     sync.Mutex
	counts map[string]int // requests by URL path
	total  int
}

// wrongBody is what /wrong/ serves; httpd sets $WRONG_SHA256 to its sha256.
const wrongBody = "these are not the bytes you are looking for\n"

// cmdHTTPD starts the server: `httpd DIR` serves DIR and sets $HTTP to its base URL
// (no trailing slash) and $WRONG_SHA256 to the sha256 of what /wrong/ serves.
func cmdHTTPD(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpd DIR")
	}
	h := ts.Value(httpdKey{}).(*httpd)
	if h.counts != nil {
		ts.Fatalf("httpd: already running")
	}
	h.dir = ts.MkAbs(args[0])
	h.stop = make(chan struct{})
	h.counts = map[string]int{}
	srv := httptest.NewServer(h)
	ts.Defer(func() {
		close(h.stop)
		srv.Close()
	})
	ts.Setenv("HTTP", srv.URL)
	sum := sha256.Sum256([]byte(wrongBody))
	ts.Setenv("WRONG_SHA256", hex.EncodeToString(sum[:]))
}

// cmdHTTPCount prints how many requests httpd received for PATH, or in all without PATH:
// `httpcount /flaky/2/app.tar.gz` then `stdout '^3$'`.
func cmdHTTPCount(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 {
		ts.Fatalf("usage: httpcount [PATH]")
	}
	h := ts.Value(httpdKey{}).(*httpd)
	if h.counts == nil {
		ts.Fatalf("httpcount: no httpd running")
	}
	h.mu.Lock()
	n := h.total
	if len(args) == 1 {
		n = h.counts[args[0]]
	}
	h.mu.Unlock()
	fmt.Fprintf(ts.Stdout(), "%d\n", n)
}

func (h *httpd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.counts[r.URL.Path]++
	h.total++
	n := h.counts[r.URL.Path]
	h.mu.Unlock()

	mode, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch mode {
	case "flaky":
		arg, file, _ := strings.Cut(rest, "/")
		failures, err := strconv.Atoi(arg)
		if err != nil {
			http.Error(w, "flaky: bad count", http.StatusBadRequest)
			return
		}
		if n <= failures {
			http.Error(w, "try again later", http.StatusServiceUnavailable)
			return
		}
		h.serveFile(w, file, 1)
	case "truncate":
		h.serveFile(w, rest, 2)
	case "wrong":
		w.Header().Set("Content-Length", strconv.Itoa(len(wrongBody)))
		w.Write([]byte(wrongBody))
	case "status":
		arg, _, _ := strings.Cut(rest, "/")
		code, err := strconv.Atoi(arg)
		if err != nil || code < 100 || code > 999 {
			http.Error(w, "status: bad code", http.StatusBadRequest)
			return
		}
		http.Error(w, http.StatusText(code), code)
	case "stall":
		testhttp.Stall(w, r, h.stop)
	default:
		h.serveFile(w, strings.TrimPrefix(r.URL.Path, "/"), 1)
	}
}

// serveFile sends 1/fraction of the file named by rel under h.dir, announcing its whole
// length; a short body ends with the connection closed.
func (h *httpd) serveFile(w http.ResponseWriter, rel string, fraction int) {
	if rel == "" || path.Clean("/"+rel) != "/"+rel {
		http.Error(w, "bad file name", http.StatusBadRequest)
		return
	}
	data, err := os.ReadFile(h.dir + "/" + rel)
	if err != nil {
		http.NotFound(w, nil)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data[:len(data)/fraction])
	if fraction > 1 {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // closes the connection without logging
	}
}

// cmdSHA256 sets an environment variable to a file's sha256, for refs:
// `sha256 app.tar.gz APP_SHA256`.
func cmdSHA256(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: sha256 FILE VAR")
	}
	sum := sha256.Sum256([]byte(ts.ReadFile(args[0])))
	ts.Setenv(args[1], hex.EncodeToString(sum[:]))
}

// cmdExpand replaces $VAR and ${VAR} in files, in place, with the script's environment;
// a variable that is not set is an error: `expand elements/app.toml`.
func cmdExpand(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: expand FILE...")
	}
	for _, name := range args {
		text := os.Expand(ts.ReadFile(name), func(v string) string {
			val := ts.Getenv(v)
			if val == "" {
				ts.Fatalf("expand %s: $%s is not set", name, v)
			}
			return val
		})
		ts.Check(os.WriteFile(ts.MkAbs(name), []byte(text), 0o666))
	}
}

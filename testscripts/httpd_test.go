package testscripts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/gantry-build/gantry/internal/testhttp"
	"github.com/rogpeppe/go-internal/testscript"
)

// httpdKey holds a script's *httpd in its testscript Values.
type httpdKey struct{}

// httpd is the script's misbehaving file server (testhttp.FileServer, which says how
// the first element of a request's path chooses the misbehaviour), run in the test
// process over a directory of the script's.
type httpd struct{ srv *testhttp.FileServer }

// cmdHTTPD starts the server: `httpd DIR` serves DIR and sets $HTTP to its base URL
// (no trailing slash) and $WRONG_SHA256 to the sha256 of what /wrong/ serves.
func cmdHTTPD(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpd DIR")
	}
	h := ts.Value(httpdKey{}).(*httpd)
	if h.srv != nil {
		ts.Fatalf("httpd: already running")
	}
	h.srv = testhttp.NewFileServer(os.DirFS(ts.MkAbs(args[0])))
	ts.Defer(h.srv.Close)
	ts.Setenv("HTTP", h.srv.URL)
	sum := sha256.Sum256([]byte(testhttp.WrongBody))
	ts.Setenv("WRONG_SHA256", hex.EncodeToString(sum[:]))
}

// cmdHTTPCount prints how many requests httpd received for PATH, or in all without PATH:
// `httpcount /flaky/2/app.tar.gz` then `stdout '^3$'`.
func cmdHTTPCount(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 {
		ts.Fatalf("usage: httpcount [PATH]")
	}
	h := ts.Value(httpdKey{}).(*httpd)
	if h.srv == nil {
		ts.Fatalf("httpcount: no httpd running")
	}
	n := h.srv.Total()
	if len(args) == 1 {
		n = h.srv.Count(args[0])
	}
	fmt.Fprintf(ts.Stdout(), "%d\n", n)
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

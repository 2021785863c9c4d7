package testhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

// The store answers what was put under the key its prefix leaves, refuses a short
// upload and other methods, and misbehaves only as told.
func TestStore(t *testing.T) {
	s := &Store{Prefix: "/p/"}
	var wrong atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var alter func(string, []byte) []byte
		if wrong.Load() {
			alter = func(key string, data []byte) []byte { return []byte(strings.ToUpper(string(data))) }
		}
		s.Serve(w, r, alter)
	}))
	defer srv.Close()
	do := func(method, path, body string, length int64) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("PUT", "/p/cas/a", "blob", 4); code != http.StatusCreated {
		t.Errorf("PUT: %d, want 201", code)
	}
	if code, _ := do("PUT", "/p/cas/b", "blob", -1); code != http.StatusBadRequest {
		t.Errorf("PUT of unannounced length: %d, want 400", code)
	}
	if data, ok := s.Get("cas/a"); !ok || string(data) != "blob" || s.Count(func(string) bool { return true }) != 1 {
		t.Errorf("stored %q, %v (%d keys), want blob under cas/a alone", data, ok, s.Count(func(string) bool { return true }))
	}
	if code, body := do("GET", "/p/cas/a", "", 0); code != http.StatusOK || body != "blob" {
		t.Errorf("GET: %d %q", code, body)
	}
	if code, _ := do("GET", "/p/cas/b", "", 0); code != http.StatusNotFound {
		t.Errorf("GET of a missing key: %d, want 404", code)
	}
	if code, _ := do("POST", "/p/cas/a", "", 0); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
	wrong.Store(true)
	if code, body := do("GET", "/p/cas/a", "", 0); code != http.StatusOK || body != "BLOB" {
		t.Errorf("GET with alter: %d %q, want BLOB", code, body)
	}
}

// The file server serves its files, misbehaves as the path says, and counts requests
// by path.
func TestFileServer(t *testing.T) {
	s := NewFileServer(fstest.MapFS{"d/f.txt": {Data: []byte("0123456789")}})
	defer s.Close()
	get := func(path string) (int, string, error) {
		t.Helper()
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	for _, tt := range []struct {
		path string
		code int
		body string
		err  bool
	}{
		{path: "/d/f.txt", code: 200, body: "0123456789"},
		{path: "/flaky/2/d/f.txt", code: 503},
		{path: "/flaky/2/d/f.txt", code: 503},
		{path: "/flaky/2/d/f.txt", code: 200, body: "0123456789"},
		{path: "/truncate/d/f.txt", code: 200, body: "01234", err: true},
		{path: "/cut/d/f.txt", code: 200, body: "01234", err: true},
		{path: "/wrong/d/f.txt", code: 200, body: WrongBody},
		{path: "/status/418/d/f.txt", code: 418},
		{path: "/nosuch.txt", code: 404},
		{path: "/d/../d/f.txt", code: 400},
	} {
		code, body, err := get(tt.path)
		if code != tt.code || (tt.body != "" && body != tt.body) || (err != nil) != tt.err {
			t.Errorf("GET %s: %d %q (read error %v), want %d %q (read error %v)", tt.path, code, body, err, tt.code, tt.body, tt.err)
		}
	}
	if n, total := s.Count("/flaky/2/d/f.txt"), s.Total(); n != 3 || total != 10 {
		t.Errorf("counted %d requests of the flaky path, %d in all; want 3 and 10", n, total)
	}
}

package testhttp

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FileServer serves the files of an fs.FS on 127.0.0.1 and misbehaves on purpose, as
// the first element of a request's path chooses; the rest names a file:
//
//	/<file>                the file
//	/flaky/N/<file>        503 for the first N requests of this path, then the file
//	/truncate/<file>       the whole file's Content-Length, half its bytes, then the
//	                       connection closes
//	/cut/<file>            half the file's bytes of unknown length (chunked), then the
//	                       connection closes
//	/wrong/<file>          WrongBody instead of the file
//	/status/CODE[/<file>]  that HTTP status, always
//	/stall[/<file>]        the headers, then nothing until the client gives up
//	/trickle[/<file>]      a byte every 5 ms of an announced megabyte, until the client
//	                       gives up
//	/endless[/<file>]      zeros of unknown length, until the client gives up
//
// It counts requests by path. Close stops it, first freeing what stalls.
type FileServer struct {
	*httptest.Server
	files fs.FS
	stop  chan struct{} // closed by Close: stalled responses return
	once  sync.Once

	mu     sync.Mutex
	counts map[string]int // requests by URL path
	total  int
}

// WrongBody is what /wrong/ serves.
const WrongBody = "these are not the bytes you are looking for\n"

// NewFileServer starts a server of files (fstest.MapFS for files in memory, os.DirFS
// for a directory a test writes as it goes).
func NewFileServer(files fs.FS) *FileServer {
	s := &FileServer{files: files, stop: make(chan struct{}), counts: map[string]int{}}
	s.Server = httptest.NewServer(s)
	return s
}

// Close frees the stalled responses, then stops the server.
func (s *FileServer) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.Server.Close()
	})
}

// Count is how many requests path had.
func (s *FileServer) Count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[path]
}

// Total is how many requests the server had.
func (s *FileServer) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func (s *FileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts[r.URL.Path]++
	s.total++
	n := s.counts[r.URL.Path]
	s.mu.Unlock()

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
		s.serveFile(w, file, serveWhole)
	case "truncate":
		s.serveFile(w, rest, serveTruncated)
	case "cut":
		s.serveFile(w, rest, serveCut)
	case "wrong":
		w.Header().Set("Content-Length", strconv.Itoa(len(WrongBody)))
		w.Write([]byte(WrongBody))
	case "status":
		arg, _, _ := strings.Cut(rest, "/")
		code, err := strconv.Atoi(arg)
		if err != nil || code < 100 || code > 999 {
			http.Error(w, "status: bad code", http.StatusBadRequest)
			return
		}
		http.Error(w, http.StatusText(code), code)
	case "stall":
		Stall(w, r, s.stop)
	case "trickle":
		w.Header().Set("Content-Length", "1000000")
		s.drip(w, r, 1)
	case "endless":
		s.drip(w, r, 64<<10)
	default:
		s.serveFile(w, strings.TrimPrefix(r.URL.Path, "/"), serveWhole)
	}
}

// How serveFile sends a file.
const (
	serveWhole     = iota
	serveTruncated // its length announced, half of it sent
	serveCut       // half of it sent, no length announced
)

// serveFile sends the file named by name as how says; a short body ends with the
// connection closed.
func (s *FileServer) serveFile(w http.ResponseWriter, name string, how int) {
	if !fs.ValidPath(name) || name == "." {
		http.Error(w, "bad file name", http.StatusBadRequest)
		return
	}
	data, err := fs.ReadFile(s.files, name)
	if err != nil {
		http.NotFound(w, nil)
		return
	}
	if how != serveCut {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	if how == serveWhole {
		w.Write(data)
		return
	}
	w.Write(data[:len(data)/2])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // closes the connection without logging
}

// drip sends chunks of size zeros every 5 ms until the client gives up or the server
// closes.
func (s *FileServer) drip(w http.ResponseWriter, r *http.Request, size int) {
	w.WriteHeader(http.StatusOK)
	chunk := make([]byte, size)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// Package testhttp holds what the HTTP servers that tests of several packages run on
// 127.0.0.1 share: an in-memory remote cache store (bazel-remote's protocol, which
// gantry's HTTP remote speaks), the stalled responses their fault modes send, and a
// file server with every fault mode the source tests and the testscripts use
// (FileServer). It is imported only by tests.
package testhttp

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Store is an in-memory HTTP cache store. A PUT stores its body under the request's
// key, GET and HEAD answer what is stored there (404 when nothing is), any other
// method gets 405. The key is the request's path without Prefix: with Prefix
// "/prefix/", PUT /prefix/cas/<sha256> stores "cas/<sha256>". A PUT whose body is not
// the length it announced is refused (400), so that a client's short upload is
// caught. The zero value serves keys with the path's leading "/" kept; it is safe for
// concurrent use.
type Store struct {
	Prefix string

	mu    sync.Mutex
	blobs map[string][]byte
}

// Key is the key r names.
func (s *Store) Key(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, s.Prefix) }

// ServeHTTP answers r from the store.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.Serve(w, r, nil) }

// Serve answers r as ServeHTTP does, except that a GET sends alter(key, stored bytes)
// when alter is set (a store that misbehaves) — with the length of what alter
// returned.
func (s *Store) Serve(w http.ResponseWriter, r *http.Request, alter func(key string, data []byte) []byte) {
	key := s.Key(r)
	switch r.Method {
	case http.MethodPut:
		data, err := io.ReadAll(r.Body)
		if err != nil || int64(len(data)) != r.ContentLength {
			http.Error(w, "short body", http.StatusBadRequest)
			return
		}
		s.Put(key, data)
		w.WriteHeader(http.StatusCreated)
	case http.MethodGet, http.MethodHead:
		data, ok := s.Get(key)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if alter != nil && r.Method == http.MethodGet {
			data = alter(key, data)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(data)
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// Put stores data under key, as a PUT would.
func (s *Store) Put(key string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blobs == nil {
		s.blobs = map[string][]byte{}
	}
	s.blobs[key] = data
}

// Get returns what is stored under key.
func (s *Store) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.blobs[key]
	return data, ok
}

// Count returns how many keys match.
func (s *Store) Count(match func(key string) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.blobs {
		if match(k) {
			n++
		}
	}
	return n
}

// Stall sends response headers announcing 1000 bytes, then nothing, until the client
// gives up or stop is closed (the test ends): a server that stopped mid-response.
func Stall(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
	w.Header().Set("Content-Length", "1000")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	Hang(r, stop)
}

// Hang waits until the client gives up on r or stop is closed.
func Hang(r *http.Request, stop <-chan struct{}) {
	select {
	case <-r.Context().Done():
	case <-stop:
	}
}

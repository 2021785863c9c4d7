package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// accessLog writes the one line a request gets once it is answered: who
// (the client's name, never a credential), what (protocol, method, path or
// RPC), the answer (status), the bytes each way and how long it took.
func (s *Server) accessLog(ci *callInfo, client, status string, in, out int64, d time.Duration, extra []slog.Attr) {
	attrs := make([]slog.Attr, 0, 8+len(extra))
	attrs = append(attrs, slog.String("protocol", ci.protocol), slog.String("client", client), slog.String("method", ci.method))
	if ci.path != "" {
		attrs = append(attrs, slog.String("path", ci.path))
	}
	attrs = append(attrs, slog.String("status", status), slog.Int64("bytes_in", in), slog.Int64("bytes_out", out), slog.Duration("duration", d))
	attrs = append(attrs, extra...)
	s.log.LogAttrs(context.Background(), slog.LevelInfo, accessMsg, attrs...)
}

// httpMethods are the methods counted by name; any other is counted as
// "other" (a stranger could make up methods without end).
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPut: true, http.MethodPost: true,
	http.MethodDelete: true, http.MethodOptions: true, http.MethodPatch: true,
}

// observeHTTP counts and logs every request that next serves.
func (s *Server) observeHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ci := &callInfo{protocol: "http", method: r.Method, path: r.URL.Path, start: time.Now(), client: "anonymous"}
		ow := &observedWriter{ResponseWriter: w, ci: ci}
		if r.Body != nil {
			r.Body = countedBody{r.Body, ci}
		}
		// The handler finds ci through ow (httpCall), not the request's
		// context: a context and a copy of the request per request cost more
		// than the rest of the middleware.
		completed := false
		defer func() {
			// Also when the handler broke the response off (abortHTTP panics).
			method := r.Method
			if !httpMethods[method] {
				method = "other"
			}
			var extra []slog.Attr
			if !completed {
				extra = append(extra, slog.String("error", "response broken off"))
			}
			s.finish(ci, method, statusText(ow.code()), extra...)
		}()
		next.ServeHTTP(ow, r)
		completed = true
	})
}

// httpCall returns the callInfo of the request w answers, nil outside
// observeHTTP.
func httpCall(w http.ResponseWriter) *callInfo {
	if ow, ok := w.(*observedWriter); ok {
		return ow.ci
	}
	return nil
}

// statusTexts are the statuses' labels, made once.
var statusTexts = func() map[int]string {
	m := map[int]string{}
	for code := 100; code < 600; code++ {
		if http.StatusText(code) != "" {
			m[code] = strconv.Itoa(code)
		}
	}
	return m
}()

// statusText is code as the metrics and the log name it.
func statusText(code int) string {
	if t, ok := statusTexts[code]; ok {
		return t
	}
	return strconv.Itoa(code)
}

// observedWriter keeps the status and counts the body bytes of a response.
type observedWriter struct {
	http.ResponseWriter
	ci     *callInfo
	status int
}

func (w *observedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *observedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.ci.out.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines, Hijack).
func (w *observedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status the response had, or will have: 200 when the handler
// wrote nothing.
func (w *observedWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// countedBody counts the bytes of a request body as the handler reads them.
type countedBody struct {
	io.ReadCloser
	ci *callInfo
}

func (b countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.ci.in.Add(int64(n))
	return n, err
}

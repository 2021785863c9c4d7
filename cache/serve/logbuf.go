package serve

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The access log is written in batches: a line per request written on its own
// cost a write system call per request, a good part of what a small read
// costs. Access lines wait in logWriter's buffer at most logFlushDelay (or
// until logFlushSize bytes are waiting); every other line (events, warnings,
// errors, the server's start and stop) is written at once, with the access
// lines before it, and Serve writes what is left before it returns. A server
// killed with SIGKILL loses at most the last logFlushDelay of access lines.
const (
	logFlushDelay = 100 * time.Millisecond
	logFlushSize  = 64 << 10
)

// logWriter buffers whole lines (log/slog writes each record in one Write)
// for w.
type logWriter struct {
	w     io.Writer
	delay time.Duration // logFlushDelay but in tests
	timer *time.Timer

	mu      sync.Mutex
	buf     []byte
	pending bool // the timer is set
}

func newLogWriter(w io.Writer, delay time.Duration) *logWriter {
	l := &logWriter{w: w, delay: delay}
	l.timer = time.AfterFunc(time.Hour, l.flush)
	l.timer.Stop()
	return l
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	switch {
	case len(l.buf) >= logFlushSize:
		l.flushLocked()
	case !l.pending:
		l.pending = true
		l.timer.Reset(l.delay)
	}
	return len(p), nil
}

// flush writes out the lines waiting.
func (l *logWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *logWriter) flushLocked() {
	if l.pending {
		l.pending = false
		l.timer.Stop()
	}
	if len(l.buf) == 0 {
		return
	}
	_, _ = l.w.Write(l.buf) // as log/slog: a log that cannot be written does not stop the server
	if cap(l.buf) > 4*logFlushSize {
		l.buf = nil // one burst of huge lines does not keep its memory
	} else {
		l.buf = l.buf[:0]
	}
}

// accessMsg is the message of access-log lines, the only ones buffered.
const accessMsg = "request"

// flushHandler writes every record but an access line at once.
type flushHandler struct {
	slog.Handler
	w *logWriter
}

func (h flushHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message != accessMsg {
		h.w.flush()
	}
	return err
}

func (h flushHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushHandler{h.Handler.WithAttrs(attrs), h.w}
}

func (h flushHandler) WithGroup(name string) slog.Handler {
	return flushHandler{h.Handler.WithGroup(name), h.w}
}

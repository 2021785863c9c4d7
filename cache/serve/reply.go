package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/units"
)

// What the server says to its clients: errors of the store name its files, which
// are the server's business; every error message a client gets passes through
// redact, and the full message goes to the log when the fault is the server's.

// redactedStore stands for the store's directory in answers to clients.
const redactedStore = "<store>"

// redact replaces the store's absolute path in msg.
func (s *Server) redact(msg string) string {
	return strings.ReplaceAll(msg, s.c.Root, redactedStore)
}

// grpcReply redacts the status a gRPC handler returned, and the per-blob
// statuses of a batch reply, logging internal errors in full.
func (s *Server) grpcReply(method string, resp any, err error) (any, error) {
	switch r := resp.(type) {
	case *repb.BatchUpdateBlobsResponse: // nil when the whole call failed
		for _, e := range r.GetResponses() {
			if e.Status != nil {
				s.redactStatus(method, codes.Code(e.Status.Code), &e.Status.Message)
			}
		}
	case *repb.BatchReadBlobsResponse:
		for _, e := range r.GetResponses() {
			if e.Status != nil {
				s.redactStatus(method, codes.Code(e.Status.Code), &e.Status.Message)
			}
		}
	}
	return resp, s.grpcRedact(method, err)
}

// grpcRedact is grpcReply for a status error alone (streams).
func (s *Server) grpcRedact(method string, err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return err
	}
	msg := st.Message()
	if !s.redactStatus(method, st.Code(), &msg) {
		return err
	}
	return status.Error(st.Code(), msg)
}

// redactStatus redacts the message of a status of code in place, and reports
// whether it changed it.
func (s *Server) redactStatus(method string, code codes.Code, msg *string) bool {
	if code == codes.OK {
		return false
	}
	if code == codes.Internal {
		s.log.Error("call failed: a fault of the server", "rpc", method, "error", *msg)
	}
	redacted := s.redact(*msg)
	if redacted == *msg {
		return false
	}
	*msg = redacted
	return true
}

// stallReader is an HTTP request body that must keep moving: each read must
// bring bytes within d, or the connection is closed. A large upload may take as
// long as it needs; a client that stops sending does not hold the connection.
type stallReader struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

func (r stallReader) Read(p []byte) (int, error) {
	_ = r.rc.SetReadDeadline(time.Now().Add(r.d)) // best effort: not every connection has deadlines
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		// The body is complete: the handler may take its time to answer (a
		// commit's fsync) without the connection timing out under it.
		_ = r.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// stallWriter sends a response body that must keep moving, as stallReader
// receives one: each write must go out within the idle timeout, or the
// connection is cut (a client that asks for a blob and stops reading would
// otherwise hold its connection, its admission and an open file for ever).
// The deadline is lifted once the body is sent: the connection may serve
// further requests. Without an idle timeout it writes plainly.
func (s *Server) stallWriter(w http.ResponseWriter) func([]byte) error {
	rc := http.NewResponseController(w)
	return func(b []byte) error {
		if s.opts.IdleTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.opts.IdleTimeout)) // best effort, as in stallReader
			defer rc.SetWriteDeadline(time.Time{})
		}
		_, err := w.Write(b)
		return err
	}
}

// stalled reports whether err, from writing a response, says the client stopped
// reading it for the idle timeout.
func stalled(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// limitText is a size in a message of the server's limits: its unit as everywhere
// in gantry (units.Bytes), then the exact count.
func limitText(n int64) string { return fmt.Sprintf("%s (%d bytes)", units.Bytes(n), n) }

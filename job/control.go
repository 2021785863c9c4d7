package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The control pipe goes from the parent to a worker's fd 4 and carries short
// lines, each naming a job the worker was given by its ID:
//
//	terminate <id>   terminated before the worker started it (Job.Terminate)
//	open <id>        its gate is open (Job.Open, Reporter.Gate)
//
// The parent writes a job's lines only while the job is the worker's, at most
// one of each kind, and never waits for room (see worker.control). The worker
// reads the pipe only when it needs to know (as it starts a job, at the gate),
// so lines wait in the pipe meanwhile, and drops those of jobs other than its
// own (see controls).
const (
	controlTerminate = "terminate"
	controlOpen      = "open"
)

// control writes the line "verb id" to the worker's fd 4. The write never
// waits: the pipe holds at most a couple of short lines per job the worker was
// given and has not finished reading, far below its capacity (and a line below
// PIPE_BUF is written whole or not at all), so an error means the worker is
// gone (EPIPE) or the line could not be written.
func (w *worker) control(verb, id string) error {
	line := []byte(verb + " " + id + "\n")
	rc, err := w.controls.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		n, werr = syscall.Write(int(fd), line)
		return true // never wait for room: see above
	}); err != nil {
		return err
	}
	if werr == nil && n != len(line) {
		werr = fmt.Errorf("wrote %d of %d bytes", n, len(line))
	}
	return werr
}

// controlSet says which control lines came for a job.
type controlSet uint8

const (
	terminated controlSet = 1 << iota
	opened
)

// controls is the worker's one reader of fd 4 (see controlTerminate). Its
// methods are safe for concurrent use.
//
// Which lines it keeps follows from when the parent writes them. While a job
// runs (between begin and end) the worker has been given no other job, so a
// line for another ID is an earlier job's, come after that job's start or
// result, and is dropped. Between jobs the next job's lines may come before
// its spec, so every line is kept until the next job begins, which drops
// those that are not its own.
type controls struct {
	mu   sync.Mutex      // one reader at a time; guards the fields below
	f    *os.File        // fd 4, non-blocking, in Go's poller: a blocked read ends at its deadline
	rc   syscall.RawConn // f's, to read without waiting or to wait until readable
	buf  []byte          // a partial line (the parent writes whole lines: none in practice)
	job  string          // the ID of the job running, "" between jobs
	seen map[string]controlSet
	// gone is called when the pipe ends: only gantry's exit closes its other end.
	gone func()
}

// newControls reads the non-blocking descriptor fd; gone is called when the pipe
// ends (gantry exited).
func newControls(fd int, gone func()) (*controls, error) {
	f := os.NewFile(uintptr(fd), "job-control")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("fd %d cannot be waited on: %w", fd, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("fd %d: %w", fd, err)
	}
	return &controls{f: f, rc: rc, seen: map[string]controlSet{}, gone: gone}, nil
}

// begin says that the job id, whose spec was just read, runs from now on, and
// reports whether the parent terminated it before.
func (c *controls) begin(id string) (wasTerminated bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.fill(false) // an error reading: nothing more to learn
	c.job = id
	for k := range c.seen {
		if k != id {
			delete(c.seen, k)
		}
	}
	return c.seen[id]&terminated != 0
}

// end says that no job runs: the next job's lines may come from now on. Called
// before the job's result is sent.
func (c *controls) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.job = ""
	clear(c.seen)
}

// isOpen reports whether the running job's gate is open, without waiting.
func (c *controls) isOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.fill(false)
	return c.seen[c.job]&opened != 0
}

// waitOpen blocks until the running job's gate is open (nil) or ctx is done
// (its cause). It waits on the pipe itself: ctx's end cuts the read short by
// its deadline.
func (c *controls) waitOpen(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.f.SetReadDeadline(time.Unix(1, 0)) // long past: the read returns now
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired // set the deadline already: clear it after, not before
		}
		_ = c.f.SetReadDeadline(time.Time{})
	}()
	for c.seen[c.job]&opened == 0 {
		err := c.fill(true)
		switch {
		case c.seen[c.job]&opened != 0:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			return context.Cause(ctx)
		case errors.Is(err, io.EOF):
			// Only gantry's exit closes the pipe's other end: the job ends as it
			// does when the parent-death signal says so first (its context's cause
			// is ErrParentDied, so nothing of it is cached as the element's failure).
			c.gone()
			return context.Cause(ctx)
		case err != nil:
			return fmt.Errorf("reading the control pipe (fd %d): %w", controlFD, err)
		}
	}
	return nil
}

// fill reads what the pipe holds and records its lines; with wait, it first
// waits until there is something to read. It returns io.EOF at the end of the
// pipe and os.ErrDeadlineExceeded once the read deadline has passed. c.mu must
// be held.
func (c *controls) fill(wait bool) error {
	defer c.parse()
	var b [512]byte
	for {
		var n int
		var rerr error
		if err := c.rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), b[:])
			return !(wait && rerr == syscall.EAGAIN) // false: wait until readable, then call again
		}); err != nil {
			return err
		}
		switch {
		case n > 0:
			c.buf = append(c.buf, b[:n]...)
			wait = false // read on only what is there
		case rerr == syscall.EAGAIN:
			return nil
		case rerr == syscall.EINTR:
		case rerr != nil:
			return rerr
		default:
			return io.EOF
		}
	}
}

// parse records the whole lines read so far, dropping those it must not keep.
func (c *controls) parse() {
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			return
		}
		verb, id, _ := strings.Cut(string(c.buf[:i]), " ")
		c.buf = c.buf[i+1:]
		if c.job != "" && id != c.job {
			continue // an earlier job's
		}
		switch verb {
		case controlTerminate:
			c.seen[id] |= terminated
		case controlOpen:
			c.seen[id] |= opened
		}
	}
}

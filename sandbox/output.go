package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// outputPipe carries the output of a Runner's commands to a writer that is not
// a file, such as a job's log: one pipe for all of them, created by Prepare,
// and one goroutine copying from it. Without it, os/exec makes a pipe and a
// copying goroutine for every command and waits for the copy to see the end of
// the output (up to killGrace while a background process holds the pipe).
//
// A command's output is all in the pipe when its process has exited (writes to
// a pipe are done when write(2) returns), so sync, called then, passes on what
// the pipe holds. What a background process writes later is passed on while
// later commands run, or by close.
type outputPipe struct {
	r, w *os.File
	out  io.Writer
	buf  []byte // the copying goroutine's, and pause's while it is stopped

	paused chan struct{} // the copying goroutine stopped at a read deadline
	resume chan struct{} // it may go on; closed: it returns
	done   chan struct{} // it returned
}

// aLongTimeAgo is a read deadline that has passed: it stops a pending read.
var aLongTimeAgo = time.Unix(1, 0)

func newOutputPipe(out io.Writer) (*outputPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating the output pipe: %w", err)
	}
	o := &outputPipe{r: r, w: w, out: out, buf: make([]byte, 32<<10),
		paused: make(chan struct{}), resume: make(chan struct{}), done: make(chan struct{})}
	go o.copy()
	return o, nil
}

// copy passes on what the pipe delivers until resume is closed at a pause, or
// every write end is closed.
func (o *outputPipe) copy() {
	defer close(o.done)
	for {
		n, err := o.r.Read(o.buf)
		if n > 0 {
			_, _ = o.out.Write(o.buf[:n]) // as os/exec's copy, a failing writer stops nothing
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			o.paused <- struct{}{}
			if _, ok := <-o.resume; !ok {
				return
			}
		case err != nil:
			return
		}
	}
}

// sync returns when everything written to the pipe before it was called has
// been passed on.
func (o *outputPipe) sync() {
	if o.pause() {
		o.resume <- struct{}{}
	}
}

// pause stops the copying goroutine and passes on what the pipe holds. It
// returns false if the goroutine had returned (every write end was closed).
func (o *outputPipe) pause() bool {
	_ = o.r.SetReadDeadline(aLongTimeAgo)
	select {
	case <-o.paused:
	case <-o.done:
		return false
	}
	_ = o.r.SetReadDeadline(time.Time{})
	rc, err := o.r.SyscallConn()
	if err != nil {
		return true
	}
	for {
		n := 0
		// One non-blocking read: an empty pipe gives EAGAIN, and the function
		// returning true does not wait for more.
		_ = rc.Read(func(fd uintptr) bool {
			n, _ = syscall.Read(int(fd), o.buf)
			return true
		})
		if n <= 0 {
			return true
		}
		_, _ = o.out.Write(o.buf[:n])
	}
}

// close passes on what the pipe holds and closes it. A background process
// that still holds the write end gets EPIPE from then on.
func (o *outputPipe) close() error {
	err := o.w.Close()
	if o.pause() {
		close(o.resume)
	}
	<-o.done
	return errors.Join(err, o.r.Close())
}

// sharedWriter returns the writer stdout and stderr share, if they are one
// writer that is not a file (os/exec passes a file to the command as it is),
// or nil.
func sharedWriter(stdout, stderr io.Writer) (w io.Writer) {
	if _, ok := stdout.(*os.File); ok || stdout == nil {
		return nil
	}
	defer func() {
		if recover() != nil { // not comparable
			w = nil
		}
	}()
	if stdout != stderr {
		return nil
	}
	return stdout
}

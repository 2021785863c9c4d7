package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// outputPipe carries the output of a Runner's commands to a writer that is not
// a file, such as a job's log: one pipe for all of them, made by Prepare.
// Without it, os/exec makes a pipe and a goroutine copying from it for every
// command, and waits for that goroutine to see the end of the output (up to
// killGrace while a background process holds the pipe open).
//
// Here the goroutine that runs the command copies while it waits (copyUntil),
// and no other goroutine is involved: the one that sees the command exit wakes
// it. Once the command's process has exited, its output is all in the pipe (a
// write to a pipe is done when write(2) returns), so drain passes on the rest
// without waiting for an end. What a background process writes later is
// passed on with the next command's output, or by close; between commands
// nobody reads, so such a process may block once the pipe is full.
type outputPipe struct {
	r, w *os.File
	out  io.Writer
	buf  []byte
}

// aLongTimeAgo is a read deadline that has passed: it ends a pending read.
var aLongTimeAgo = time.Unix(1, 0)

func newOutputPipe(out io.Writer) (*outputPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating the output pipe: %w", err)
	}
	return &outputPipe{r: r, w: w, out: out, buf: make([]byte, 32<<10)}, nil
}

// wake ends a pending or later read of copyUntil.
func (o *outputPipe) wake() { _ = o.r.SetReadDeadline(aLongTimeAgo) }

// copyUntil passes on what the pipe delivers until exited is closed or ctx is
// done. Whoever closes exited calls wake after closing it; when copyUntil
// returns, no wake of ctx's is pending (drain clears what it left).
func (o *outputPipe) copyUntil(ctx context.Context, exited <-chan struct{}) {
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { o.wake(); close(woken) })
	defer func() {
		if !stop() {
			<-woken
		}
	}()
	over := func() bool {
		select {
		case <-exited:
			return true
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}
	for {
		n, err := o.r.Read(o.buf)
		if n > 0 {
			_, _ = o.out.Write(o.buf[:n]) // as os/exec's copy: a failing writer stops nothing
		}
		switch {
		case err == nil:
		case !errors.Is(err, os.ErrDeadlineExceeded) || over():
			return
		default:
			// Not this command's wake: clear it, then look again, so that a
			// wake between the look and the clearing is not lost.
			_ = o.r.SetReadDeadline(time.Time{})
			if over() {
				return
			}
		}
	}
}

// drain passes on what the pipe holds, without waiting for more.
func (o *outputPipe) drain() {
	_ = o.r.SetReadDeadline(time.Time{})
	rc, err := o.r.SyscallConn()
	if err != nil {
		return
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
			return
		}
		_, _ = o.out.Write(o.buf[:n])
	}
}

// close passes on what the pipe holds and closes it. A background process
// that still holds the write end gets EPIPE from then on.
func (o *outputPipe) close() error {
	err := o.w.Close()
	o.drain()
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

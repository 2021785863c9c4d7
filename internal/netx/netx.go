// Package netx holds what gantry's HTTP clients share: the transport's
// settings and the stall watchdog of a transfer.
package netx

import (
	"context"
	"net"
	"net/http"
	"time"
)

// DialTimeout bounds making a connection, and is the interval of TCP keep-alive probes.
const DialTimeout = 30 * time.Second

// Transport is a new transport with gantry's dial settings (a connection made
// within DialTimeout, TCP keep-alives as often) over Go's defaults; callers add
// their own timeouts and TLS.
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DialTimeout, KeepAlive: DialTimeout}).DialContext
	return t
}

// Watchdog cancels a transfer that makes no progress: its context is
// canceled with its cause once idle passes without a Kick. Every byte or
// message that arrives kicks it.
type Watchdog struct {
	t      *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
}

// WithWatchdog returns a context derived from parent that a new watchdog
// cancels with cause after idle without a Kick. Stop releases both.
func WithWatchdog(parent context.Context, idle time.Duration, cause error) (context.Context, *Watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, &Watchdog{t: time.AfterFunc(idle, func() { cancel(cause) }), idle: idle, cancel: cancel}
}

// Kick records progress: the transfer has idle again from now.
func (w *Watchdog) Kick() { w.t.Reset(w.idle) }

// Stop ends the watch and cancels the context (with no cause: the transfer is over).
func (w *Watchdog) Stop() {
	w.t.Stop()
	w.cancel(nil)
}

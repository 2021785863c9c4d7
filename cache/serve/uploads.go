package serve

import (
	"sync"
	"time"

	"github.com/gantry-build/gantry/cache"
)

// uploadTable keeps ByteStream writes that broke off, so that a client can
// ask QueryWriteStatus how much was committed and resume at that offset. An
// abandoned upload is dropped after uploadIdle.
type uploadTable struct {
	mu sync.Mutex
	m  map[string]*pendingUpload // by resource name
}

type pendingUpload struct {
	u    *cache.BlobImport
	busy bool // a Write stream is appending to it
	last time.Time
}

const uploadIdle = 10 * time.Minute

func newUploadTable() *uploadTable { return &uploadTable{m: map[string]*pendingUpload{}} }

// take claims the upload of name for a Write stream: the one kept from an
// earlier stream, or a new one from start. ok is false if another stream is
// writing it.
func (t *uploadTable) take(name string, start func() (*cache.BlobImport, error)) (p *pendingUpload, ok bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire()
	if p := t.m[name]; p != nil {
		if p.busy {
			return nil, false, nil
		}
		p.busy = true
		return p, true, nil
	}
	u, err := start()
	if err != nil {
		return nil, false, err
	}
	p = &pendingUpload{u: u, busy: true, last: time.Now()}
	t.m[name] = p
	return p, true, nil
}

// park keeps an interrupted upload for a later stream.
func (t *uploadTable) park(p *pendingUpload) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.busy = false
	p.last = time.Now()
}

// done forgets the upload of name (committed or aborted by the caller).
func (t *uploadTable) done(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, name)
}

// committed returns how many bytes of name were received, or -1 if none is kept.
func (t *uploadTable) committed(name string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.m[name]; p != nil {
		return p.u.Received()
	}
	return -1
}

// expire drops idle uploads. Called with t.mu held.
func (t *uploadTable) expire() {
	for name, p := range t.m {
		if !p.busy && time.Since(p.last) > uploadIdle {
			p.u.Abort()
			delete(t.m, name)
		}
	}
}

// dropAll removes every kept upload's temporary file (at shutdown).
func (t *uploadTable) dropAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, p := range t.m {
		if !p.busy {
			p.u.Abort()
			delete(t.m, name)
		}
	}
}

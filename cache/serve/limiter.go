package serve

import (
	"net"
	"sync"
	"time"
)

// keyedLimiter is a token bucket per key (a client address, a user name): each
// key may spend burst tokens at once, and gets one back per interval. Its memory
// is bounded: a key whose bucket is full again is the same as an absent one and
// is dropped when room is needed; when maxKeys buckets are all in use, new keys
// share one overflow bucket, so that a stranger who varies its keys still gets
// one bucket's worth, not one per key.
type keyedLimiter struct {
	interval time.Duration
	burst    float64
	maxKeys  int
	now      func() time.Time

	mu        sync.Mutex
	buckets   map[string]*tokenBucket
	lastSweep time.Time
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// overflowKey is the bucket shared by keys that found the limiter full.
const overflowKey = "\x00overflow"

func newKeyedLimiter(interval time.Duration, burst, maxKeys int) *keyedLimiter {
	return &keyedLimiter{interval: interval, burst: float64(burst), maxKeys: maxKeys, now: time.Now, buckets: map[string]*tokenBucket{}}
}

// take spends one token of every key's bucket, or of none: it reports false,
// spending nothing, if one of them is empty.
func (l *keyedLimiter) take(keys ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	bs := make([]*tokenBucket, len(keys))
	for i, k := range keys {
		bs[i] = l.bucket(k, now)
		if bs[i].tokens < 1 {
			return false
		}
	}
	for _, b := range bs {
		b.tokens--
	}
	return true
}

// refund gives back the tokens take spent (a check that passed costs nothing).
func (l *keyedLimiter) refund(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, k := range keys {
		if b := l.buckets[k]; b != nil {
			l.fill(b, now)
			b.tokens = min(b.tokens+1, l.burst)
		}
	}
}

// bucket returns k's bucket brought up to now, making one if room allows (else the
// overflow bucket). Called with l.mu held.
func (l *keyedLimiter) bucket(k string, now time.Time) *tokenBucket {
	if b := l.buckets[k]; b != nil {
		l.fill(b, now)
		return b
	}
	if len(l.buckets) >= l.maxKeys && now.Sub(l.lastSweep) >= l.interval {
		l.lastSweep = now
		for key, b := range l.buckets {
			if l.fill(b, now); b.tokens >= l.burst {
				delete(l.buckets, key)
			}
		}
	}
	if len(l.buckets) >= l.maxKeys {
		k = overflowKey
		if b := l.buckets[k]; b != nil {
			l.fill(b, now)
			return b
		}
	}
	b := &tokenBucket{tokens: l.burst, at: now}
	l.buckets[k] = b
	return b
}

// fill adds the tokens earned since b was last brought up to date.
func (l *keyedLimiter) fill(b *tokenBucket, now time.Time) {
	if l.interval <= 0 {
		b.tokens = l.burst
	} else {
		b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.interval))
	}
	b.at = now
}

// clientHost is the part of a client's address that limits are kept by: the IP
// without the port, and for IPv6 its /64 (what one host is usually given).
func clientHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

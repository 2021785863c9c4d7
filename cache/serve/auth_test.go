package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testAuth is an authenticator over an htpasswd file of user:password pairs (bcrypt
// of cost), whose bcrypt runs go through compare.
func testAuth(t *testing.T, cost int, compare func(hash, pw []byte) error, pairs ...string) *authenticator {
	t.Helper()
	var content string
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), cost)
		if err != nil {
			t.Fatal(err)
		}
		content += pairs[i] + ":" + string(h) + "\n"
	}
	p := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := newAuthenticator("", p, "", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a.compare = compare
	return a
}

// TestUnknownUserIsCheckedAgainstAHashOfTheSameCost: a password for a user the
// file does not name runs one bcrypt, against a hash as costly as the users'.
func TestUnknownUserIsCheckedAgainstAHashOfTheSameCost(t *testing.T) {
	var costs []int
	a := testAuth(t, 6, func(hash, pw []byte) error {
		c, _ := bcrypt.Cost(hash)
		costs = append(costs, c)
		return bcrypt.CompareHashAndPassword(hash, pw)
	}, "known", "secret")
	if id := a.checkPassword("nobody", "secret", "127.0.0.1:1"); id.result != authRefused {
		t.Errorf("unknown user: %v, want refused", id.result)
	}
	if id := a.checkPassword("known", "wrong", "127.0.0.1:1"); id.result != authRefused {
		t.Errorf("wrong password: %v, want refused", id.result)
	}
	if len(costs) != 2 || costs[0] != 6 || costs[1] != 6 {
		t.Errorf("bcrypt runs (their costs): %v, want [6 6]", costs)
	}
}

// TestConcurrentChecksOfOnePasswordShareOneBcrypt: 20 requests with the same
// credentials arriving together run bcrypt once, all pass, and later ones are
// remembered; a wrong password is not remembered.
func TestConcurrentChecksOfOnePasswordShareOneBcrypt(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}, 100), make(chan struct{})
	a := testAuth(t, bcrypt.MinCost, func(hash, pw []byte) error {
		runs.Add(1)
		started <- struct{}{}
		<-release
		return bcrypt.CompareHashAndPassword(hash, pw)
	}, "ci", "secret")
	var wg sync.WaitGroup
	results := make(chan authResult, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- a.checkPassword("ci", "secret", "127.0.0.1:1").result
		}()
	}
	select {
	case <-started: // the first check runs bcrypt; the others wait for it or find it remembered
	case <-time.After(5 * time.Second):
		t.Fatal("no check ran bcrypt")
	}
	close(release)
	wg.Wait()
	close(results)
	for r := range results {
		if r != authOK {
			t.Errorf("a concurrent check: %v, want accepted", r)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("20 concurrent checks of one password ran bcrypt %d times, want 1", n)
	}
	if id := a.checkPassword("ci", "secret", "10.0.0.1:1"); id.result != authOK || id.name != "ci" || runs.Load() != 1 {
		t.Errorf("a later check from another address: %+v after %d bcrypt runs, want accepted after 1", id, runs.Load())
	}
	a.checkPassword("ci", "wrong", "127.0.0.1:1")
	a.checkPassword("ci", "wrong", "127.0.0.1:1")
	if n := runs.Load(); n != 3 {
		t.Errorf("two wrong passwords: %d bcrypt runs in all, want 3 (a refusal is not remembered)", n)
	}
}

// TestKeyedLimiterBoundsItsMemory: a stranger varying its key gets one bucket
// per key until the limiter is full, then shares one overflow bucket: the
// limiter holds at most maxKeys+1 buckets, and keys past that are limited
// together.
func TestKeyedLimiterBoundsItsMemory(t *testing.T) {
	now := time.Unix(0, 0)
	l := newKeyedLimiter(time.Hour, 2, 100)
	l.now = func() time.Time { return now }
	allowed := 0
	for i := range 10000 {
		if l.take(fmt.Sprintf("addr 10.0.%d.%d", i/256, i%256)) {
			allowed++
		}
	}
	if len(l.buckets) > 101 {
		t.Errorf("%d buckets for 10,000 keys, want at most 101", len(l.buckets))
	}
	if allowed != 100+2 {
		t.Errorf("10,000 keys were allowed %d checks, want 102 (100 buckets, then the overflow's 2)", allowed)
	}
	// A full bucket is the same as none: after an interval the limiter makes room.
	now = now.Add(time.Hour)
	if !l.take("addr 192.0.2.1") || !l.take("addr 192.0.2.1") || l.take("addr 192.0.2.1") {
		t.Error("a new key after the buckets refilled: want 2 checks, then none")
	}
	if _, ok := l.buckets["addr 192.0.2.1"]; !ok {
		t.Error("the new key shares the overflow bucket though the others have refilled")
	}
	l.refund("addr 192.0.2.1")
	if !l.take("addr 192.0.2.1") {
		t.Error("a refunded check is not available again")
	}
}

// TestLimiterKeepsNoUserNames: made-up user names as long as a request header
// allows cost the limiter as little memory as short ones: it keeps no name.
func TestLimiterKeepsNoUserNames(t *testing.T) {
	a := testAuth(t, bcrypt.MinCost, bcrypt.CompareHashAndPassword, "ci", "secret")
	for i := range 20 {
		user := fmt.Sprintf("%d-%s", i, strings.Repeat("u", 512<<10))
		a.checkPassword(user, "x", fmt.Sprintf("10.0.0.%d:1", i))
	}
	kept := 0
	for k := range a.limiter.buckets {
		kept += len(k)
	}
	if kept > 20*2*100 {
		t.Errorf("the limiter keeps %d bytes of keys for 20 checks of 512 KiB user names, want at most %d", kept, 20*2*100)
	}
}

func TestClientHost(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:5000":          "127.0.0.1",
		"[2001:db8:1:2:3::9]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:1":  "2001:db8:1:2::/64",
		"@":                       "@",
	} {
		if got := clientHost(addr); got != want {
			t.Errorf("clientHost(%q) = %q, want %q", addr, got, want)
		}
	}
}

// Command serveload measures an artifact server from C concurrent clients: it
// reads (or writes) blobs for a fixed time and prints requests per second and
// MB/s. HTTP reads and writes use net/http directly, so the same run works
// against nginx serving the same files; gRPC uses gantry's own REAPI client.
//
//	serveload -url http://HOST:PORT|grpc://HOST:PORT -op read|write [-blobs FILE]
//	          [-size BYTES] [-clients 8] [-time 10s] [-token-file F] [-bg-write BYTES]
//
// With -bg-write, one more client uploads fresh blobs of that size the whole
// time (a runner pushing a huge artifact), and the latency percentiles of the
// measured clients show what it costs them.
//
// For reads, -blobs names a file of "hash size" lines (the blobs to fetch,
// round-robin); writes upload fresh random blobs of -size bytes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
)

func main() {
	url := flag.String("url", "", "server URL")
	op := flag.String("op", "read", "read or write")
	blobsFile := flag.String("blobs", "", "for reads: file of `hash size` lines")
	size := flag.Int("size", 4096, "for writes: blob size in bytes")
	clients := flag.Int("clients", 8, "concurrent clients")
	dur := flag.Duration("time", 10*time.Second, "how long to run")
	tokenFile := flag.String("token-file", "", "bearer token file")
	bgWrite := flag.Int("bg-write", 0, "one more client uploads blobs of this many bytes meanwhile")
	flag.Parse()
	if err := run(*url, *op, *blobsFile, *size, *clients, *dur, *tokenFile, *bgWrite); err != nil {
		fmt.Fprintf(os.Stderr, "serveload: %v\n", err)
		os.Exit(1)
	}
}

func run(url, op, blobsFile string, size, clients int, dur time.Duration, tokenFile string, bgWrite int) error {
	var blobs []cache.Digest
	if op == "read" {
		f, err := os.Open(blobsFile)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			h, s, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.ParseInt(s, 10, 64)
			blobs = append(blobs, cache.Digest{Hash: h, Size: n})
		}
		f.Close()
		if len(blobs) == 0 {
			return fmt.Errorf("no blobs in %s", blobsFile)
		}
	}
	token := ""
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(b))
	}
	isHTTP := strings.HasPrefix(url, "http")
	var store remote.Store
	if !isHTTP {
		var err error
		if store, err = remote.Open(remote.Spec{URL: url, TokenFile: tokenFile, Push: true}); err != nil {
			return err
		}
		defer store.Close()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var reqs, bytesMoved atomic.Int64
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	deadline := time.Now().Add(dur)
	var wg, bgWG sync.WaitGroup
	var bgBytes atomic.Int64
	if bgWrite > 0 {
		bgWG.Add(1)
		go func() {
			defer bgWG.Done()
			buf := make([]byte, bgWrite)
			rng := newFiller()
			for time.Now().Before(deadline) {
				rng.Read(buf)
				n, err := write(client, store, url, token, buf)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				bgBytes.Add(n)
			}
		}()
	}
	var latMu sync.Mutex
	var lats []time.Duration
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			rng := newFiller()
			for time.Now().Before(deadline) {
				var n int64
				var err error
				t0 := time.Now()
				switch op {
				case "read":
					d := blobs[int(next.Add(1))%len(blobs)]
					n, err = read(client, store, url, token, d)
				default:
					rng.Read(buf)
					n, err = write(client, store, url, token, buf)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				reqs.Add(1)
				bytesMoved.Add(n)
				latMu.Lock()
				lats = append(lats, time.Since(t0))
				latMu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	bgWG.Wait()
	bgEl := time.Since(start).Seconds()
	slices.Sort(lats)
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))].Round(10 * time.Microsecond)
	}
	bg := ""
	if bgWrite > 0 {
		bg = fmt.Sprintf(", background writer %.1f MB/s", float64(bgBytes.Load())/bgEl/1e6)
	}
	fmt.Printf("%s %s: %d clients, %d requests in %.1fs: %.0f req/s, %.1f MB/s, p50 %v p99 %v max %v%s bytes=%d\n", op, remote.RedactURL(url), clients, reqs.Load(), el,
		float64(reqs.Load())/el, float64(bytesMoved.Load())/el/1e6, pct(0.5), pct(0.99), pct(1), bg, bytesMoved.Load())
	return firstErr
}

func read(client *http.Client, store remote.Store, url, token string, d cache.Digest) (int64, error) {
	if store != nil {
		cw := &countWriter{}
		err := store.ReadBlob(context.Background(), d, cw)
		return cw.n, err
	}
	req, _ := http.NewRequest("GET", url+"/cas/"+d.Hash, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return n, fmt.Errorf("GET %s: %s", d.Hash, resp.Status)
	}
	return n, err
}

func write(client *http.Client, store remote.Store, url, token string, data []byte) (int64, error) {
	d := cache.DigestOf(data)
	if store != nil {
		err := store.WriteBlob(context.Background(), d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		return d.Size, err
	}
	req, _ := http.NewRequest("PUT", url+"/cas/"+d.Hash, bytes.NewReader(data))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("PUT %s: %s", d.Hash, resp.Status)
	}
	return d.Size, nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// newFiller returns a fast pseudo-random source of its own for one client:
// crypto/rand would serialise the clients (filling a 1 GiB buffer holds it
// for seconds), which measures the generator instead of the server.
func newFiller() *mrand.ChaCha8 {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(mrand.Uint32())
	}
	return mrand.NewChaCha8(seed)
}

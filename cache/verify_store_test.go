package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// TestVerifyChecksActionCacheEntries: Verify of a server's store reports an
// action cache entry that names a blob the store lost, and Repair removes it
// only if it still holds what Verify read: an entry a server wrote since then
// stays.
func TestVerifyChecksActionCacheEntries(t *testing.T) {
	c := openTestCache(t)
	kept, err := c.PutBlob([]byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	entry := func(ds ...Digest) []byte {
		ar := &repb.ActionResult{}
		for _, d := range ds {
			ar.OutputFiles = append(ar.OutputFiles, &repb.OutputFile{Path: d.Hash[:8], Digest: d.Proto()})
		}
		data, err := proto.Marshal(ar)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	lost := DigestOf([]byte("lost"))
	stale, rewritten := DigestOf([]byte("stale key")), DigestOf([]byte("rewritten key"))
	for _, key := range []Digest{stale, rewritten} {
		if err := c.WriteActionResult(key, entry(kept, lost)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := c.Verify()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []Digest{stale, rewritten} {
		want := "action cache entry " + key.Hash + ": opening blob " + lost.String()
		if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("Verify problems %q lack %q", rep.Problems, want)
		}
	}
	fresh := entry(kept)
	if err := c.WriteActionResult(rewritten, fresh); err != nil { // a server's client writes it again
		t.Fatal(err)
	}
	if _, err := c.Repair(rep); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.acPath(stale)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the entry naming a lost blob is still there after Repair (%v)", err)
	}
	if data, err := os.ReadFile(c.acPath(rewritten)); err != nil || !bytes.Equal(data, fresh) {
		t.Errorf("the entry written again since Verify was removed or changed by Repair: %v", err)
	}
	if rep, err := c.Verify(); err != nil || !rep.Clean() {
		t.Errorf("Verify after Repair: %v, %v", rep.Problems, err)
	}
}

package actions

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/internal/testtree"
)

// TestOverlapReport: a path staged three times is named once with every element, the
// last (whose file stays) first; a report names the first ten paths and counts the
// rest; a path is left out only when every element that overwrote it whitelists it,
// and an element's whitelist does not cover what others overwrite.
func TestOverlapReport(t *testing.T) {
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := func(files map[string]string) cache.Digest {
		src := t.TempDir()
		testtree.Write(t, src, files, nil)
		d, err := c.StoreTree(src)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	many := func(content string) map[string]string {
		m := map[string]string{"etc/motd": "file:" + content, "usr/lib/libx.so": "file:" + content}
		for i := range 12 {
			m[fmt.Sprintf("share/%02d", i)] = "file:" + content
		}
		return m
	}
	trees := []cache.Digest{store(many("a")), store(many("b")), store(many("c"))}
	for _, tc := range []struct {
		name       string
		whitelists [3][]string
		want       string
	}{
		{name: "none whitelisted",
			want: "14 paths staged by more than one element, the later in staging order wins: " +
				"/etc/motd (c.toml over b.toml over a.toml), /share/00 (c.toml over b.toml over a.toml), /share/01 (c.toml over b.toml over a.toml), " +
				"/share/02 (c.toml over b.toml over a.toml), /share/03 (c.toml over b.toml over a.toml), /share/04 (c.toml over b.toml over a.toml), " +
				"/share/05 (c.toml over b.toml over a.toml), /share/06 (c.toml over b.toml over a.toml), /share/07 (c.toml over b.toml over a.toml), " +
				"/share/08 (c.toml over b.toml over a.toml), and 4 more"},
		{name: "the last whitelists what it overwrites, the middle one does not",
			whitelists: [3][]string{nil, nil, {"/share/**", "usr/lib/*.so"}},
			want:       "14 paths staged by more than one element"},
		{name: "a whitelist of the element overwritten does not count",
			whitelists: [3][]string{{"/**"}, {"/share/**", "/usr/lib/*.so"}, {"/share/**", "/usr/lib/*.so"}},
			want:       "1 path staged by more than one element, the later in staging order wins: /etc/motd (c.toml over b.toml over a.toml)"},
		{name: "every overwriter whitelists", whitelists: [3][]string{nil, {"/**"}, {"/**"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newStaging(c, dir, cache.CheckoutOptions{Trusted: true})
			for i, name := range []string{"a.toml", "b.toml", "c.toml"} {
				if err := s.stage(name, trees[i], tc.whitelists[i]); err != nil {
					t.Fatal(err)
				}
			}
			n, text := s.report()
			if (tc.want == "") != (n == 0) || !strings.HasPrefix(text, tc.want) {
				t.Errorf("report = %d, %q\nwant %q", n, text, tc.want)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "etc", "motd")); err != nil || string(b) != "c" {
				t.Errorf("etc/motd = %q, %v; want the last element's", b, err)
			}
		})
	}
}

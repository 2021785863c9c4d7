package actions

import (
	"testing"
)

// A selection keeps a file as BuildStream's split filter does: claimed by an included
// domain and no excluded one, or by none when orphans are kept; * and ? stay within a
// path component, ** crosses them.
func TestSplitSelection(t *testing.T) {
	rules := map[string][]string{
		"runtime": {"/usr/bin/*", "/usr/lib/lib*.so*"},
		"devel":   {"/usr/include/**", "/usr/lib/lib*.a", "/usr/lib/lib?.la"},
		"doc":     {"/usr/share/doc/**", "/usr/share/man/man[!0]/*"},
		"empty":   {},
	}
	cases := []struct {
		include, exclude []string
		orphans          bool
		keep, drop       []string
	}{
		{nil, nil, false, []string{"usr/bin/sh", "usr/lib/libz.so.1", "usr/include/z/z.h", "usr/share/man/man1/z.1"},
			[]string{"usr/bin/sub/sh", "usr/share/z", "usr/lib/libzz.la", "usr/share/man/man0/z.0"}},
		{[]string{"runtime"}, nil, false, []string{"usr/bin/sh", "usr/lib/libz.so"}, []string{"usr/include/z.h", "etc/z"}},
		{[]string{"runtime"}, nil, true, []string{"usr/bin/sh", "etc/z"}, []string{"usr/include/z.h", "usr/share/doc/z"}},
		{nil, []string{"devel", "doc"}, true, []string{"usr/bin/sh", "etc/z", "usr/lib/libzz.la"}, []string{"usr/lib/libz.a", "usr/lib/libx.la", "usr/share/doc/z/README"}},
		{[]string{"devel", "unknown"}, []string{"devel"}, false, nil, []string{"usr/include/z.h", "usr/bin/sh"}},
	}
	for _, tc := range cases {
		s, err := newSelection(rules, tc.include, tc.exclude, tc.orphans)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tc.keep {
			if !s.keeps(p) {
				t.Errorf("include %v exclude %v orphans %v: %s dropped", tc.include, tc.exclude, tc.orphans, p)
			}
		}
		for _, p := range tc.drop {
			if s.keeps(p) {
				t.Errorf("include %v exclude %v orphans %v: %s kept", tc.include, tc.exclude, tc.orphans, p)
			}
		}
	}
}

package bincode

import (
	"math"
	"reflect"
	"testing"
)

// Every value reads back as written, and every prefix of the bytes is an error, not a
// panic or a wrong value.
func TestRoundTrip(t *testing.T) {
	nums := []int64{0, 1, -1, 63, -64, 64, 1 << 40, math.MaxInt64, math.MinInt64}
	var w Writer
	for _, v := range nums {
		w.Int(v)
		w.Uint(uint64(v))
	}
	w.Str("")
	w.Str("héllo")
	w.Bool(true)
	w.Bool(false)
	w.Strs([]string{"a", ""})
	w.StrMap(map[string]string{"k": "v"})
	read := func(r *Reader) {
		for _, v := range nums {
			if got, gotU := r.Int(), r.Uint(); r.Err == nil && (got != v || gotU != uint64(v)) {
				t.Fatalf("varint %d read back as %d, uvarint %d as %d", v, got, uint64(v), gotU)
			}
		}
		if s1, s2, b1, b2 := r.Str(), r.Str(), r.Bool(), r.Bool(); r.Err == nil && (s1 != "" || s2 != "héllo" || !b1 || b2) {
			t.Fatalf("read %q %q %t %t", s1, s2, b1, b2)
		}
		if l, m := r.Strs(), r.StrMap(); r.Err == nil && (!reflect.DeepEqual(l, []string{"a", ""}) || !reflect.DeepEqual(m, map[string]string{"k": "v"})) {
			t.Fatalf("read %q %v", l, m)
		}
	}
	r := NewStringReader(string(w.B))
	read(r)
	if r.Err != nil || r.Len() != 0 {
		t.Fatalf("reading it all: %v, %d bytes left", r.Err, r.Len())
	}
	for i := range len(w.B) {
		r := NewStringReader(string(w.B[:i]))
		read(r)
		if r.Err == nil {
			t.Fatalf("%d of %d bytes read without an error", i, len(w.B))
		}
	}
	if r := NewStringReader("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"); r.Uint() != 0 || r.Err == nil {
		t.Fatal("a uvarint over 64 bits read without an error")
	}
}

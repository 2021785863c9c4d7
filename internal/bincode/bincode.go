// Package bincode writes and reads the compact binary form of gantry's load-time
// caches (the element parse cache, the artifact outcome memo): strings and lists are a
// uvarint length and their items, numbers varints, booleans a byte. Written by hand
// because encoding/gob's reflection took a tenth of a null build's CPU. It imports no
// project package.
package bincode

import (
	"encoding/binary"
	"errors"
)

// Writer appends values to B.
type Writer struct{ B []byte }

func (w *Writer) Uint(v uint64) { w.B = binary.AppendUvarint(w.B, v) }
func (w *Writer) Int(v int64)   { w.B = binary.AppendVarint(w.B, v) }
func (w *Writer) Str(s string)  { w.Uint(uint64(len(s))); w.B = append(w.B, s...) }

func (w *Writer) Bool(v bool) {
	if v {
		w.B = append(w.B, 1)
	} else {
		w.B = append(w.B, 0)
	}
}

func (w *Writer) Strs(list []string) {
	w.Uint(uint64(len(list)))
	for _, s := range list {
		w.Str(s)
	}
}

func (w *Writer) StrMap(m map[string]string) {
	w.Uint(uint64(len(m)))
	for k, v := range m {
		w.Str(k)
		w.Str(v)
	}
}

// Reader reads a Writer's bytes, held as one string: every string it returns is a part
// of it, not a copy (one allocation for a file instead of one per string; what is read
// lives as long as the cache anyway). The first problem sets Err, after which every
// read returns a zero value.
type Reader struct {
	b   string
	Err error
}

// ErrTruncated is the error of a read past the end or of a malformed number.
var ErrTruncated = errors.New("truncated or damaged")

// NewStringReader reads s without a copy (a file ReadLoadsFile read, or a part of
// what another Reader read).
func NewStringReader(s string) *Reader { return &Reader{b: s} }

// Len is how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }

// Uint reads a uvarint as binary.Uvarint does, from a string.
func (r *Reader) Uint() uint64 {
	if r.Err != nil {
		return 0
	}
	var v uint64
	for i := 0; i < len(r.b) && i < binary.MaxVarintLen64; i++ {
		c := r.b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break // over 64 bits
			}
			r.b = r.b[i+1:]
			return v | uint64(c)<<(7*i)
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	r.Err = ErrTruncated
	return 0
}

// Int reads a varint (zig-zag encoded, as binary.AppendVarint writes).
func (r *Reader) Int() int64 {
	u := r.Uint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// Count reads a length that must fit in what is left (each item takes a byte or more).
func (r *Reader) Count() int {
	n := r.Uint()
	if n > uint64(len(r.b)) {
		r.Err = ErrTruncated
		return 0
	}
	return int(n)
}

func (r *Reader) Str() string {
	n := r.Count()
	if r.Err != nil {
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *Reader) Bool() bool {
	if r.Err != nil || len(r.b) == 0 || r.b[0] > 1 {
		if r.Err == nil {
			r.Err = ErrTruncated
		}
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// Strs reads a list; an empty one is nil.
func (r *Reader) Strs() []string {
	n := r.Count()
	if n == 0 {
		return nil
	}
	list := make([]string, n)
	for i := range list {
		list[i] = r.Str()
	}
	return list
}

// StrMap reads a map; an empty one is nil.
func (r *Reader) StrMap() map[string]string {
	n := r.Count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.Str()
		m[k] = r.Str()
	}
	return m
}

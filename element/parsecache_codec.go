package element

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/gantry-build/gantry/source"
)

// The parse cache's stored form: the stamp, the number of files, then each file's
// name, identity, parse and key memo, every field in declaration order. Strings and lists are a
// uvarint length and their items; numbers are varints; an empty list or map decodes as
// nil. Written by hand because decoding it with encoding/gob took a tenth of a null
// build's CPU; TestParseCacheCodecRoundTrips sets every field of parsedFile (found by
// reflection, so a new field must be added here to pass) and reads it back.

func encodeParseCache(stamp string, files map[string]cachedFile) []byte {
	w := cacheWriter{b: make([]byte, 0, 64+256*len(files))}
	w.str(stamp)
	w.uint(uint64(len(files)))
	for name, c := range files {
		w.str(name)
		w.int(c.ID.Size)
		w.int(c.ID.Mtime)
		w.int(c.ID.Ctime)
		w.uint(c.ID.Ino)
		w.uint(c.ID.Dev)
		w.parsed(&c.Parsed)
		w.str(c.Key.Inputs)
		w.str(c.Key.Key)
	}
	return w.b
}

// decodeParseCache reads what encodeParseCache wrote; an error for anything else.
func decodeParseCache(data []byte) (stamp string, files map[string]cachedFile, err error) {
	r := cacheReader{b: string(data)}
	stamp = r.str()
	n := r.count()
	files = make(map[string]cachedFile, n)
	for range n {
		name := r.str()
		var c cachedFile
		c.ID = fileID{Size: r.int(), Mtime: r.int(), Ctime: r.int(), Ino: r.uint(), Dev: r.uint()}
		r.parsed(&c.Parsed)
		c.Key = keyMemo{Inputs: r.str(), Key: r.str()}
		if r.err != nil {
			break
		}
		files[name] = c
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	return stamp, files, r.err
}

type cacheWriter struct{ b []byte }

func (w *cacheWriter) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *cacheWriter) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *cacheWriter) str(s string)  { w.uint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *cacheWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *cacheWriter) strs(list []string) {
	w.uint(uint64(len(list)))
	for _, s := range list {
		w.str(s)
	}
}

func (w *cacheWriter) strMap(m map[string]string) {
	w.uint(uint64(len(m)))
	for k, v := range m {
		w.str(k)
		w.str(v)
	}
}

func (w *cacheWriter) parsed(pf *parsedFile) {
	w.str(pf.Kind)
	w.str(pf.Description)
	w.strs(pf.Depends)
	w.strs(pf.BuildDepends)
	w.strs(pf.RuntimeDepends)
	w.str(pf.Pool)
	w.strMap(pf.Variables)
	w.strMap(pf.Environment)
	w.uint(uint64(len(pf.Sources)))
	for i := range pf.Sources {
		s := &pf.Sources[i]
		w.str(string(s.Kind))
		w.str(s.URL)
		w.str(s.Path)
		w.str(s.Ref)
		w.str(s.Track)
		w.str(s.Directory)
		w.str(s.BaseDir)
		w.str(s.Filename)
		w.bool(s.Executable)
		w.bool(s.Submodules)
		w.bool(s.DotGit)
		w.int(int64(s.StripLevel))
		w.bool(s.Pinned)
	}
	c := &pf.Config
	w.uint(uint64(len(c.Commands)))
	for step, cmds := range c.Commands {
		w.str(step)
		w.strs(cmds)
	}
	w.str(c.Source)
	w.str(c.Target)
	w.strs(c.Include)
	w.strs(c.Exclude)
}

// cacheReader reads a cacheWriter's bytes, held as one string: every string it returns
// is a part of it, not a copy (one allocation for the file instead of one per string;
// the entries live as long as the cache anyway). The first problem sets err, after which
// every read returns a zero value.
type cacheReader struct {
	b   string
	err error
}

var errParseCacheTruncated = errors.New("truncated or damaged")

// uint reads a uvarint as binary.Uvarint does, from a string.
func (r *cacheReader) uint() uint64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	for i := 0; i < len(r.b) && i < binary.MaxVarintLen64; i++ {
		c := r.b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break // overflows 64 bits
			}
			r.b = r.b[i+1:]
			return v | uint64(c)<<(7*i)
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	r.err = errParseCacheTruncated
	return 0
}

// int reads a varint (zig-zag encoded, as binary.AppendVarint writes).
func (r *cacheReader) int() int64 {
	u := r.uint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// count reads a length that must fit in what is left (each item takes a byte or more).
func (r *cacheReader) count() int {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.err = errParseCacheTruncated
		return 0
	}
	return int(n)
}

func (r *cacheReader) str() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *cacheReader) bool() bool {
	if r.err != nil || len(r.b) == 0 || r.b[0] > 1 {
		if r.err == nil {
			r.err = errParseCacheTruncated
		}
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

func (r *cacheReader) strs() []string {
	n := r.count()
	if n == 0 {
		return nil
	}
	list := make([]string, n)
	for i := range list {
		list[i] = r.str()
	}
	return list
}

func (r *cacheReader) strMap() map[string]string {
	n := r.count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.str()
		m[k] = r.str()
	}
	return m
}

func (r *cacheReader) parsed(pf *parsedFile) {
	pf.Kind = r.str()
	pf.Description = r.str()
	pf.Depends = r.strs()
	pf.BuildDepends = r.strs()
	pf.RuntimeDepends = r.strs()
	pf.Pool = r.str()
	pf.Variables = r.strMap()
	pf.Environment = r.strMap()
	if n := r.count(); n > 0 {
		pf.Sources = make([]source.Spec, n)
		for i := range pf.Sources {
			s := &pf.Sources[i]
			s.Kind = source.Kind(r.str())
			s.URL = r.str()
			s.Path = r.str()
			s.Ref = r.str()
			s.Track = r.str()
			s.Directory = r.str()
			s.BaseDir = r.str()
			s.Filename = r.str()
			s.Executable = r.bool()
			s.Submodules = r.bool()
			s.DotGit = r.bool()
			level := r.int()
			if level < math.MinInt32 || level > math.MaxInt32 {
				r.err = errParseCacheTruncated
			}
			s.StripLevel = int(level)
			s.Pinned = r.bool()
		}
	}
	c := &pf.Config
	if n := r.count(); n > 0 {
		c.Commands = make(map[string][]string, n)
		for range n {
			step := r.str()
			c.Commands[step] = r.strs()
		}
	}
	c.Source = r.str()
	c.Target = r.str()
	c.Include = r.strs()
	c.Exclude = r.strs()
}

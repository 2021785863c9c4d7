package source

import (
	"math"

	"github.com/gantry-build/gantry/internal/bincode"
)

// WriteFields writes the fields of s an element file sets — not Upstream and
// Mirrors, which the project's aliases resolve — in the order ReadFields reads them.
// The parse cache and the build job's payload both store sources this way.
func (s *Spec) WriteFields(w *bincode.Writer) {
	w.Str(string(s.Kind))
	w.Str(s.URL)
	w.Str(s.Path)
	w.Str(s.Ref)
	w.Str(s.Track)
	w.Str(s.Directory)
	w.Str(s.BaseDir)
	w.Str(s.Filename)
	w.Bool(s.Executable)
	w.Bool(s.Submodules)
	w.Bool(s.DotGit)
	w.Int(int64(s.StripLevel))
	w.Bool(s.Pinned)
}

// ReadFields reads what WriteFields wrote into s; a malformed input sets r.Err.
func (s *Spec) ReadFields(r *bincode.Reader) {
	s.Kind = Kind(r.Str())
	s.URL = r.Str()
	s.Path = r.Str()
	s.Ref = r.Str()
	s.Track = r.Str()
	s.Directory = r.Str()
	s.BaseDir = r.Str()
	s.Filename = r.Str()
	s.Executable = r.Bool()
	s.Submodules = r.Bool()
	s.DotGit = r.Bool()
	level := r.Int()
	if level < math.MinInt32 || level > math.MaxInt32 {
		r.Err = bincode.ErrTruncated
	}
	s.StripLevel = int(level)
	s.Pinned = r.Bool()
}

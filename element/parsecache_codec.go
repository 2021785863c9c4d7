package element

import (
	"errors"
	"io"
	"math"
	"time"

	"github.com/gantry-build/gantry/internal/bincode"
	"github.com/gantry-build/gantry/internal/fileid"
	"github.com/gantry-build/gantry/source"
)

// The parse cache's stored form: the stamp, the number of files, then each file's
// name and its entry — identity, parse, options and kinds digests, included files, then the key
// memo (last, so that an entry whose key is computed again keeps the rest as it is), every field in declaration order,
// in bincode's form (an empty list or map decodes as nil) — as one string, so that
// opening the cache only indexes the entries and each is decoded when its file is
// looked up, on the goroutines that load the graph. TestParseCacheCodecRoundTrips sets
// every field of parsedFile and keyMemo (found by reflection, so a new field must be
// added here to pass) and reads it back.

// encodeParseCache writes files, but for the entries marked drop, to out, in blocks of
// at most saveBlock bytes or one entry (a whole 100,000-element cache is 25 MB; its
// largest entry, the target that depends on every other, 2 MB).
func encodeParseCache(out io.Writer, stamp string, files map[string]*cachedFile) error {
	n := 0
	for _, c := range files {
		if !c.drop {
			n++
		}
	}
	w := &bincode.Writer{B: make([]byte, 0, saveBlock)}
	var err error
	write := func(b []byte) {
		if err == nil {
			_, err = out.Write(b)
		}
	}
	w.Str(stamp)
	w.Uint(uint64(n))
	var entry, head bincode.Writer // an entry, and its name and length before it
	for name, c := range files {
		if c.drop {
			continue
		}
		entry.B = entry.B[:0]
		c.mu.Lock()
		rekeyed := c.rekeyed
		c.mu.Unlock()
		switch {
		case c.raw != "" && !rekeyed: // as read
			entry.B = append(entry.B, c.raw...)
		case c.raw != "": // as read, with the key computed again (c decoded)
			entry.B = append(entry.B, c.raw[:c.keyAt]...)
		case c.head != "": // made by this load
			entry.B = append(entry.B, c.head...)
		default:
			pf := c.Parsed
			if pf == nil {
				pf = &parsedFile{}
			}
			writeHead(&entry, c.ID, pf, c.Options, c.Kinds, c.Includes)
		}
		if c.raw == "" || rekeyed {
			entry.Str(c.Key.Inputs)
			entry.Str(c.Key.Key)
			entry.Str(c.Key.Context)
			entry.Str(c.Key.Weak)
			entry.Str(c.Key.RunKey)
			entry.Str(c.Key.RunNames)
			entry.Str(c.Key.RunWeak)
		}
		head.B = head.B[:0]
		head.Str(name)
		head.Uint(uint64(len(entry.B)))
		if len(w.B)+len(head.B)+len(entry.B) > saveBlock {
			write(w.B)
			w.B = w.B[:0]
		}
		w.B = append(w.B, head.B...)
		if len(head.B)+len(entry.B) > saveBlock {
			write(w.B)
			w.B = w.B[:0]
			write(entry.B)
		} else {
			w.B = append(w.B, entry.B...)
		}
	}
	write(w.B)
	return err
}

// saveBlock is how many bytes encodeParseCache gathers before it writes them.
const saveBlock = 64 << 10

// decodeParseCache indexes what encodeParseCache wrote, entries undecoded
// (cachedFile.decode); an error for anything else.
func decodeParseCache(data string) (stamp string, files map[string]*cachedFile, err error) {
	r := bincode.NewStringReader(data)
	stamp = r.Str()
	n := r.Count()
	files = make(map[string]*cachedFile, n)
	// Entries and their parses are allocated a block at a time, not one by one.
	var block []cachedFile
	var parses []parsedFile
	for range n {
		name, raw := r.Str(), r.Str()
		if r.Err != nil {
			break
		}
		if len(block) == 0 {
			block, parses = make([]cachedFile, min(n, 1024)), make([]parsedFile, min(n, 1024))
		}
		c := &block[0]
		c.Parsed = &parses[0]
		block, parses = block[1:], parses[1:]
		c.raw = raw
		files[name] = c
	}
	if r.Err == nil && r.Len() != 0 {
		r.Err = errors.New("trailing bytes")
	}
	return stamp, files, r.Err
}

// decode fills c from its stored form the first time it is called, and reports whether
// that was whole: a damaged entry is a miss. Safe for concurrent use.
func (c *cachedFile) decode() bool {
	c.once.Do(func() {
		if c.raw == "" { // made by this load: its parse from head, the rest is set
			if c.head != "" {
				var d cachedFile
				readHead(bincode.NewStringReader(c.head), &d)
				c.Parsed = d.Parsed
			}
			c.whole = true
			return
		}
		r := bincode.NewStringReader(c.raw)
		readHead(r, c)
		c.keyAt = len(c.raw) - r.Len()
		c.Key = keyMemo{Inputs: r.Str(), Key: r.Str(), Context: r.Str(), Weak: r.Str(), RunKey: r.Str(), RunNames: r.Str(), RunWeak: r.Str()}
		c.whole = r.Err == nil && r.Len() == 0
	})
	return c.whole
}

// writeHead writes an entry's stored form but for its key memo, which follows it.
func writeHead(w *bincode.Writer, id fileid.ID, pf *parsedFile, options, kinds string, includes []includedFile) {
	id.Append(w)
	writeParsed(w, pf)
	w.Str(options)
	w.Str(kinds)
	w.Uint(uint64(len(includes)))
	for _, inc := range includes {
		w.Str(inc.Name)
		inc.ID.Append(w)
		w.Str(inc.Via)
		w.Str(inc.Root)
	}
}

// readHead reads what writeHead wrote into c.
func readHead(r *bincode.Reader, c *cachedFile) {
	c.ID = fileid.Read(r)
	if c.Parsed == nil {
		c.Parsed = new(parsedFile)
	}
	readParsed(r, c.Parsed)
	c.Options = r.Str()
	c.Kinds = r.Str()
	if n := r.Count(); n > 0 {
		c.Includes = make([]includedFile, n)
		for i := range c.Includes {
			c.Includes[i] = includedFile{Name: r.Str(), ID: fileid.Read(r), Via: r.Str(), Root: r.Str()}
		}
	}
}

// id is c's file identity, from its stored form if it was not decoded (not decoding
// it, so that Save does not decode the whole cache).
func (c *cachedFile) id() fileid.ID {
	if c.raw == "" {
		return c.ID
	}
	return fileid.Read(bincode.NewStringReader(c.raw))
}

func writeParsed(w *bincode.Writer, pf *parsedFile) {
	w.Str(pf.Kind)
	w.Str(pf.Description)
	w.Strs(pf.Depends)
	w.Strs(pf.BuildDepends)
	w.Strs(pf.RuntimeDepends)
	w.Str(pf.Pool)
	w.StrMap(pf.RemoteExecution.Platform)
	w.Int(int64(pf.RemoteExecution.Timeout))
	w.StrMap(pf.Variables)
	w.StrMap(pf.Environment)
	w.Uint(uint64(len(pf.Sources)))
	for i := range pf.Sources {
		pf.Sources[i].WriteFields(w)
	}
	c := &pf.Config
	w.Uint(uint64(len(c.Commands)))
	for step, cmds := range c.Commands {
		w.Str(step)
		w.Strs(cmds)
	}
	w.Str(c.Source)
	w.Str(c.Target)
	w.Strs(c.Include)
	w.Strs(c.Exclude)
	w.Uint(uint64(len(c.Options)))
	for _, o := range c.Options {
		w.Str(o.Name)
		w.Str(o.Value)
		w.Str(o.File)
		w.Int(int64(o.Line))
	}
	w.Uint(uint64(len(c.Overrides)))
	for _, o := range c.Overrides {
		w.Str(o.Name)
		w.Str(o.As)
		w.Int(int64(o.Line))
	}
	writeOptBool(w, c.Integrate)
	writeOptBool(w, c.Orphans)
	writePublic(w, &pf.Public)
}

// writeOptBool writes an optional boolean: 0 unset, 1 false, 2 true.
func writeOptBool(w *bincode.Writer, b *bool) {
	switch {
	case b == nil:
		w.Uint(0)
	case !*b:
		w.Uint(1)
	default:
		w.Uint(2)
	}
}

func readOptBool(r *bincode.Reader) *bool {
	switch r.Uint() {
	case 1:
		return new(bool)
	case 2:
		b := true
		return &b
	}
	return nil
}

func writePublic(w *bincode.Writer, pub *Public) {
	w.Strs(pub.Integration)
	w.Uint(uint64(len(pub.Splits)))
	for _, d := range sortedKeys(pub.Splits) {
		r := pub.Splits[d]
		w.Str(d)
		w.Strs(r.Rules)
		w.Bool(r.Compose)
		w.Strs(r.Prepend)
		w.Strs(r.Append)
	}
	w.Strs(pub.OverlapWhitelist)
}

func readPublic(r *bincode.Reader, pub *Public) {
	pub.Integration = r.Strs()
	if n := r.Count(); n > 0 {
		pub.Splits = make(map[string]SplitRule, n)
		for range n {
			d := r.Str()
			pub.Splits[d] = SplitRule{Rules: r.Strs(), Compose: r.Bool(), Prepend: r.Strs(), Append: r.Strs()}
		}
	}
	pub.OverlapWhitelist = r.Strs()
}

func readParsed(r *bincode.Reader, pf *parsedFile) {
	pf.Kind = r.Str()
	pf.Description = r.Str()
	pf.Depends = r.Strs()
	pf.BuildDepends = r.Strs()
	pf.RuntimeDepends = r.Strs()
	pf.Pool = r.Str()
	pf.RemoteExecution.Platform = r.StrMap()
	pf.RemoteExecution.Timeout = time.Duration(r.Int())
	pf.Variables = r.StrMap()
	pf.Environment = r.StrMap()
	if n := r.Count(); n > 0 {
		pf.Sources = make([]source.Spec, n)
		for i := range pf.Sources {
			pf.Sources[i].ReadFields(r)
		}
	}
	c := &pf.Config
	if n := r.Count(); n > 0 {
		c.Commands = make(map[string][]string, n)
		for range n {
			step := r.Str()
			c.Commands[step] = r.Strs()
		}
		c.Commands = sharedCommands(c.Commands)
	}
	c.Source = r.Str()
	c.Target = r.Str()
	c.Include = r.Strs()
	c.Exclude = r.Strs()
	if n := r.Count(); n > 0 {
		c.Options = make([]OptionSetting, n)
		for i := range c.Options {
			o := &c.Options[i]
			o.Name, o.Value, o.File = r.Str(), r.Str(), r.Str()
			line := r.Int()
			if line < math.MinInt32 || line > math.MaxInt32 {
				r.Err = bincode.ErrTruncated
			}
			o.Line = int(line)
		}
	}
	if n := r.Count(); n > 0 {
		c.Overrides = make([]Override, n)
		for i := range c.Overrides {
			o := &c.Overrides[i]
			o.Name, o.As = r.Str(), r.Str()
			line := r.Int()
			if line < math.MinInt32 || line > math.MaxInt32 {
				r.Err = bincode.ErrTruncated
			}
			o.Line = int(line)
		}
	}
	c.Integrate = readOptBool(r)
	c.Orphans = readOptBool(r)
	readPublic(r, &pf.Public)
}

package remote

import (
	"fmt"
	"io"

	"github.com/gantry-build/gantry/cache"
)

// uploadError is a failure reading the local content of an upload: the
// content is not what its digest says (it wraps ErrCorrupt then) or could not
// be read. The remote is not at fault, and the upload was abandoned before the
// remote could store anything.
type uploadError struct {
	Digest cache.Digest
	Err    error
}

func (e *uploadError) Error() string {
	return fmt.Sprintf("reading the local content of blob %s: %v", e.Digest, e.Err)
}

func (e *uploadError) Unwrap() error { return e.Err }

// hashedUpload wraps open, the content of blob d, for an upload: every reader
// it opens hashes what it yields and holds the last bytes back until they
// complete the digest, so that an upload of content that is not d fails before
// the remote has all of it (an HTTP body short of its Content-Length, a
// ByteStream without its final message, a batch never sent) and never stores
// it. Its errors are *uploadError. The hashing costs no second read.
func hashedUpload(d cache.Digest, open func() (io.ReadCloser, error)) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		rc, err := open()
		if err != nil {
			return nil, &uploadError{Digest: d, Err: err}
		}
		return &uploadReader{rc: rc, d: d, h: cache.NewDigestWriter()}, nil
	}
}

// uploadReader is a reader of hashedUpload.
type uploadReader struct {
	rc  io.ReadCloser
	d   cache.Digest
	h   *cache.DigestWriter // what was read
	err error               // sticky
}

func (r *uploadReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.h.Size() == r.d.Size && r.h.Size() > 0 {
		return 0, io.EOF // checked when the last bytes were read
	}
	p = p[:min(int64(len(p)), r.d.Size-r.h.Size())]
	n, err := r.rc.Read(p)
	r.h.Write(p[:n])
	switch {
	case r.h.Size() == r.d.Size:
		// The last bytes: handed over only once the content is known to be d.
		if err := r.check(); err != nil {
			r.err = &uploadError{Digest: r.d, Err: err}
			return 0, r.err
		}
		if n == 0 {
			return 0, io.EOF // the empty blob
		}
		return n, nil
	case err == io.EOF:
		r.err = &uploadError{Digest: r.d, Err: fmt.Errorf("%s ends after %d of its %d bytes: %w", r.name(), r.h.Size(), r.d.Size, cache.ErrCorrupt)}
	case err != nil:
		r.err = &uploadError{Digest: r.d, Err: err}
	default:
		return n, nil
	}
	return 0, r.err
}

// check tells whether the content read, all d.Size bytes of it, is d and ends
// there.
func (r *uploadReader) check() error {
	var one [1]byte
	if n, _ := io.ReadFull(r.rc, one[:]); n > 0 {
		return fmt.Errorf("%s is longer than its %d bytes: %w", r.name(), r.d.Size, cache.ErrCorrupt)
	}
	if got := r.h.Digest(); got != r.d {
		return cache.Mismatch(r.d, got, r.name())
	}
	return nil
}

// name is the local file being uploaded, for messages.
func (r *uploadReader) name() string {
	if f, ok := r.rc.(interface{ Name() string }); ok {
		return f.Name()
	}
	return "the content of blob " + r.d.String()
}

func (r *uploadReader) Close() error { return r.rc.Close() }

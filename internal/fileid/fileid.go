// Package fileid identifies one version of a file by what stat(2) says of it. The
// caches that remember work per file — element's parse cache (element files) and
// cache's outcome memo (refs) — trust a file unchanged while its ID is: a replacement by
// rename gives a new inode, and any write in place moves the change time, which no user
// can set back. A file changed within RacyWindow of the moment such a cache is written
// is not remembered (git's "racily clean" rule: a second change within the filesystem's
// timestamp granularity could leave every field the same).
//
// IDs are taken on Linux only, where this is tested; elsewhere every call reports no
// ID, and the caches fall back to reading the file.
package fileid

import (
	"os"
	"time"

	"github.com/gantry-build/gantry/internal/bincode"
)

// ID is one version of a file. The zero ID means unknown.
type ID struct {
	Size, Mtime, Ctime int64 // times in ns since the epoch
	Ino, Dev           uint64
}

// RacyWindow: files changed this close to a cache's writing are not remembered. Two
// seconds covers the coarsest common timestamp granularity (FAT, some network
// filesystems); ext4 and XFS are finer.
const RacyWindow = 2 * time.Second

// Racy reports whether the file changed within window of now (ns, by the filesystem's
// clock: see Now).
func (id ID) Racy(now int64, window time.Duration) bool {
	return max(id.Mtime, id.Ctime) >= now-int64(window)
}

// Now is the filesystem's clock: the change time of f, a file just written, or the
// system's clock when that cannot be had.
func Now(f *os.File) int64 {
	if id, ok := Fstat(int(f.Fd())); ok {
		return id.Ctime
	}
	return time.Now().UnixNano()
}

// Append encodes id for a cache file.
func (id ID) Append(w *bincode.Writer) {
	w.Int(id.Size)
	w.Int(id.Mtime)
	w.Int(id.Ctime)
	w.Uint(id.Ino)
	w.Uint(id.Dev)
}

// Read decodes an ID that Append encoded.
func Read(r *bincode.Reader) ID {
	return ID{Size: r.Int(), Mtime: r.Int(), Ctime: r.Int(), Ino: r.Uint(), Dev: r.Uint()}
}

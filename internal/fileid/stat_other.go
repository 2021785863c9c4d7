//go:build !linux

package fileid

import "os"

// Stat: IDs are taken on Linux only (see the package doc).
func Stat(path string) (ID, bool) { return ID{}, false }

// Fstat: see Stat.
func Fstat(fd int) (ID, bool) { return ID{}, false }

// At: see Stat.
func At(dir *os.File, path string) (ID, bool) { return ID{}, false }

// FromInfo: see Stat.
func FromInfo(fi os.FileInfo) (ID, bool) { return ID{}, false }

// ReadAt: see Stat; the caller reads the file another way.
func ReadAt(dir *os.File, path string) (data []byte, id ID, ok bool) { return nil, ID{}, false }

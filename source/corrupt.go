package source

import "fmt"

// CorruptError is a file of the source cache whose content no longer has the hash it
// is stored under (a bad disk, a crash of something other than gantry, a hand edit).
// It is a fault of the machine, not of the element: the file has been removed, so the
// next fetch downloads it again.
type CorruptError struct {
	Path string
	Got  string // the sha256 it has now
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("the source cache's copy %s is corrupt (sha256 %s); it was removed: the next build fetches it again", e.Path, e.Got)
}

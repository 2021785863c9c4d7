//go:build !linux

package cache

import (
	"errors"
	"os"
)

// cloneFile is unsupported here: the caller copies.
func cloneFile(dst, src *os.File) error { return errors.ErrUnsupported }

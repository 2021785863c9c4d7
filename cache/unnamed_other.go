//go:build !linux

package cache

import (
	"errors"
	"os"
)

// openUnnamed is unsupported here: files go through a temporary name.
func openUnnamed(string, uint32) (*os.File, error) { return nil, errors.ErrUnsupported }

// linkUnnamed is never called here (openUnnamed gives no file).
func linkUnnamed(*os.File, string) error { return errors.ErrUnsupported }

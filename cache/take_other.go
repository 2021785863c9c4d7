//go:build !linux

package cache

import "io/fs"

// takeFile stores a copy of the file at p: moving it in safely needs Linux's
// leases (see take_linux.go).
func (c *Cache) takeFile(p string) (Digest, fs.FileMode, error) { return c.putFile(p) }

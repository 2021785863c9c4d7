//go:build !linux

package cache

// statIdentity: the outcome memo checks refs by identity on Linux only, where it is
// tested; elsewhere every ref is read.
func statIdentity(path string) (fileIdentity, bool) { return fileIdentity{}, false }

// fstatIdentity: see statIdentity.
func fstatIdentity(fd int) (fileIdentity, bool) { return fileIdentity{}, false }

//go:build !linux

package cache

import repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

// copyTrusted hashes what it copies here, as copyBlob does: the trusted copy
// is Linux's (stage_linux.go).
func (c *Cache) copyTrusted(f *repb.FileNode, p, rel string, opts CheckoutOptions) error {
	opts.Trusted = false
	return c.copyBlob(f, p, rel, opts)
}

// checkLinkedTrusted hashes the linked file here, as checkLinked does.
func (c *Cache) checkLinkedTrusted(d Digest, src, p string, _ uint32) error {
	return c.checkLinked(d, src, p)
}

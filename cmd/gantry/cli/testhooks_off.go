//go:build !gantrytesthooks

package cli

// gcAfterRemove is nil here: only a binary built for the end-to-end tests
// pauses gc mid-cleanup (testhooks.go).
func gcAfterRemove(*globalOptions) func() { return nil }

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package source

import "context"

// lockFile does not lock on this platform: concurrent fetches of one git mirror by
// several gantry processes are not guarded here.
func lockFile(ctx context.Context, p string) (unlock func(), err error) {
	return func() {}, nil
}

package sandbox

import (
	"context"
	"os"
	"path/filepath"
)

// runCommand prepares cfg and runs one command in it: a Runner used once.
func runCommand(ctx context.Context, cfg Config, command string) error {
	p, err := Prepare(cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Run(ctx, command)
}

// paths returns the build root, install root and sysroot as the commands see
// them for the resolved kind k: host paths for Host, paths inside the sandbox
// for Bwrap.
func paths(c Config, k Kind) (buildRoot, installRoot, sysroot string) {
	if k == Bwrap {
		return c.sandboxBuildRoot(), c.sandboxInstallRoot(), "/"
	}
	return c.BuildDir, c.InstallDir, c.Sysroot
}

// resolveInRoot returns the host path of name (absolute, as seen inside root)
// with every symlink resolved as if root were / (see resolveIn).
func resolveInRoot(root, name string) (string, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	rel, err := resolveIn(r, name)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}

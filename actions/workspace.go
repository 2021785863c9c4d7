package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/source"
)

// StageWorkspace fetches e's sources into c if need be and stages them, patches
// applied, into dir (gantry workspace open and reset): in a directory beside it, renamed
// into place once complete, so that a failure leaves nothing half-staged. What the
// fetches and stages say goes to log.
func StageWorkspace(ctx context.Context, c *cache.Cache, projectRoot string, e *element.Element, dir string, log io.Writer) error {
	if e.NoRef {
		return fmt.Errorf("opening a workspace for %s: a source has no ref: run `gantry track %s` first", e.Name, e.Name)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("opening a workspace for %s: %w", e.Name, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("opening a workspace for %s: %w", e.Name, err)
	}
	defer os.RemoveAll(tmp)
	idle, err := NetIdleTimeout()
	if err != nil {
		return err
	}
	fo := source.FetchOptions{SourcesDir: c.SourcesDir(), ProjectRoot: projectRoot, Log: log, IdleTimeout: idle}
	so := source.StageOptions{ProjectRoot: projectRoot, SourcesDir: c.SourcesDir(), BuildRoot: tmp, Log: log}
	fetch := func(s *source.Spec) error { return source.Fetch(ctx, s, fo) }
	if err := stageSources(ctx, e.Sources, so, fetch); err != nil {
		return fmt.Errorf("opening a workspace for %s: %w", e.Name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("opening a workspace for %s: %w", e.Name, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("opening a workspace for %s in %s: %w", e.Name, dir, err)
	}
	return nil
}

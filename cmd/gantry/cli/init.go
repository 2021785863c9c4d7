package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
)

type initOptions struct {
	*globalOptions
	name   string
	force  bool
	format outputFormat
	target string // the project's directory
}

// newInitCmd is `gantry init`; runF, when not nil, runs instead of runInit (tests).
func newInitCmd(g *globalOptions, runF func(*initOptions) error) *cobra.Command {
	opts := &initOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "init [DIR]",
		Short: "Create a new project with an element that builds",
		Args:  rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.target = g.startDir()
			if len(args) == 1 {
				opts.target = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return runInit(opts)
		},
	}
	cmd.Flags().StringVar(&opts.name, "name", "", "project name (default: the directory's name)")
	cmd.Flags().BoolVarP(&opts.force, "force", "f", false, "overwrite an existing project.toml")
	opts.format.register(cmd)
	return cmd
}

var nameChars = regexp.MustCompile(`[^a-z0-9._-]+`)

func runInit(opts *initOptions) error {
	if err := opts.format.check(); err != nil {
		return err
	}
	dir := opts.target
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	name := opts.name
	if name == "" {
		name = strings.Trim(nameChars.ReplaceAllString(strings.ToLower(filepath.Base(abs)), "-"), "-._")
		if name == "" {
			name = "project"
		}
	}
	if _, err := os.Stat(filepath.Join(abs, element.ProjectFile)); err == nil && !opts.force {
		return usagef("%s already exists: pass --force to overwrite it", filepath.Join(abs, element.ProjectFile))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("init: %w", err)
	}
	files := []struct {
		path string
		data string
		mode fs.FileMode
	}{
		{element.ProjectFile, fmt.Sprintf(initProject, name), 0o644},
		{"elements/hello.toml", initElement, 0o644},
		{"files/hello/hello.sh", initScript, 0o755},
	}
	written := []string{}
	for _, f := range files {
		p := filepath.Join(abs, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if _, err := os.Stat(p); err == nil && f.path != element.ProjectFile && !opts.force {
			continue // keep the user's files
		}
		if err := element.WriteFileAtomic(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		written = append(written, f.path)
	}
	if opts.format.json() {
		return writeJSONLine(opts.ios.Out, struct {
			Project   string   `json:"project"`
			Directory string   `json:"directory"`
			Written   []string `json:"written"` // relative to Directory
		}{name, abs, written})
	}
	opts.ios.Info(fmt.Sprintf("Created project %q in %s\nNext: gantry -C %s show, then gantry -C %s build", name, abs, dir, dir))
	return nil
}

const initProject = `name = %q
element-path = "elements"
default-targets = ["hello.toml"]

[variables]
prefix = "/usr"
`

const initElement = `kind = "manual"
description = "A first element: installs a script"

[[sources]]
kind = "local"
path = "files/hello"

[config]
install-commands = [
  "mkdir -p %{install-root}%{bindir}",
  "install -m 755 hello.sh %{install-root}%{bindir}/hello",
]
`

const initScript = `#!/bin/sh
echo "Hello from gantry"
`

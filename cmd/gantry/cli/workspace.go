package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/element"
)

func newWorkspaceCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workspace",
		Short: "Open, list, close or reset workspaces: elements built from a directory you edit",
		Long: `A workspace is a directory holding an element's staged sources (patches applied);
while it is open the element builds from it instead of its sources, and its cache key
comes from the directory's content: an edit rebuilds it and everything above it,
reverting the edit brings the old key (and artifact) back. The build directory is kept
between builds, so make recompiles only what changed. Workspaces are recorded in
.gantry/workspaces.json beside project.toml.`,
	}
	cmd.AddCommand(newWorkspaceOpenCmd(g, nil), newWorkspaceListCmd(g, nil), newWorkspaceCloseCmd(g, nil), newWorkspaceResetCmd(g, nil))
	return cmd
}

type workspaceOpenOptions struct {
	*globalOptions
	element string // ELEMENT
	into    string // DIR
}

// newWorkspaceOpenCmd is `gantry workspace open`; runF, when not nil, runs instead of
// runWorkspaceOpen (tests).
func newWorkspaceOpenCmd(g *globalOptions, runF func(*workspaceOpenOptions) error) *cobra.Command {
	opts := &workspaceOpenOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "open ELEMENT [DIR]",
		Short: "Stage an element's sources into a directory and build it from there",
		Long: `Open stages the element's sources (patches applied) into DIR (default:
workspaces/ELEMENT beside project.toml, or project.toml's workspace-dir), relative to
where gantry was started; the element then builds from DIR.

-C/--directory is the global option here too: where the project is looked up from.
The old spelling 'workspace open --directory DIR ELEMENT' of the workspace's directory
still works when DIR does not exist yet, with a warning.`,
		Args: elementArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.element = args[0]
			if len(args) == 2 {
				opts.into = args[1]
			} else if g.dir != "" {
				opts.oldDirectory()
			}
			if runF != nil {
				return runF(opts)
			}
			return runWorkspaceOpen(cmd.Context(), opts)
		},
	}
	g.mirrors.register(cmd, false) // it fetches the sources it opens
	// --chdir was this command's spelling of -C while --directory was the workspace's.
	cmd.Flags().StringVar(&g.dir, "chdir", "", "run as if started in `DIR`")
	cmd.Flags().MarkDeprecated("chdir", "use -C/--directory")
	return cmd
}

// oldDirectory reads a -C/--directory DIR given without the DIR argument the old way,
// as the workspace's directory, when DIR does not exist: the project cannot be looked
// up from there. Given twice (`-C PROJECT workspace open --directory DIR`), the one
// that exists is where the project is looked up from. An existing DIR keeps the
// global meaning; one without project.toml may have been meant as the workspace's,
// which a notice says.
func (o *workspaceOpenOptions) oldDirectory() {
	dirs := o.dirs
	if len(dirs) == 0 {
		dirs = []string{o.dir} // --chdir
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := dirs[i]
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		o.into, o.dir = dir, ""
		for _, d := range slices.Delete(slices.Clone(dirs), i, i+1) {
			o.dir = d // the last other one
		}
		o.ios.Message("warning", fmt.Sprintf("workspace open --directory %s: the workspace's directory is the second argument now (`gantry workspace open %s %s`); -C/--directory is where the project is looked up from, as for every command", dir, o.element, dir))
		return
	}
	if _, err := os.Stat(filepath.Join(o.dir, "project.toml")); err != nil {
		o.ios.Info(fmt.Sprintf("-C/--directory %s is where the project is looked up from; to open the workspace in %s, give it as the second argument (`gantry workspace open %s %s`)", o.dir, o.dir, o.element, o.dir))
	}
}

type workspaceListOptions struct {
	*globalOptions
	format outputFormat
}

// newWorkspaceListCmd is `gantry workspace list`; runF, when not nil, runs instead of
// runWorkspaceList (tests).
func newWorkspaceListCmd(g *globalOptions, runF func(*workspaceListOptions) error) *cobra.Command {
	opts := &workspaceListOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the open workspaces: element and directory",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runWorkspaceList(opts)
		},
	}
	opts.format.register(cmd)
	return cmd
}

func runWorkspaceList(opts *workspaceListOptions) error {
	if err := opts.format.check(); err != nil {
		return err
	}
	s := opts.session()
	if err := s.loadProject(); err != nil {
		return err
	}
	ws, err := element.LoadWorkspaces(s.project.Root)
	if err != nil {
		return err
	}
	if len(ws) == 0 {
		opts.ios.Info("no open workspaces: `gantry workspace open ELEMENT` opens one")
	}
	for _, w := range ws {
		if opts.format.json() {
			if err := writeJSONLine(opts.ios.Out, struct {
				Element   string `json:"element"`
				Directory string `json:"directory"`
			}{w.Element, w.Directory}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(opts.ios.Out, "%s\t%s\n", w.Element, w.Directory)
	}
	return nil
}

type workspaceCloseOptions struct {
	*globalOptions
	removeDir, all bool
	args           []string // ELEMENT...
}

// newWorkspaceCloseCmd is `gantry workspace close`; runF, when not nil, runs instead of
// runWorkspaceClose (tests).
func newWorkspaceCloseCmd(g *globalOptions, runF func(*workspaceCloseOptions) error) *cobra.Command {
	opts := &workspaceCloseOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "close [ELEMENT...]",
		Short: "Build elements from their sources again (the directory stays unless --remove-dir)",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runWorkspaceClose(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.removeDir, "remove-dir", false, "remove the workspace directory too")
	cmd.Flags().BoolVar(&opts.all, "all", false, "close every open workspace")
	return cmd
}

type workspaceResetOptions struct {
	*globalOptions
	soft bool
	args []string // ELEMENT...
}

// newWorkspaceResetCmd is `gantry workspace reset`; runF, when not nil, runs instead of
// runWorkspaceReset (tests).
func newWorkspaceResetCmd(g *globalOptions, runF func(*workspaceResetOptions) error) *cobra.Command {
	opts := &workspaceResetOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "reset ELEMENT...",
		Short: "Stage the sources into the workspace again, and start the next build afresh",
		Long: `Reset replaces the workspace directory's content with the element's sources, as
open staged them, and drops the build directory kept between builds. With --soft the
directory is left as it is: only the next build starts from a clean build directory.`,
		Args: elementArgs(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			if runF != nil {
				return runF(opts)
			}
			return runWorkspaceReset(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.soft, "soft", false, "keep the directory's content; only drop the kept build directory")
	return cmd
}

// workspaceState is the project's workspaces as a command changes them.
type workspaceState struct {
	s  *session
	ws []element.Workspace
}

func (g *globalOptions) workspaces() (*workspaceState, error) {
	s := g.session()
	if err := s.loadProject(); err != nil {
		return nil, err
	}
	ws, err := element.LoadWorkspaces(s.project.Root)
	if err != nil {
		return nil, err
	}
	return &workspaceState{s: s, ws: ws}, nil
}

func (st *workspaceState) find(name string) int {
	return slices.IndexFunc(st.ws, func(w element.Workspace) bool { return w.Element == name })
}

func (st *workspaceState) save() error { return element.SaveWorkspaces(st.s.project.Root, st.ws) }

// notOpen is the error for an element without a workspace.
func (st *workspaceState) notOpen(name string) error {
	return usagef("%s has no open workspace (`gantry workspace list` lists them; `gantry workspace open %s` opens one)", name, name)
}

// sourcesOf loads name as it is without its workspace: its sources, with their refs.
func (st *workspaceState) sourcesOf(name string) (*element.Element, error) {
	delete(st.s.project.Workspaces, name)
	g, err := st.s.loadGraph([]string{name})
	if err != nil {
		return nil, err
	}
	return g.Targets[0], nil
}

func runWorkspaceOpen(ctx context.Context, opts *workspaceOpenOptions) error {
	g, arg, dir := opts.globalOptions, opts.element, opts.into
	st, err := g.workspaces()
	if err != nil {
		return err
	}
	name := st.s.elementArg(arg)
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return usagef("%s is an element of the project junction %s holds: open its workspace in that project (`gantry -C DIR workspace open %s`, DIR the junction's local source), which a build through the junction then uses", name, name[:i], name[i+1:])
	}
	if i := st.find(name); i >= 0 {
		return usagef("%s already has a workspace, in %s (`gantry workspace close %s` closes it)", name, st.ws[i].Directory, name)
	}
	e, err := st.sourcesOf(name)
	if err != nil {
		return err
	}
	if dir == "" {
		base := st.s.project.WorkspaceDir
		if !filepath.IsAbs(base) {
			base = filepath.Join(st.s.project.Root, base)
		}
		dir = filepath.Join(base, element.WorkspaceDirName(name))
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return usagef("opening a workspace for %s: %s is not empty: give another as the second argument (`gantry workspace open %s DIR`), or empty it", name, dir, arg)
	}
	c, err := st.s.openCache()
	if err != nil {
		return err
	}
	if err := actions.StageWorkspace(ctx, c, st.s.project.Root, e, dir, st.s.opts.ios.Lines()); err != nil {
		return err
	}
	st.ws = append(st.ws, element.Workspace{Element: name, Directory: dir})
	if err := st.save(); err != nil {
		return err
	}
	g.ios.Info(fmt.Sprintf("opened a workspace for %s in %s: %s now builds from it", name, dir, name))
	return nil
}

// dropBuildDir removes the build directory a workspace element keeps between builds.
func dropBuildDir(s *session, name string) error {
	if err := os.RemoveAll(element.WorkspaceBuildDir(s.cacheRoot(), s.project.Name, name)); err != nil {
		return fmt.Errorf("removing the kept build directory of %s: %w", name, err)
	}
	return nil
}

func runWorkspaceClose(opts *workspaceCloseOptions) error {
	g, args, all, removeDir := opts.globalOptions, opts.args, opts.all, opts.removeDir
	st, err := g.workspaces()
	if err != nil {
		return err
	}
	if all == (len(args) > 0) {
		return usagef("workspace close: name the elements, or give --all")
	}
	var names []string
	for _, a := range args {
		names = append(names, st.s.elementArg(a))
	}
	if all {
		for _, w := range st.ws {
			names = append(names, w.Element)
		}
	}
	var closed []element.Workspace
	for _, name := range names {
		i := st.find(name)
		if i < 0 {
			return st.notOpen(name)
		}
		closed = append(closed, st.ws[i])
		st.ws = slices.Delete(st.ws, i, i+1)
	}
	if err := st.save(); err != nil {
		return err
	}
	for _, w := range closed {
		if err := dropBuildDir(st.s, w.Element); err != nil {
			return err
		}
		if removeDir {
			if err := os.RemoveAll(w.Directory); err != nil {
				return fmt.Errorf("removing the workspace directory %s of %s: %w", w.Directory, w.Element, err)
			}
		}
		msg := fmt.Sprintf("closed the workspace of %s: it builds from its sources again", w.Element)
		if !removeDir {
			msg += " (" + w.Directory + " is left as it is)"
		}
		g.ios.Info(msg)
	}
	return nil
}

func runWorkspaceReset(ctx context.Context, opts *workspaceResetOptions) error {
	g, args, soft := opts.globalOptions, opts.args, opts.soft
	st, err := g.workspaces()
	if err != nil {
		return err
	}
	for _, a := range args {
		name := st.s.elementArg(a)
		i := st.find(name)
		if i < 0 {
			return st.notOpen(name)
		}
		if err := dropBuildDir(st.s, name); err != nil {
			return err
		}
		if soft {
			g.ios.Info(fmt.Sprintf("reset %s: its next build starts from a clean build directory", name))
			continue
		}
		e, err := st.sourcesOf(name)
		if err != nil {
			return err
		}
		c, err := st.s.openCache()
		if err != nil {
			return err
		}
		dir := st.ws[i].Directory
		// Staged beside it, then swapped in: the edits are lost only once the sources
		// are staged.
		aside, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".edited-")
		if err != nil {
			return fmt.Errorf("resetting the workspace of %s: %w", name, err)
		}
		old := filepath.Join(aside, filepath.Base(dir))
		if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			os.Remove(aside)
			return fmt.Errorf("resetting the workspace of %s: %w", name, err)
		}
		if err := actions.StageWorkspace(ctx, c, st.s.project.Root, e, dir, st.s.opts.ios.Lines()); err != nil {
			if rerr := os.Rename(old, dir); rerr != nil {
				err = errors.Join(err, fmt.Errorf("the edited workspace is in %s", old))
			}
			return err
		}
		if err := os.RemoveAll(aside); err != nil {
			return fmt.Errorf("resetting the workspace of %s: removing the edited copy %s: %w", name, old, err)
		}
		g.ios.Info(fmt.Sprintf("reset the workspace of %s in %s to its sources", name, dir))
	}
	return nil
}

// elementArgs accepts between lo and hi (-1: any number) element arguments.
func elementArgs(lo, hi int) cobra.PositionalArgs { return argCount(lo, hi, "name the element") }

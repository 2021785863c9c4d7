package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
)

// Shell completion (`gantry completion bash|zsh|fish`): cobra completes the
// subcommands and flags; element arguments complete to the project's element names
// (after JUNCTION:, to the names of the project the junction holds), --remote to the configured remotes' URLs,
// and the flags with a fixed set of values (--deps, --on-error, --ui, --sandbox, --format) to those values.

// completeElementArgs gives every command whose usage names an ELEMENT a completion
// of element names: each argument for "[ELEMENT...]" and "GLOB...", the first one
// only for "ELEMENT DIR" and "ELEMENT [-- COMMAND...]".
func completeElementArgs(opts *globalOptions, cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		completeElementArgs(opts, sub)
	}
	completeFlagValues(cmd)
	if cmd.Flags().Lookup("remote") != nil {
		cmd.RegisterFlagCompletionFunc("remote", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return opts.remoteURLs(), cobra.ShellCompDirectiveNoFileComp
		})
	}
	if !strings.Contains(cmd.Use, "ELEMENT") || cmd.ValidArgsFunction != nil {
		return
	}
	every := strings.Contains(cmd.Use, "ELEMENT...") || strings.Contains(cmd.Use, "GLOB...")
	cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !every {
			return nil, cobra.ShellCompDirectiveDefault // a directory, a command: the shell's own completion
		}
		return opts.elementNamesWithPrefix(toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// elementNamesWithPrefix lists the project's elements whose names start with prefix;
// none when no project loads (completion must never print an error).
func (o *globalOptions) elementNamesWithPrefix(prefix string) []string {
	s := o.session()
	if err := s.loadProject(); err != nil {
		return nil
	}
	all, err := s.project.ElementNames()
	if i := strings.LastIndexByte(prefix, ':'); i >= 0 { // JUNCTION:ELEMENT
		all, err = element.ElementNamesThrough(s.project, s.lock, prefix[:i+1])
	}
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range all {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// remoteURLs lists the remotes of the user configuration and project.toml, those
// without credentials in their URL (completion must not print a password).
func (o *globalOptions) remoteURLs() []string {
	s := o.session()
	if err := s.loadProject(); err != nil {
		return nil
	}
	specs, err := s.remotes(&remoteFlags{}, false)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range specs {
		if r.Display() == r.URL && !slices.Contains(out, r.URL) {
			out = append(out, r.URL)
		}
	}
	return out
}

// completeFlagValues completes the values of cmd's own flags that take one of a fixed
// set: the values the command accepts (fetch's --deps plan, pull's and push's no
// build, the worker's sandboxes, show's --format json besides its templates).
func completeFlagValues(cmd *cobra.Command) {
	values := map[string][]string{
		"deps":     {"none", "run", "build", "all"},
		"on-error": {"continue", "quit", "terminate"},
		"ui":       {"auto", "tui", "plain", "json"},
		"sandbox":  {"auto", "host", "bwrap"},
		"format":   {"text", "json"},
	}
	switch cmd.Name() {
	case "fetch":
		values["deps"] = []string{"plan", "none", "run", "build", "all"}
	case "pull", "push":
		values["deps"] = []string{"none", "run", "all"}
	case "worker":
		values["sandbox"] = []string{"bwrap", "host"}
	case "show":
		values["format"] = []string{"json"} // or a line template: nothing to offer
	}
	for name, vals := range values {
		if cmd.Flags().Lookup(name) == nil && cmd.PersistentFlags().Lookup(name) == nil {
			continue // not its own flag (an inherited one is completed where it is defined)
		}
		_ = cmd.RegisterFlagCompletionFunc(name, func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
			var out []string
			for _, v := range vals {
				if strings.HasPrefix(v, prefix) {
					out = append(out, v)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		})
	}
}

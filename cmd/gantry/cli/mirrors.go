package cli

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/source"
)

// mirrorFlags are the flags of the commands that download sources: which mirror fetch
// tries first, and whether track asks the mirrors too. They live in globalOptions, as
// the project's mirrors are ordered when it loads (useMirrors).
type mirrorFlags struct {
	defaultMirror    string
	trackWithMirrors bool
}

// register adds --default-mirror to cmd, and --track-with-mirrors when it tracks.
func (f *mirrorFlags) register(cmd *cobra.Command, tracks bool) {
	cmd.Flags().StringVar(&f.defaultMirror, "default-mirror", "", "try the mirror `NAME` first when fetching sources (default: the user configuration's default-mirror)")
	if tracks {
		cmd.Flags().BoolVar(&f.trackWithMirrors, "track-with-mirrors", false, "track from the mirrors too (mirrors first, as fetch does), not upstream alone")
	}
}

// useMirrors orders the project's mirrors and the user configuration's: --default-mirror
// first (a name no mirror has is bad usage), else the user configuration's
// default-mirror when the project has a mirror of that name (it may be another
// project's).
func useMirrors(p *element.Project, user *element.UserConfig, f mirrorFlags) error {
	if f.defaultMirror != "" {
		if err := p.UseMirrors(user.Mirrors, f.defaultMirror); err != nil {
			return usagef("--default-mirror: %v", err)
		}
		return nil
	}
	def := user.DefaultMirror
	named := func(m source.Mirror) bool { return m.Name == def }
	if !slices.ContainsFunc(user.Mirrors, named) && !slices.ContainsFunc(p.Mirrors, named) {
		def = ""
	}
	return p.UseMirrors(user.Mirrors, def)
}

package cli

import (
	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
)

// remoteFlags are --remote and --no-remote, on build, pull and push.
type remoteFlags struct {
	urls []string
	none bool
}

func (f *remoteFlags) register(cmd *cobra.Command, what string) {
	cmd.Flags().StringArrayVar(&f.urls, "remote", nil, "use this remote artifact cache instead of the configured ones ("+what+"; repeatable)")
	cmd.Flags().BoolVar(&f.none, "no-remote", false, "use no remote artifact cache")
}

// remotes resolves the session's remotes: --no-remote, else --remote (pushed to only
// by the push command), else the user config's [[remote]] then project.toml's.
func (s *session) remotes(f *remoteFlags, push bool) ([]remote.Spec, error) {
	switch {
	case f.none && len(f.urls) > 0:
		return nil, usagef("--remote and --no-remote cannot be used together")
	case f.none:
		return nil, nil
	case len(f.urls) > 0:
		var specs []remote.Spec
		for _, u := range f.urls {
			if err := element.CheckRemoteURL(u); err != nil {
				return nil, usagef("--remote: %v", err)
			}
			specs = append(specs, remote.Spec{URL: u, Push: push})
		}
		return specs, nil
	}
	return append(append([]remote.Spec{}, s.user.Remotes...), s.project.Remotes...), nil
}

// newRemotes is the session's remotes of specs (actions.Remotes), with the session's
// network retries and backoff; warn is told of a remote found down before it starts.
func (s *session) newRemotes(specs []remote.Spec, warn func(string)) (*actions.Remotes, error) {
	return actions.NewRemotes(s.project.Name, specs, s.networkRetries(), s.retryBackoff, warn)
}

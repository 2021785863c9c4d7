package cli

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/actions"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/element"
)

// remoteFlags are --remote and --no-remote, on build, pull and push, and build's
// --remote-push.
type remoteFlags struct {
	urls []string
	none bool
	push bool // --remote-push: the --remote remotes are pushed to (build)
}

func (f *remoteFlags) register(cmd *cobra.Command, what string) {
	cmd.Flags().StringArrayVar(&f.urls, "remote", nil, "use this remote artifact cache instead of the configured ones ("+what+"; repeatable; its token in $GANTRY_REMOTE_TOKEN or $GANTRY_REMOTE_TOKEN_FILE)")
	cmd.Flags().BoolVar(&f.none, "no-remote", false, "use no remote artifact cache")
}

// registerPush adds --remote-push (build: push what the session builds to the
// --remote remotes).
func (f *remoteFlags) registerPush(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.push, "remote-push", false, "push what this session builds or pulls to the --remote remotes")
}

// The variables that hold the bearer token of the --remote remotes: a token on the
// command line would show in `ps`.
const (
	envRemoteToken     = "GANTRY_REMOTE_TOKEN"
	envRemoteTokenFile = "GANTRY_REMOTE_TOKEN_FILE"
)

// remotes resolves the session's remotes: --no-remote, else --remote (pushed to by
// the push command, and by build with --remote-push), else the user config's
// [[remote]] then project.toml's.
func (s *session) remotes(f *remoteFlags, push bool) ([]remote.Spec, error) {
	switch {
	case f.none && len(f.urls) > 0:
		return nil, usagef("--remote and --no-remote cannot be used together")
	case f.push && len(f.urls) == 0:
		return nil, usagef("--remote-push pushes to the --remote remotes: give --remote URL")
	case f.none:
		return nil, nil
	case len(f.urls) > 0:
		tokenEnv, tokenFile, err := remoteTokenFromEnv()
		if err != nil {
			return nil, err
		}
		var specs []remote.Spec
		for _, u := range f.urls {
			if err := element.CheckRemoteURL(u); err != nil {
				return nil, usagef("--remote: %v", err)
			}
			if p, err := url.Parse(u); err == nil && p.User != nil {
				s.opts.ios.Message("warning", "--remote "+remote.RedactURL(u)+": the credentials in its URL show in `ps` to every user of this machine: give the token in "+envRemoteToken+" or "+envRemoteTokenFile+" instead")
			}
			specs = append(specs, remote.Spec{URL: u, Push: push || f.push, TokenEnv: tokenEnv, TokenFile: tokenFile})
		}
		return specs, nil
	}
	return append(append([]remote.Spec{}, s.user.Remotes...), s.project.Remotes...), nil
}

// remoteTokenFromEnv is the token of the --remote remotes: the name of the variable
// holding it (GANTRY_REMOTE_TOKEN), or the file GANTRY_REMOTE_TOKEN_FILE names; at
// most one of them. It goes only to the remotes named on the command line: a
// configured [[remote]] has its own token-file.
func remoteTokenFromEnv() (tokenEnv, tokenFile string, err error) {
	tok, file := os.Getenv(envRemoteToken), os.Getenv(envRemoteTokenFile)
	switch {
	case tok != "" && file != "":
		return "", "", usagef("%s and %s are both set: set one of them", envRemoteToken, envRemoteTokenFile)
	case tok != "":
		if t := strings.TrimSpace(tok); t == "" || strings.ContainsAny(t, "\r\n") {
			return "", "", usagef("%s: want one token on one line", envRemoteToken)
		}
		return envRemoteToken, "", nil
	case file != "":
		if _, err := os.Stat(file); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", "", usagef("%s=%s: %v", envRemoteTokenFile, file, err)
		}
		return "", file, nil
	}
	return "", "", nil
}

// newRemotes is the session's remotes of specs (actions.Remotes), with the session's
// network retries and backoff; warn is told of a remote found down before it starts.
func (s *session) newRemotes(specs []remote.Spec, warn func(string)) (*actions.Remotes, error) {
	if _, err := actions.NetIdleTimeout(); err != nil {
		return nil, usagef("%v", err) // a bad GANTRY_NET_IDLE_TIMEOUT
	}
	return actions.NewRemotes(s.project.Name, specs, s.networkRetries(), s.retryBackoff, warn)
}

package cli

import "github.com/spf13/cobra"

// newEnvironmentTopic is `gantry help environment`: every GANTRY_* variable gantry
// reads or sets (a test checks that none is missing here or in the README).
func newEnvironmentTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "environment",
		Short: "The environment variables gantry reads",
		Long: `The environment variables gantry reads. A flag wins over its variable, a variable
over the user configuration. An invalid value is bad usage (exit 2), named by its
variable.

Where things are
  GANTRY_CACHE_DIR          the local cache directory (--cache-dir; default
                            $XDG_CACHE_HOME/gantry)
  GANTRY_CONFIG             the user configuration file (--config; default
                            $XDG_CONFIG_HOME/gantry/config.toml)

The session
  GANTRY_UI                 auto, tui, plain or json (--ui)
  GANTRY_ON_ERROR           continue, quit or terminate (--on-error, -k)
  GANTRY_BUILDERS           build jobs at once (--builders, -j)
  GANTRY_FETCHERS           download jobs at once (--fetchers)
  GANTRY_PUSHERS            push jobs at once (--pushers)
  GANTRY_MAX_JOBS           parallelism inside one build, %{max-jobs} (--max-jobs)
  GANTRY_SANDBOX            auto, host or bwrap (--sandbox)
  GANTRY_CACHE_QUOTA        keep the cache under this size: 10G, 50% (--cache-quota)

Remotes (CI)
  GANTRY_REMOTE_TOKEN       the bearer token of the --remote remotes (never a flag:
                            ps shows flags to every user)
  GANTRY_REMOTE_TOKEN_FILE  a file holding that token (give one of the two)

Network
  GANTRY_NET_IDLE_TIMEOUT   a download or remote exchange that receives nothing for
                            this long fails and is retried (a Go duration; 1m)
  GANTRY_NET_DEADLINE       a source download not finished after this long fails (4h)
  GANTRY_RETRY_BACKOFF      the base of the network retries' backoff (a Go duration;
                            retries wait base, 2·base, 4·base …, no jitter)
  GANTRY_MAX_DOWNLOAD_SIZE  the largest source download (32G; 500M, 10G …)
  GANTRY_MAX_UNPACKED_SIZE  the most an archive may unpack to (32G: a decompression bomb)

Set by gantry (not read from the user)
  GANTRY_SYSROOT, GANTRY_BUILD_ROOT, GANTRY_INSTALL_ROOT
                            for a host build's commands and 'gantry shell': where the
                            dependencies, the sources and the install root are
  GANTRY_CACHE_SESSION      for its job processes: the session they belong to

Others gantry honours: NO_COLOR (no colour), CI and GITHUB_ACTIONS (CI annotations in
plain output: docs/usage.md), XDG_CACHE_HOME and XDG_CONFIG_HOME, GOGC and GOMEMLIMIT.`,
	}
}

// Package exec is gantry's REAPI v2 execution client (DESIGN.md §12): builds run as
// Actions on a remote execution service. Importers name it rexec.
package exec

import (
	"fmt"
	"maps"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
)

// Config is the remote execution of a session: [remote-execution] of project.toml and
// the user config (the user's keys win), or --remote-executor. The zero Config is no
// remote execution. Services are remote.Spec values without push (a service with URL
// "" is not configured); their file paths are absolute.
type Config struct {
	// Execution is execution-service; URL "" with ActionCache set is the cache-only
	// mode (CacheOnly): builds run locally, their results are looked up and recorded
	// in the action cache.
	Execution remote.Spec
	// Storage is storage-service, the CAS the actions' inputs and outputs go through;
	// URL "": the execution service's (StorageService).
	Storage remote.Spec
	// ActionCache is action-cache-service; URL "": the execution service's
	// (ActionCacheService).
	ActionCache remote.Spec
	// Platform are the properties of every Action ([remote-execution.platform]):
	// DefaultPlatform with the configured ones over them. An element's own
	// properties go over these (PlatformFor).
	Platform map[string]string
	// RemoteJobs is how many actions are in flight at once (remote-jobs).
	RemoteJobs int
	// Wrap is "" or WrapBwrap: the command runs in bwrap with the input root as /,
	// for executors that run it in a plain directory.
	Wrap string
	// Timeout is Action.timeout of an element that sets none (timeout).
	Timeout time.Duration
	// From says where the execution service was configured, for messages:
	// "project.toml", the user config's path, or "--remote-executor".
	From string
}

// Defaults of the keys a configuration leaves out.
const (
	DefaultRemoteJobs = 32
	// DefaultTimeout is generous — a big element (a compiler, a browser) may build for
	// hours on one worker — but no more than the usual servers accept by default:
	// BuildGrid and Buildbarn refuse an Action.timeout above 7200 s unless configured
	// otherwise. A longer build sets timeout, in [remote-execution] or the element.
	DefaultTimeout = 2 * time.Hour
	// WrapBwrap is the one value of wrap.
	WrapBwrap = "bwrap"
)

// DefaultPlatform is the platform properties an Action has unless configured:
// OSFamily and ISA as Bazel and BuildStream name them.
func DefaultPlatform() map[string]string {
	return map[string]string{"OSFamily": "linux", "ISA": "x86-64"}
}

// Enabled says whether builds run remotely (an execution service is configured).
func (c *Config) Enabled() bool { return c.Execution.URL != "" }

// CacheOnly says whether builds run locally with their results looked up and
// recorded in the action-cache service: an action-cache service without an
// execution service, as BuildStream does.
func (c *Config) CacheOnly() bool { return c.Execution.URL == "" && c.ActionCache.URL != "" }

// StorageService is the CAS of the actions: storage-service, else the execution
// service.
func (c *Config) StorageService() remote.Spec {
	if c.Storage.URL != "" {
		return c.Storage
	}
	return c.Execution
}

// ActionCacheService is the action cache: action-cache-service, else the execution
// service (URL "" when neither is configured).
func (c *Config) ActionCacheService() remote.Spec {
	if c.ActionCache.URL != "" {
		return c.ActionCache
	}
	return c.Execution
}

// Services are the configured services by key name, in order, for the reachability
// check before a session.
func (c *Config) Services() []NamedService {
	var out []NamedService
	for _, s := range []NamedService{{"execution-service", c.Execution}, {"storage-service", c.Storage}, {"action-cache-service", c.ActionCache}} {
		if s.Spec.URL != "" {
			out = append(out, s)
		}
	}
	return out
}

// NamedService is a configured service and its key.
type NamedService struct {
	Key  string // "execution-service", "storage-service", "action-cache-service"
	Spec remote.Spec
}

// PlatformFor is the platform of an element's Action: the configured properties
// with the element's over them ("" removes a property).
func (c *Config) PlatformFor(element map[string]string) map[string]string {
	p := maps.Clone(c.Platform)
	if p == nil {
		p = DefaultPlatform()
	}
	for k, v := range element {
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
	}
	return p
}

// TimeoutFor is the Action.timeout of an element setting t (0: none set).
func (c *Config) TimeoutFor(t time.Duration) time.Duration {
	switch {
	case t > 0:
		return t
	case c.Timeout > 0:
		return c.Timeout
	}
	return DefaultTimeout
}

// Jobs is RemoteJobs, or DefaultRemoteJobs when unset.
func (c *Config) Jobs() int {
	if c.RemoteJobs > 0 {
		return c.RemoteJobs
	}
	return DefaultRemoteJobs
}

// CheckWrap validates a wrap value.
func CheckWrap(w string) error {
	if w != "" && w != WrapBwrap {
		return fmt.Errorf("%q is not a wrapper gantry knows: use %q (or leave wrap out when the executor runs the command with the input root as /)", w, WrapBwrap)
	}
	return nil
}

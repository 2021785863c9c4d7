package element

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/cache"
	"github.com/gantry-build/gantry/cache/remote"
	"github.com/gantry-build/gantry/source"
)

// OnError is the scheduler's policy when a job fails.
type OnError string

const (
	OnErrorContinue  OnError = "continue"
	OnErrorQuit      OnError = "quit"
	OnErrorTerminate OnError = "terminate"
	// OnErrorAsk holds the session on a failure until the user decides (continue,
	// quit, terminate or retry). Only the interactive display sets it; users cannot.
	OnErrorAsk OnError = "ask"
)

// ParseOnError validates an on-error value.
func ParseOnError(s string) (OnError, bool) {
	switch OnError(s) {
	case OnErrorContinue, OnErrorQuit, OnErrorTerminate:
		return OnError(s), true
	}
	return "", false
}

// SchedulerConfig holds the scheduler limits of the user configuration.
type SchedulerConfig struct {
	Builders       int    `toml:"builders"`
	Fetchers       int    `toml:"fetchers"`
	Pushers        int    `toml:"pushers"`
	NetworkRetries *int   `toml:"network-retries"`
	OnError        string `toml:"on-error"`
}

// CacheConfig holds the local cache settings.
type CacheConfig struct {
	Dir   string `toml:"dir"`
	Quota string `toml:"quota"`
}

// UserConfig is $XDG_CONFIG_HOME/gantry/config.toml.
type UserConfig struct {
	Path      string          `toml:"-"`
	Scheduler SchedulerConfig `toml:"scheduler"`
	Cache     CacheConfig     `toml:"cache"`
	Remotes   []remote.Spec   `toml:"remote"`
	// RemoteExecution is [remote-execution]: its keys win over project.toml's
	// (RemoteExecutionConfig); nil: none.
	RemoteExecution *RemoteExecution `toml:"remote-execution"`
	// Worker is [worker]: `gantry worker`'s defaults (nil: none).
	Worker *WorkerConfig `toml:"worker"`
	UI     struct {
		Mode  string `toml:"mode"`
		Color *bool  `toml:"color"`
	} `toml:"ui"`
	MaxJobs int `toml:"max-jobs"`
	// Projects holds settings per project, by project name: [projects.NAME.options],
	// and strict = false for non-strict sessions (ResolveNonStrict; nil: strict).
	Projects map[string]struct {
		Options map[string]any `toml:"options"`
		Strict  *bool          `toml:"strict"`
	} `toml:"projects"`
	// ProjectOptions are the option settings of Projects, checked, by project name.
	ProjectOptions map[string][]OptionSetting `toml:"-"`
	// Mirrors are tried before the project's; DefaultMirror names the one tried first.
	Mirrors       []source.Mirror `toml:"mirrors"`
	DefaultMirror string          `toml:"default-mirror"`
}

var userConfigKeys = map[string][]string{
	"":          {"scheduler", "cache", "remote", "remote-execution", "ui", "max-jobs", "projects", "mirrors", "default-mirror", "worker"},
	"projects":  {"options", "strict"},
	"scheduler": {"builders", "fetchers", "pushers", "network-retries", "on-error"},
	"cache":     {"dir", "quota"},
	"remote":    remoteKeys,
	"ui":        {"mode", "color"},
	"mirrors":   mirrorKeys,
}

// Strict says whether sessions of project are strict by the user configuration: true
// unless [projects.NAME] sets strict = false.
func (c *UserConfig) Strict(project string) bool {
	if s := c.Projects[project].Strict; s != nil {
		return *s
	}
	return true
}

// DefaultUserConfigPath returns $XDG_CONFIG_HOME/gantry/config.toml (~/.config by default).
func DefaultUserConfigPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "gantry", "config.toml")
}

// DefaultCacheDir returns $XDG_CACHE_HOME/gantry (~/.cache/gantry by default).
func DefaultCacheDir() string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "gantry")
}

// LoadUserConfig reads the user configuration. A missing file is an empty configuration
// unless explicit is set (the user named it with --config).
func LoadUserConfig(path string, explicit bool) (*UserConfig, error) {
	c := &UserConfig{Path: path}
	doc, err := decodeTOML(path, path, c)
	if err != nil {
		var pe *ProjectError
		if !explicit && errors.As(err, &pe) {
			if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
				return &UserConfig{Path: path}, nil
			}
		}
		return nil, err
	}
	if err := doc.unknownKeys(func(parent []string) []string {
		if len(parent) == 0 {
			return userConfigKeys[""]
		}
		if parent[0] == "remote-execution" {
			return remoteExecCandidates(parent)
		}
		if parent[0] == "worker" {
			return workerCandidates(parent)
		}
		return userConfigKeys[parent[0]]
	}); err != nil {
		return nil, err
	}
	if err := checkRemotes(doc, c.Remotes, filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := checkRemoteExecution(doc, c.RemoteExecution, filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := checkWorker(doc, c.Worker, filepath.Dir(path)); err != nil {
		return nil, err
	}
	if c.ProjectOptions, err = userOptionSettings(doc, c); err != nil {
		return nil, err
	}
	if err := checkMirrors(doc, c.Mirrors); err != nil {
		return nil, err
	}
	if c.Scheduler.OnError != "" {
		if _, ok := ParseOnError(c.Scheduler.OnError); !ok {
			return nil, doc.valueError("scheduler.on-error", "%q is not one of continue, quit, terminate", c.Scheduler.OnError)
		}
	}
	if c.Cache.Quota != "" {
		// The share of a disk is measured where the cache is; "/" checks the syntax.
		if _, err := cache.ParseQuota(c.Cache.Quota, "/"); err != nil {
			return nil, doc.valueError("cache.quota", "%v", err)
		}
	}
	for _, k := range []struct {
		name string
		v    int
	}{{"builders", c.Scheduler.Builders}, {"fetchers", c.Scheduler.Fetchers}, {"pushers", c.Scheduler.Pushers}} {
		if k.v < 0 {
			return nil, doc.valueError("scheduler."+k.name, "must be at least 1, got %d", k.v)
		}
	}
	return c, nil
}

// Defaults that do not oversubscribe the machine: builders × %{max-jobs} stays at
// about the number of CPUs. BuildStream runs 4 builders with max-jobs = CPUs, so
// four big builds at once run 4×CPUs compiler processes; gantry keeps 4 builders
// (fewer on a smaller machine) and shares the CPUs among them.

// DefaultBuilders is how many builds run at once when not configured: 4, or the
// number of CPUs if fewer.
func DefaultBuilders(cpus int) int { return max(1, min(4, cpus)) }

// DefaultMaxJobs is the value of %{max-jobs} when not configured: the CPUs shared
// among the builders that run at once, at least 1.
func DefaultMaxJobs(cpus, builders int) int { return max(1, cpus/max(1, builders)) }

// optionSettingValue is the value of an option setting written in TOML at key: a
// string, a boolean (a bool option) or a list of strings (a flags option, joined with
// commas); whether the option takes it is checked when its project is loaded.
func optionSettingValue(doc *tomlDoc, key string, v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return fmt.Sprint(v), nil
	case []any:
		flags := make([]string, len(v))
		for i, f := range v {
			s, ok := f.(string)
			if !ok {
				return "", doc.valueError(key, "expected a list of strings, found %s in it", tomlTypeName(f))
			}
			flags[i] = s
		}
		return strings.Join(flags, ","), nil
	}
	return "", doc.valueError(key, "expected a string, a boolean or a list of strings, found %s", tomlTypeName(v))
}

// userOptionSettings reads [projects.NAME.options] as settings, each with its line. A
// value is a string, a boolean (a bool option) or a list of strings (a flags option);
// whether the project declares the option is checked when the project is loaded.
func userOptionSettings(doc *tomlDoc, c *UserConfig) (map[string][]OptionSetting, error) {
	var out map[string][]OptionSetting
	for _, project := range sortedKeys(c.Projects) {
		opts := c.Projects[project].Options
		for _, name := range sortedKeys(opts) {
			key := "projects." + project + ".options." + name
			value, err := optionSettingValue(doc, key, opts[name])
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = map[string][]OptionSetting{}
			}
			out[project] = append(out[project], OptionSetting{Name: name, Value: value, File: doc.display, Line: doc.lineOf(key)})
		}
	}
	return out, nil
}

package element

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gantry-build/gantry/cache/remote"
	rexec "github.com/gantry-build/gantry/remote/exec"
)

// RemoteExecution is a [remote-execution] table as one file writes it (project.toml
// or the user config), checked: service file paths absolute, Timeout parsed. A nil
// field is a key the file leaves out. Merge it with RemoteExecutionConfig.
type RemoteExecution struct {
	ExecutionService   *remote.Spec      `toml:"execution-service"`
	StorageService     *remote.Spec      `toml:"storage-service"`
	ActionCacheService *remote.Spec      `toml:"action-cache-service"`
	Platform           map[string]string `toml:"platform"`
	RemoteJobs         *int              `toml:"remote-jobs"`
	Wrap               *string           `toml:"wrap"`
	TimeoutText        *string           `toml:"timeout"`
	Timeout            time.Duration     `toml:"-"`
	// File is the file it was read from, as shown to the user.
	File string `toml:"-"`
}

// remoteExecKeys are the keys of [remote-execution]; serviceKeys those of each of
// its services (a [[remote]]'s but push and sources).
var (
	remoteExecKeys = []string{"execution-service", "storage-service", "action-cache-service", "platform", "remote-jobs", "wrap", "timeout"}
	serviceKeys    = slices.DeleteFunc(slices.Clone(remoteKeys), func(k string) bool { return k == "push" || k == "sources" })
)

// remoteExecCandidates are the known keys under parent in a [remote-execution] table
// (parent[0] == "remote-execution"); nil for any other parent.
func remoteExecCandidates(parent []string) []string {
	switch {
	case len(parent) == 1:
		return remoteExecKeys
	case len(parent) == 2 && parent[1] != "platform":
		return serviceKeys
	}
	return nil
}

// checkRemoteExecution validates the [remote-execution] table of a file (nil: none)
// and makes its file paths absolute, relative to dir (the directory holding it).
func checkRemoteExecution(doc *tomlDoc, r *RemoteExecution, dir string) error {
	if r == nil {
		return nil
	}
	r.File = doc.display
	if err := doc.checkTables("remote-execution", "remote-execution.platform", "remote-execution.execution-service",
		"remote-execution.storage-service", "remote-execution.action-cache-service"); err != nil {
		return err
	}
	for _, s := range []struct {
		key  string
		spec *remote.Spec
	}{{"execution-service", r.ExecutionService}, {"storage-service", r.StorageService}, {"action-cache-service", r.ActionCacheService}} {
		if s.spec == nil {
			continue
		}
		if err := checkService(doc, "remote-execution."+s.key, s.spec, dir); err != nil {
			return err
		}
	}
	if r.RemoteJobs != nil && *r.RemoteJobs < 1 {
		return doc.valueError("remote-execution.remote-jobs", "must be at least 1, got %d", *r.RemoteJobs)
	}
	if r.Wrap != nil {
		if err := rexec.CheckWrap(*r.Wrap); err != nil {
			return doc.valueError("remote-execution.wrap", "%v", err)
		}
	}
	if r.TimeoutText != nil {
		t, err := parseActionTimeout(*r.TimeoutText)
		if err != nil {
			return doc.valueError("remote-execution.timeout", "%v", err)
		}
		r.Timeout = t
	}
	for _, name := range sortedKeys(r.Platform) {
		if strings.TrimSpace(name) == "" {
			return doc.valueError("remote-execution.platform", "a platform property needs a name")
		}
	}
	return nil
}

// parseActionTimeout reads an action timeout: a Go duration ("90m", "2h30m") above 0.
func parseActionTimeout(s string) (time.Duration, error) {
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 {
		return 0, fmt.Errorf("%q is not a duration above 0: write one like \"90m\" or \"6h\"", s)
	}
	return t, nil
}

// checkService validates one service of [remote-execution] at key: a grpc(s)://
// HOST:PORT url, files that exist, a client certificate with its key, TLS settings
// only with grpcs://.
func checkService(doc *tomlDoc, key string, s *remote.Spec, dir string) error {
	if doc.md.IsDefined(append(strings.Split(key, "."), "push")...) {
		return doc.valueError(key+".push", "a remote execution service is not pushed to: remove push (what is built is pushed to the [[remote]] caches)")
	}
	if s.URL == "" {
		return &ProjectError{File: doc.display, Line: doc.lineOf(key), Msg: fmt.Sprintf("%s has no url", key),
			Hint: `add a line like url = "grpcs://cluster.example:443"`}
	}
	if err := CheckServiceURL(s.URL); err != nil {
		// Not the offending line: it may hold a password.
		return &ProjectError{File: doc.display, Line: doc.lineOf(key + ".url"), Msg: fmt.Sprintf("key %q: %v", key+".url", err)}
	}
	if (s.ClientCert == "") != (s.ClientKey == "") {
		return doc.valueError(key+".client-cert", "client-cert and client-key must be given together")
	}
	tls := s.ServerCA != "" || s.ClientCert != ""
	if u, _ := url.Parse(s.URL); tls && u.Scheme != "grpcs" {
		return doc.valueError(key+".url", "server-ca, client-cert and client-key need TLS: use grpcs://")
	}
	for _, f := range []struct {
		name string
		p    *string
	}{{"server-ca", &s.ServerCA}, {"client-cert", &s.ClientCert}, {"client-key", &s.ClientKey}, {"token-file", &s.TokenFile}} {
		if *f.p == "" {
			continue
		}
		if !filepath.IsAbs(*f.p) {
			*f.p = filepath.Join(dir, *f.p)
		}
		if _, err := os.Stat(*f.p); err != nil {
			why := "cannot read it"
			if errors.Is(err, fs.ErrNotExist) {
				why = "no such file"
			}
			return doc.valueError(key+"."+f.name, "%s: %s", *f.p, why)
		}
	}
	return nil
}

// CheckServiceURL checks that raw is the url of a remote execution service:
// grpc:// or grpcs://, HOST:PORT only. The message never holds the URL's userinfo.
func CheckServiceURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s is not a valid url", remote.RedactURL(raw))
	}
	shown := remote.RedactURL(raw)
	switch {
	case u.Scheme != "grpc" && u.Scheme != "grpcs":
		return fmt.Errorf("%s: unsupported scheme %q: a remote execution service is grpc://HOST:PORT or grpcs://HOST:PORT", shown, u.Scheme)
	case u.Hostname() == "":
		return fmt.Errorf("%s has no host", shown)
	case u.Port() == "":
		return fmt.Errorf("%s has no port: write %s://HOST:PORT", shown, u.Scheme)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "":
		return fmt.Errorf("%s: a %s:// url is HOST:PORT only; set the REAPI instance name with the instance key", shown, u.Scheme)
	}
	return nil
}

// RemoteExecutionConfig is the session's remote execution: the user config's
// [remote-execution] over project.toml's, key by key (a service as a whole, platform
// properties one by one), and a --remote-executor url (executor, "" for none) over
// both, serving all three services. A platform property set to "" is removed. Without
// any configuration: none (Enabled and CacheOnly false), with the defaults.
func RemoteExecutionConfig(project, user *RemoteExecution, executor string) (rexec.Config, error) {
	var c rexec.Config
	var storageFrom string
	for _, r := range []*RemoteExecution{project, user} {
		if r == nil {
			continue
		}
		if r.ExecutionService != nil {
			c.Execution, c.From = *r.ExecutionService, r.File
		}
		if r.StorageService != nil {
			c.Storage, storageFrom = *r.StorageService, r.File
		}
		if r.ActionCacheService != nil {
			c.ActionCache = *r.ActionCacheService
			if c.From == "" {
				c.From = r.File
			}
		}
		if r.Platform != nil {
			if c.Platform == nil {
				c.Platform = rexec.DefaultPlatform()
			}
			for k, v := range r.Platform {
				if v == "" {
					delete(c.Platform, k) // removes a default or the project's
				} else {
					c.Platform[k] = v
				}
			}
		}
		if r.RemoteJobs != nil {
			c.RemoteJobs = *r.RemoteJobs
		}
		if r.Wrap != nil {
			c.Wrap = *r.Wrap
		}
		if r.Timeout > 0 {
			c.Timeout = r.Timeout
		}
	}
	if executor != "" {
		if err := CheckServiceURL(executor); err != nil {
			return rexec.Config{}, fmt.Errorf("--remote-executor: %w", err)
		}
		c.Execution, c.Storage, c.ActionCache, c.From = remote.Spec{URL: executor}, remote.Spec{}, remote.Spec{}, "--remote-executor"
	}
	if c.Storage.URL != "" && c.Execution.URL == "" && c.ActionCache.URL == "" {
		return rexec.Config{}, &ProjectError{File: storageFrom, Msg: "[remote-execution] has a storage-service but neither an execution-service nor an action-cache-service",
			Hint: "add an execution-service (builds run on it) or an action-cache-service (builds run here, their results are shared), or remove the storage-service"}
	}
	if c.Platform == nil {
		c.Platform = rexec.DefaultPlatform()
	}
	if c.RemoteJobs == 0 {
		c.RemoteJobs = rexec.DefaultRemoteJobs
	}
	if c.Timeout == 0 {
		c.Timeout = rexec.DefaultTimeout
	}
	return c, nil
}

// ElementRemoteExecution is an element's [remote-execution]: platform properties over
// the session's ("" removes one) and its Action's timeout (0: the session's).
type ElementRemoteExecution struct {
	Platform map[string]string
	Timeout  time.Duration
}

// elementRemoteExecKeys are the keys of an element's [remote-execution].
var elementRemoteExecKeys = []string{"platform", "timeout"}

// parseElementRemoteExecution reads an element file's [remote-execution] table (nil:
// none), as a plain table: the file may have it from a kind's defaults or an include.
func parseElementRemoteExecution(doc *tomlDoc, t map[string]any) (ElementRemoteExecution, error) {
	var r ElementRemoteExecution
	for _, k := range sortedKeys(t) {
		path := "remote-execution." + k
		switch k {
		case "platform":
			m, ok := t[k].(map[string]any)
			if !ok {
				return r, doc.valueError(path, "expected a table of properties, found %s", tomlTypeName(t[k]))
			}
			r.Platform = make(map[string]string, len(m))
			for _, name := range sortedKeys(m) {
				v, ok := m[name].(string)
				if !ok {
					return r, doc.valueError(path+"."+name, "expected a string, found %s", tomlTypeName(m[name]))
				}
				r.Platform[name] = v
			}
		case "timeout":
			s, ok := t[k].(string)
			if !ok {
				return r, doc.valueError(path, "expected a duration such as \"6h\", found %s", tomlTypeName(t[k]))
			}
			var err error
			if r.Timeout, err = parseActionTimeout(s); err != nil {
				return r, doc.valueError(path, "%v", err)
			}
		default:
			return r, doc.keyError(path, k, elementRemoteExecKeys)
		}
	}
	return r, nil
}

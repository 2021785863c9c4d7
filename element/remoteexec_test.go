package element

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	rexec "github.com/gantry-build/gantry/remote/exec"
)

// writeRemoteExecProject writes project.toml (name demo, then body) in a new
// directory and returns it.
func writeRemoteExecProject(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ProjectFile), []byte("name = \"demo\"\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// [remote-execution] of project.toml and of the user config merge key by key, the
// user's winning (a service as a whole, platform properties one by one, "" removing
// one); paths are made absolute beside their file; the defaults fill what neither
// sets.
func TestRemoteExecutionUserConfigWins(t *testing.T) {
	dir := writeRemoteExecProject(t, `
[remote-execution]
remote-jobs = 8
wrap = "bwrap"
timeout = "2h"
[remote-execution.execution-service]
url = "grpc://project.example:8980"
instance = "main"
[remote-execution.storage-service]
url = "grpcs://cas.example:443"
token-file = "token"
[remote-execution.platform]
OSFamily = "Linux"
pool = "big"
`)
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProjectFor(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	userPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(userPath, []byte(`
[remote-execution]
remote-jobs = 3
execution-service = { url = "grpc://user.example:8980" }
platform.pool = "small"
platform.ISA = ""
`), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := LoadUserConfig(userPath, true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := RemoteExecutionConfig(p.RemoteExecution, u.RemoteExecution, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Execution.URL != "grpc://user.example:8980" || c.Execution.Instance != "" || c.From != userPath {
		t.Errorf("execution service %+v from %q: want the user's, whole", c.Execution, c.From)
	}
	if c.Storage.URL != "grpcs://cas.example:443" || c.Storage.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("storage service %+v: want the project's, its token-file beside project.toml", c.Storage)
	}
	if want := map[string]string{"OSFamily": "Linux", "pool": "small"}; !maps.Equal(c.Platform, want) {
		t.Errorf("platform %v, want %v", c.Platform, want)
	}
	if c.RemoteJobs != 3 || c.Wrap != "bwrap" || c.Timeout != 2*time.Hour {
		t.Errorf("remote-jobs %d, wrap %q, timeout %v: want 3, bwrap, 2h", c.RemoteJobs, c.Wrap, c.Timeout)
	}
	if !c.Enabled() || c.CacheOnly() || c.ActionCacheService().URL != "grpc://user.example:8980" || c.StorageService().URL != "grpcs://cas.example:443" {
		t.Errorf("enabled %v, cache-only %v, action cache %q, storage %q", c.Enabled(), c.CacheOnly(), c.ActionCacheService().URL, c.StorageService().URL)
	}

	// --remote-executor serves all three services; the rest stays.
	c, err = RemoteExecutionConfig(p.RemoteExecution, u.RemoteExecution, "grpc://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if c.Execution.URL != "grpc://127.0.0.1:9" || c.Storage.URL != "" || c.StorageService().URL != "grpc://127.0.0.1:9" || c.From != "--remote-executor" || c.RemoteJobs != 3 {
		t.Errorf("--remote-executor: %+v", c)
	}
	if _, err := RemoteExecutionConfig(nil, nil, "http://127.0.0.1:9"); err == nil || err.Error() != `--remote-executor: http://127.0.0.1:9: unsupported scheme "http": a remote execution service is grpc://HOST:PORT or grpcs://HOST:PORT` {
		t.Errorf("--remote-executor http: %v", err)
	}
}

// Without any configuration: no remote execution, and the defaults.
func TestRemoteExecutionDefaults(t *testing.T) {
	c, err := RemoteExecutionConfig(nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || c.CacheOnly() || c.RemoteJobs != 32 || c.Timeout != rexec.DefaultTimeout || !maps.Equal(c.Platform, map[string]string{"OSFamily": "linux", "ISA": "x86-64"}) {
		t.Errorf("defaults: %+v", c)
	}
	if p := c.PlatformFor(map[string]string{"ISA": "aarch64", "OSFamily": ""}); !maps.Equal(p, map[string]string{"ISA": "aarch64"}) {
		t.Errorf("an element's platform over the defaults: %v", p)
	}
	if c.TimeoutFor(time.Minute) != time.Minute || c.TimeoutFor(0) != rexec.DefaultTimeout {
		t.Errorf("timeouts: %v %v", c.TimeoutFor(time.Minute), c.TimeoutFor(0))
	}
}

// An action-cache service without an execution service is the cache-only mode:
// builds run here, their results are looked up and recorded there.
func TestRemoteExecutionCacheOnly(t *testing.T) {
	dir := writeRemoteExecProject(t, "[remote-execution.action-cache-service]\nurl = \"grpc://ac.example:9092\"\ninstance = \"ci\"\n")
	p, err := LoadProjectFor(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := RemoteExecutionConfig(p.RemoteExecution, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || !c.CacheOnly() || c.ActionCacheService().Instance != "ci" || len(c.Services()) != 1 || c.From != ProjectFile {
		t.Errorf("cache only: %+v", c)
	}
	// A storage service alone serves nothing.
	dir = writeRemoteExecProject(t, "[remote-execution.storage-service]\nurl = \"grpc://cas.example:9092\"\n")
	if p, err = LoadProjectFor(dir, LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = RemoteExecutionConfig(p.RemoteExecution, nil, "")
	if want := "project.toml: [remote-execution] has a storage-service but neither an execution-service nor an action-cache-service\n" +
		"add an execution-service (builds run on it) or an action-cache-service (builds run here, their results are shared), or remove the storage-service"; err == nil || err.Error() != want {
		t.Errorf("storage alone: %v\nwant %s", err, want)
	}
}

// Mistakes in [remote-execution] are errors at load naming the file, line and key.
func TestRemoteExecutionErrors(t *testing.T) {
	for _, tt := range []struct{ name, body, want string }{
		{"unknown key", "[remote-execution]\nremote-job = 4\n",
			`project.toml:3: unknown key "remote-job" in [remote-execution] (did you mean "remote-jobs"?)` + "\n" +
				"known keys: execution-service, storage-service, action-cache-service, platform, remote-jobs, wrap, timeout"},
		{"unknown service key", "[remote-execution.execution-service]\nurl = \"grpc://h:1\"\ninstanse = \"x\"\n",
			`project.toml:4: unknown key "instanse" in [remote-execution.execution-service] (did you mean "instance"?)` + "\n" +
				"known keys: url, instance, server-ca, client-cert, client-key, token-file"},
		{"push", "[remote-execution.execution-service]\nurl = \"grpc://h:1\"\npush = true\n",
			`project.toml:4: key "remote-execution.execution-service.push": a remote execution service is not pushed to: remove push (what is built is pushed to the [[remote]] caches)`},
		{"http url", "[remote-execution.execution-service]\nurl = \"https://h:1\"\n",
			`project.toml:3: key "remote-execution.execution-service.url": https://h:1: unsupported scheme "https": a remote execution service is grpc://HOST:PORT or grpcs://HOST:PORT`},
		{"no port", "[remote-execution.action-cache-service]\nurl = \"grpcs://h\"\n",
			`project.toml:3: key "remote-execution.action-cache-service.url": grpcs://h has no port: write grpcs://HOST:PORT`},
		{"a path", "[remote-execution.execution-service]\nurl = \"grpc://h:1/main\"\n",
			`project.toml:3: key "remote-execution.execution-service.url": grpc://h:1/main: a grpc:// url is HOST:PORT only; set the REAPI instance name with the instance key`},
		{"no url", "[remote-execution.execution-service]\ninstance = \"main\"\n",
			"project.toml:2: remote-execution.execution-service has no url\nadd a line like url = \"grpcs://cluster.example:443\""},
		{"missing file", "[remote-execution.execution-service]\nurl = \"grpcs://h:1\"\nserver-ca = \"ca.pem\"\n",
			`project.toml:4: key "remote-execution.execution-service.server-ca": DIR/ca.pem: no such file`},
		{"tls without grpcs", "[remote-execution.execution-service]\nurl = \"grpc://h:1\"\nserver-ca = \"project.toml\"\n",
			`project.toml:3: key "remote-execution.execution-service.url": server-ca, client-cert and client-key need TLS: use grpcs://`},
		{"remote-jobs", "[remote-execution]\nremote-jobs = 0\n",
			`project.toml:3: key "remote-execution.remote-jobs": must be at least 1, got 0`},
		{"wrap", "[remote-execution]\nwrap = \"docker\"\n",
			`project.toml:3: key "remote-execution.wrap": "docker" is not a wrapper gantry knows: use "bwrap" (or leave wrap out when the executor runs the command with the input root as /)`},
		{"timeout", "[remote-execution]\ntimeout = \"forever\"\n",
			`project.toml:3: key "remote-execution.timeout": "forever" is not a duration above 0: write one like "90m" or "6h"`},
		{"platform value", "[remote-execution.platform]\nISA = 64\n",
			`project.toml:3:7: invalid TOML: wrong type for key "remote-execution.platform.ISA": expected a string, found an integer`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeRemoteExecProject(t, tt.body)
			_, err := LoadProjectFor(dir, LoadOptions{})
			want := tt.want
			if i := len("project.toml:4: key \"remote-execution.execution-service.server-ca\": "); tt.name == "missing file" {
				want = want[:i] + filepath.Join(dir, "ca.pem") + ": no such file"
			}
			if err == nil || stripText(err) != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
}

// The user config's [remote-execution] is checked the same way, naming its path.
func TestRemoteExecutionUserConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte("[remote-execution]\nexecution-servise = { url = \"grpc://h:1\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadUserConfig(path, true)
	if want := path + `:2: unknown key "execution-servise" in [remote-execution] (did you mean "execution-service"?)` +
		"\nknown keys: execution-service, storage-service, action-cache-service, platform, remote-jobs, wrap, timeout"; err == nil || stripText(err) != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// An element's [remote-execution] (platform properties, timeout) is read from its
// file and through the parse cache alike, and changes no key: it says where the
// element builds, not what.
func TestElementRemoteExecution(t *testing.T) {
	files := map[string]string{
		"project.toml":       "name = \"demo\"\n",
		"elements/big.toml":  "kind = \"manual\"\n[remote-execution]\ntimeout = \"6h\"\n[remote-execution.platform]\nISA = \"aarch64\"\nOSFamily = \"\"\n",
		"elements/kind.toml": "kind = \"manual\"\n",
		"elements/app.toml":  "kind = \"stack\"\ndepends = [\"big.toml\", \"kind.toml\"]\n",
	}
	dir := writeProject(t, files)
	cacheDir := t.TempDir()
	for _, pass := range []string{"parsed", "from the parse cache"} {
		g, _, err := loadThroughCache(dir, cacheDir, "app.toml")
		if err != nil {
			t.Fatal(err)
		}
		big, kind := g.Elements["big.toml"].RemoteExecution, g.Elements["kind.toml"].RemoteExecution
		if big.Timeout != 6*time.Hour || !maps.Equal(big.Platform, map[string]string{"ISA": "aarch64", "OSFamily": ""}) {
			t.Errorf("%s: big.toml %+v", pass, big)
		}
		if kind.Timeout != 0 || kind.Platform != nil {
			t.Errorf("%s: kind.toml (none) %+v", pass, kind)
		}
	}
	plain := maps.Clone(files)
	plain["elements/big.toml"] = "kind = \"manual\"\n"
	with, without := mustGraph(t, dir, "app.toml"), mustGraph(t, writeProject(t, plain), "app.toml")
	for _, name := range []string{"big.toml", "kind.toml", "app.toml"} {
		if with.Elements[name].Key != without.Elements[name].Key {
			t.Errorf("%s: key %s with [remote-execution], %s without", name, with.Elements[name].Key, without.Elements[name].Key)
		}
	}
}

// Mistakes in an element's [remote-execution] name the file, line and key.
func TestElementRemoteExecutionErrors(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{"[remote-execution]\nplatfrom = { ISA = \"x\" }\n",
			`elements/a.toml:3: unknown key "platfrom" in [remote-execution] (did you mean "platform"?)` + "\nknown keys: platform, timeout"},
		{"[remote-execution]\ntimeout = \"soon\"\n",
			`elements/a.toml:3: key "remote-execution.timeout": "soon" is not a duration above 0: write one like "90m" or "6h"`},
		{"[remote-execution]\ntimeout = 60\n",
			`elements/a.toml:3: key "remote-execution.timeout": expected a duration such as "6h", found an integer`},
		{"[remote-execution.platform]\nISA = 64\n",
			`elements/a.toml:3: key "remote-execution.platform.ISA": expected a string, found an integer`},
		{"remote-execution = 1\n",
			`elements/a.toml:2: key "remote-execution": expected a table, found an integer`},
	} {
		dir := writeProject(t, map[string]string{"project.toml": "name = \"demo\"\n", "elements/a.toml": "kind = \"manual\"\n" + tt.body})
		_, err := loadGraph(t, dir, "a.toml")
		if err == nil || stripText(err) != tt.want {
			t.Errorf("%q: got %v\nwant %s", tt.body, err, tt.want)
		}
	}
}

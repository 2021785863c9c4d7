package exec

import "time"

// Service is one REAPI endpoint of [remote-execution]: the same keys as a
// [[remote]] (docs/remote-execution.md).
type Service struct {
	URL        string `toml:"url" json:"url"`                 // grpc://HOST:PORT or grpcs://HOST:PORT; may carry user:password
	Instance   string `toml:"instance" json:"instance"`       // REAPI instance name
	ServerCA   string `toml:"server-ca" json:"server-ca"`     // PEM file of the CA that signs the server's certificate
	ClientCert string `toml:"client-cert" json:"client-cert"` // PEM file: client certificate for mutual TLS
	ClientKey  string `toml:"client-key" json:"client-key"`   // PEM file: its key
	TokenFile  string `toml:"token-file" json:"token-file"`   // file holding a bearer token
}

// Config is [remote-execution] of project.toml and the user config, or
// --remote-executor: where and how builds run remotely.
type Config struct {
	Execution   Service  `toml:"execution-service" json:"execution-service"`
	Storage     *Service `toml:"storage-service" json:"storage-service,omitempty"`           // nil: the execution service
	ActionCache *Service `toml:"action-cache-service" json:"action-cache-service,omitempty"` // nil: the execution service

	// Platform is the Action's platform properties over the defaults
	// (OSFamily=linux, ISA=x86-64); an element's own override these.
	Platform map[string]string `toml:"platform" json:"platform,omitempty"`
	// RemoteJobs is how many actions may be in flight at once (default 32).
	RemoteJobs int `toml:"remote-jobs" json:"remote-jobs,omitempty"`
	// Wrap is "" or "bwrap": prefix the command with bwrap making the input
	// root "/", for executors that run commands in a plain directory.
	Wrap string `toml:"wrap" json:"wrap,omitempty"`
	// Timeout is Action.timeout of a build (0: DefaultTimeout).
	Timeout time.Duration `toml:"timeout" json:"timeout,omitempty"`
}

// DefaultRemoteJobs is remote-jobs when unset.
const DefaultRemoteJobs = 32

// DefaultTimeout is an Action's timeout when none is set: generous, a
// build of a large element may take hours.
const DefaultTimeout = 6 * time.Hour

package element

import (
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/cache/remote"
)

// WorkerConfig is [worker] of the user configuration: the defaults of `gantry
// worker`'s flags (a flag given wins).
//
//	[worker]
//	slots = 4
//	sandbox = "bwrap"
//	work-dir = "/var/cache/gantry-worker"
//	bot-id = "builder-1"
//	[worker.bots]          # a service as in [remote-execution]: url, instance,
//	url = "grpc://bgd:50051"   # server-ca, client-cert, client-key, token-file
//	[worker.cas]           # optional; default the Bots server
//	[worker.platform]
//	ISA = "x86-64"
type WorkerConfig struct {
	Bots     *remote.Spec      `toml:"bots"`
	CAS      *remote.Spec      `toml:"cas"`
	Platform map[string]string `toml:"platform"`
	Slots    int               `toml:"slots"`
	Sandbox  string            `toml:"sandbox"`
	WorkDir  string            `toml:"work-dir"`
	BotID    string            `toml:"bot-id"`
}

var workerKeys = []string{"bots", "cas", "platform", "slots", "sandbox", "work-dir", "bot-id"}

// workerCandidates are the keys allowed under parent inside [worker].
func workerCandidates(parent []string) []string {
	if len(parent) == 2 && parent[1] != "platform" {
		return serviceKeys
	}
	if len(parent) == 1 {
		return workerKeys
	}
	return nil
}

// checkWorker validates [worker] (nil: none) and makes its paths absolute, relative
// to dir.
func checkWorker(doc *tomlDoc, w *WorkerConfig, dir string) error {
	if w == nil {
		return nil
	}
	if err := doc.checkTables("worker", "worker.bots", "worker.cas", "worker.platform"); err != nil {
		return err
	}
	for _, s := range []struct {
		key  string
		spec *remote.Spec
	}{{"worker.bots", w.Bots}, {"worker.cas", w.CAS}} {
		if s.spec != nil {
			if err := checkService(doc, s.key, s.spec, dir); err != nil {
				return err
			}
		}
	}
	if doc.md.IsDefined("worker", "slots") && w.Slots < 1 {
		return doc.valueError("worker.slots", "must be at least 1, got %d", w.Slots)
	}
	if w.Sandbox != "" && w.Sandbox != "bwrap" && w.Sandbox != "host" {
		return doc.valueError("worker.sandbox", "%q is not bwrap or host", w.Sandbox)
	}
	for name := range w.Platform {
		if strings.TrimSpace(name) == "" {
			return doc.valueError("worker.platform", "a platform property needs a name")
		}
	}
	if w.WorkDir != "" && !filepath.IsAbs(w.WorkDir) {
		w.WorkDir = filepath.Join(dir, w.WorkDir)
	}
	return nil
}

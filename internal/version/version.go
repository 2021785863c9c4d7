// Package version is gantry's version as the binary knows it (the module's version
// and the VCS revision Go stamped into it), for `gantry version` and the User-Agent
// gantry's HTTP and gRPC clients send.
package version

import (
	"runtime/debug"
	"sync"
)

// String is the version `gantry version` prints: "v1.2.3 (0123456789ab)", "(devel)
// (0123456789ab)", or "(unknown)" for a binary without build information.
var String = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v
})

// UserAgent is what gantry's clients send as their User-Agent: "gantry/VERSION",
// with the revision as a comment when there is one ("gantry/(devel) (0123456789ab)").
func UserAgent() string { return "gantry/" + String() }

package sandbox

import (
	"strconv"
	"time"
)

// DefaultSourceDate is SOURCE_DATE_EPOCH when no source of the element says when it was
// last changed: 1980-01-01T00:00:00Z, the earliest time a zip archive can record.
func DefaultSourceDate() time.Time { return time.Unix(315532800, 0).UTC() }

// SandboxHome is HOME under bwrap: /tmp, a fresh, empty tmpfs in every sandbox.
const SandboxHome = "/tmp"

// FixedEnv is the environment every build command starts from, in either sandbox, so
// that neither the caller's environment nor the machine's settings reach a build: HOME
// an empty directory (home; SandboxHome under bwrap), TZ=UTC, LC_ALL=C, and
// SOURCE_DATE_EPOCH (reproducible-builds.org) at sourceDate. The element's environment
// is laid over it: a variable it sets wins.
func FixedEnv(home string, sourceDate time.Time) map[string]string {
	return map[string]string{
		"HOME":              home,
		"TZ":                "UTC",
		"LC_ALL":            "C",
		"SOURCE_DATE_EPOCH": strconv.FormatInt(sourceDate.Unix(), 10),
	}
}

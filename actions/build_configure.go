package actions

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
)

// A workspace's build directory is configured once, as in BuildStream: its first build
// runs the configure commands, later builds run only the build and install commands
// over what the earlier ones left (running ./configure again rewrites config.h and
// every Makefile, and make rebuilds everything; meson refuses a configured directory).
// They run again after `workspace reset` (which drops the build directory), or when
// what they were run with changes.
//
// The record lives beside the build directory it describes, in the cache
// (CACHE/workspaces/PROJECT/NAME/configured.json), not in .gantry/workspaces.json as
// BuildStream keeps its "prepared" flag: whatever drops the directory (reset, close,
// removing the cache) drops the record with it, and the job writes it under the build
// directory's lock, with no other process writing the project's workspace file. It is
// removed before the configure commands run and written, atomically, only once they
// all succeeded: a build killed or failed during them leaves none, and the next build
// configures again. (BuildStream 1.6 sets its flag before its batched configure
// commands run.)

// configuredFile is the record's name beside the workspace's build directory.
const configuredFile = "configured.json"

// markerFile, in the build directory, holds the token of the record that describes it:
// a directory made anew (removed by hand, or by anything but gantry) has none. Its
// inode would not do: ext4 gives a new directory the inode of one just removed.
const markerFile = ".gantry-configured"

// configuredState is what the configure commands of a workspace build ran with: hashes
// of the inputs as the key sees them (no host path, no max-jobs), the sandbox, and the
// token of the build directory they ran in (markerFile). A changed variable is named
// before the commands that expand it.
type configuredState struct {
	Sandbox     string `json:"sandbox"`
	Commands    string `json:"commands"`
	Variables   string `json:"variables"`
	Environment string `json:"environment"`
	Token       string `json:"token"`
}

// workspaceConfigure is one workspace build's decision about its configure commands.
type workspaceConfigure struct {
	path   string // the record
	marker string // the build directory's markerFile
	want   configuredState
	run    bool
	reason string // why they run, or why not: for the log
}

// decideConfigure says whether spec, a workspace build with configure commands in
// sandbox kind, runs them. It returns nil for any other build: those always do.
func decideConfigure(spec *buildSpec, kind sandbox.Kind, resolved *element.Resolved) *workspaceConfigure {
	w := spec.Workspace
	if w == nil || len(resolved.Commands[configureStep]) == 0 {
		return nil
	}
	c := &workspaceConfigure{path: filepath.Join(filepath.Dir(w.BuildDir), configuredFile), marker: filepath.Join(w.BuildDir, markerFile),
		want: configuredState{Sandbox: string(kind)}}
	if in := spec.Inputs; in != nil {
		c.want.Variables = hashJSON(in.Variables)
		if in.Config != nil {
			c.want.Commands = hashJSON(in.Config.Commands[configureStep])
			c.want.Environment = hashJSON(in.Config.Env)
		}
	}
	token, _ := os.ReadFile(c.marker)
	var have configuredState
	data, err := os.ReadFile(c.path)
	switch {
	case err != nil || json.Unmarshal(data, &have) != nil:
		c.run, c.reason = true, "the workspace's build directory is not configured (its first build, the first after `gantry workspace reset`, or its configure commands did not finish)"
	case have.Token == "" || have.Token != string(token):
		c.run, c.reason = true, "the workspace's build directory is not the one that was configured"
	case have.Sandbox != c.want.Sandbox:
		c.run, c.reason = true, fmt.Sprintf("running again: the sandbox changed (%s, configured under %s)", c.want.Sandbox, have.Sandbox)
	case have.Variables != c.want.Variables:
		c.run, c.reason = true, "running again: the variables changed since the workspace's build directory was configured"
	case have.Commands != c.want.Commands:
		c.run, c.reason = true, "running again: the configure commands changed since the workspace's build directory was configured"
	case have.Environment != c.want.Environment:
		c.run, c.reason = true, "running again: the environment changed since the workspace's build directory was configured"
	default:
		c.reason = fmt.Sprintf("skipped: the workspace's build directory was configured by an earlier build (`gantry workspace reset --soft %s` configures it again)", spec.Element)
	}
	return c
}

// begin drops the record before the configure commands run: until they all succeed,
// the directory is not configured.
func (c *workspaceConfigure) begin() error {
	if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &infraError{fmt.Errorf("resetting the workspace's configured state: %w", err)}
	}
	return nil
}

// done records that the configure commands succeeded: a new token in the build
// directory's marker, then the record naming it.
func (c *workspaceConfigure) done() error {
	c.want.Token = rand.Text()
	if err := element.WriteFileAtomic(c.marker, []byte(c.want.Token), 0o644); err != nil {
		return &infraError{fmt.Errorf("marking the workspace's build directory configured: %w", err)}
	}
	data, err := json.Marshal(c.want)
	if err != nil {
		return err
	}
	if err := element.WriteFileAtomic(c.path, append(data, '\n'), 0o644); err != nil {
		return &infraError{fmt.Errorf("recording that the workspace is configured: %w", err)}
	}
	return nil
}

// configureStep is the command step a workspace runs once.
const configureStep = "configure-commands"

// hashJSON is the SHA-256 of v's JSON encoding (maps in key order), in hex.
func hashJSON(v any) string {
	data, _ := json.Marshal(v) // maps of strings and lists of strings: never fails
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

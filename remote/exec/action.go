package exec

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/cache"
	"google.golang.org/protobuf/types/known/durationpb"
)

// What a remote build is (docs/remote-execution.md): one REAPI Action whose
// input root is the dependencies' trees at the sysroot and the sources at the
// build root, and whose Command is the element's commands as one labelled
// `sh -e -c` script run in the build root.

// Step is one command list of a build, in the order steps run.
type Step struct {
	Name     string   // "configure-commands", "build-commands", …
	Commands []string // each runs as `sh -e -c COMMAND`, as a local build runs it
	Dir      string   // where they run ("": the build root); integration commands run in the sysroot
}

// Stage is where a remote build is, for the display.
type Stage int

const (
	Uploading Stage = iota + 1 // inputs going to the cluster's CAS
	Queued                     // queued on the cluster
	Executing                  // running on a worker
	Fetching                   // fetching outputs
)

func (s Stage) String() string {
	switch s {
	case Uploading:
		return "uploading inputs"
	case Queued:
		return "queued on the cluster"
	case Executing:
		return "executing"
	case Fetching:
		return "fetching outputs"
	}
	return "unknown"
}

// Build is one element's build, to run remotely.
type Build struct {
	Element     string            // as users name it: the action id of RequestMetadata
	Deps        []Layer           // dependency artifacts, in staging order (At: the sysroot)
	Sources     cache.Digest      // the staged sources, placed at BuildRoot
	BuildRoot   string            // absolute, as the commands see it
	InstallRoot string            // absolute; absent from the input root: the script makes it
	Steps       []Step            // in the order they run
	Env         map[string]string // the element's environment
	Platform    map[string]string // the element's platform properties, over the Config's
	Timeout     time.Duration     // 0: the Config's
	// Status, when set, hears where the build is. It is called from Run's
	// goroutine.
	Status func(Stage)
}

// failedBuildTree is where the script copies the build root when a command
// fails, so the failed build's tree comes back as an output: the build root
// itself is in the input root, and servers reject outputs the input root has
// (Bazel's worker). It is beside the build root: /gantry/failed-build for
// /gantry/build.
func failedBuildTree(buildRoot string) string {
	return path.Join(path.Dir(cleanAbs(buildRoot)), "failed-build")
}

// markerPrefix starts the line the script writes to stderr before each
// command, and the line saying which one failed.
const markerPrefix = "[gantry] "

// script is the `sh -e -c` script of b's steps: before each command a marker
// line on stderr naming its step and place ("[gantry] build-commands 2/3:
// make"), then the command in a shell of its own in its directory, as a local
// build runs it; the first that fails writes "[gantry] build-commands 2/3
// failed with exit code N", copies the build root to its failedBuildTree and
// exits with its code.
func script(b Build) string {
	var s strings.Builder
	s.WriteString("mkdir -p " + quote(b.InstallRoot) + "\n")
	for _, step := range b.Steps {
		dir := cmp.Or(step.Dir, b.BuildRoot)
		for i, cmd := range step.Commands {
			label := fmt.Sprintf("%s %d/%d", step.Name, i+1, len(step.Commands))
			fmt.Fprintf(&s, "printf '%%s\\n' %s >&2\n", quote(markerPrefix+label+": "+firstLine(cmd)))
			fmt.Fprintf(&s, "(cd %s && exec /bin/sh -e -c %s) || { rc=$?; printf '%%s\\n' %s\"$rc\" >&2; rm -rf %s; cp -a %s %s; exit $rc; }\n",
				quote(dir), quote(cmd), quote(markerPrefix+label+" failed with exit code "),
				quote(failedBuildTree(b.BuildRoot)), quote(b.BuildRoot), quote(failedBuildTree(b.BuildRoot)))
		}
	}
	return s.String()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// quote is s as one sh word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// FailedCommand is the label of the command a failed build's stderr says
// failed ("build-commands 2/3"), or "".
func FailedCommand(stderr []byte) string {
	lines := strings.Split(string(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(lines[i], markerPrefix); ok {
			if label, _, ok := strings.Cut(rest, " failed with exit code "); ok {
				return label
			}
		}
	}
	return ""
}

// wrapRoot is the directory of a wrapped action's input root that bwrap makes
// "/": the build's tree lies one level down, so that files an executor puts in
// the action's directory (Bazel's worker writes its stdout-UUID and
// stderr-UUID there) are not in the build's "/", as they are not locally.
const wrapRoot = "root"

// bwrapPrefix is what wrap = "bwrap" puts before the command: wrapRoot of the
// input root (the working directory) becomes "/", as a local bwrap build sees it.
func bwrapPrefix(buildRoot string) []string {
	return []string{"bwrap", "--unshare-all", "--die-with-parent", "--bind", wrapRoot, "/", "--dev", "/dev",
		"--proc", "/proc", "--tmpfs", "/tmp", "--chdir", buildRoot, "--"}
}

// rel is p (absolute, in the input root) relative to dir (absolute).
func rel(dir, p string) string {
	d, q := parts(dir), parts(p)
	n := 0
	for n < len(d) && n < len(q) && d[n] == q[n] {
		n++
	}
	out := slices.Repeat([]string{".."}, len(d)-n)
	out = append(out, q[n:]...)
	if len(out) == 0 {
		return "."
	}
	return path.Join(out...)
}

// command is the Command of b under cfg. Without wrap the executor runs it in
// the build root (the working directory) of an input root it makes "/"; with
// wrap it runs in the input root, and bwrap makes that "/" and enters the
// build root. Outputs are listed relative to the working directory, in
// output_paths and in the legacy output_directories.
func command(cfg Config, b Build) *repb.Command {
	cmd := &repb.Command{}
	wd := cleanAbs(b.BuildRoot)
	if cfg.Wrap == WrapBwrap {
		wd = "/"
		cmd.Arguments = bwrapPrefix(cleanAbs(b.BuildRoot))
	}
	cmd.Arguments = append(cmd.Arguments, "/bin/sh", "-e", "-c", script(b))
	if wd != "/" {
		cmd.WorkingDirectory = strings.TrimPrefix(wd, "/")
	}
	for _, name := range slices.Sorted(maps.Keys(b.Env)) {
		cmd.EnvironmentVariables = append(cmd.EnvironmentVariables, &repb.Command_EnvironmentVariable{Name: name, Value: b.Env[name]})
	}
	install, failed := outputNames(cfg, b)
	outs := []string{install, failed}
	slices.Sort(outs)
	cmd.OutputPaths = outs
	cmd.OutputDirectories = outs
	cmd.Platform = platform(cfg, b.Platform)
	return cmd
}

// outputNames are the names of the install root and the failed build's tree in
// the Command's outputs: relative to its working directory, the build root, or
// with wrap, to the input root, where the build's tree is under wrapRoot.
func outputNames(cfg Config, b Build) (install, failed string) {
	if cfg.Wrap == WrapBwrap {
		return path.Join(wrapRoot, rel("/", b.InstallRoot)), path.Join(wrapRoot, rel("/", failedBuildTree(b.BuildRoot)))
	}
	wd := cleanAbs(b.BuildRoot)
	return rel(wd, b.InstallRoot), rel(wd, failedBuildTree(b.BuildRoot))
}

// platform is the properties of cfg (PlatformFor) with the element's over them,
// sorted by name as REAPI requires.
func platform(cfg Config, element map[string]string) *repb.Platform {
	all := cfg.PlatformFor(element)
	p := &repb.Platform{}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		p.Properties = append(p.Properties, &repb.Platform_Property{Name: name, Value: all[name]})
	}
	return p
}

// action is the Action of a command and input root; do_not_cache is never
// set.
func action(cfg Config, b Build, cmd, root cache.Digest) *repb.Action {
	timeout := cfg.TimeoutFor(b.Timeout)
	return &repb.Action{
		CommandDigest:   cmd.Proto(),
		InputRootDigest: root.Proto(),
		Timeout:         durationpb.New(timeout),
		Platform:        platform(cfg, b.Platform), // v2.2: the Action's copy
	}
}

// inputRoot merges b's input root in c: the dependencies, the sources at the
// build root, empty /dev, /proc and /tmp; without the install root and the
// failed build's tree. With wrap it is the one directory wrapRoot of the
// input root.
func inputRoot(c *cache.Cache, cfg Config, b Build) (cache.Digest, []Overlap, error) {
	layers := slices.Clone(b.Deps)
	if !b.Sources.IsZero() {
		layers = append(layers, Layer{Name: b.Element + " (sources)", Files: b.Sources, At: b.BuildRoot})
	}
	root, overlaps, err := MergeTrees(c, layers, []string{"/dev", "/proc", "/tmp", b.BuildRoot}, []string{b.InstallRoot, failedBuildTree(b.BuildRoot)})
	if err != nil || cfg.Wrap != WrapBwrap {
		return root, overlaps, err
	}
	root, err = c.PutDirectory(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: wrapRoot, Digest: root.Proto()}}})
	return root, overlaps, err
}

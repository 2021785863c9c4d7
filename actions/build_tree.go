package actions

import (
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/sandbox"
)

// tree is where an element's commands run, on the host: the sysroot its dependencies
// are staged into, its build directory and its install root. A build and a shell
// (StageShell) lay it out alike, so that the shell sees what the build saw.
type tree struct{ sysroot, build, install string }

// workTree is the tree under the work directory work, building in buildDir (work's
// build, or a workspace's).
func workTree(work, buildDir string) tree {
	return tree{sysroot: filepath.Join(work, "sysroot"), build: buildDir, install: filepath.Join(work, "install")}
}

// make creates the tree's directories.
func (t tree) make() error {
	for _, d := range []string{t.sysroot, t.build, t.install} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// paths are the tree's paths as commands in the sandbox kind see them: the host's,
// or where bwrap mounts them (the sysroot at /).
func (t tree) paths(kind sandbox.Kind, maxJobs string) element.Paths {
	if kind == sandbox.Bwrap {
		return element.Paths{BuildRoot: sandbox.DefaultSandboxBuildRoot, InstallRoot: sandbox.DefaultSandboxInstallRoot, Sysroot: "/", MaxJobs: maxJobs}
	}
	return element.Paths{BuildRoot: t.build, InstallRoot: t.install, Sysroot: t.sysroot, MaxJobs: maxJobs}
}

// config runs commands of the sandbox kind in the tree with env; their output and
// process group are the caller's to set.
func (t tree) config(kind sandbox.Kind, env map[string]string) sandbox.Config {
	return sandbox.Config{Kind: kind, Sysroot: t.sysroot, BuildDir: t.build, InstallDir: t.install,
		SandboxBuildRoot: sandbox.DefaultSandboxBuildRoot, SandboxInstallRoot: sandbox.DefaultSandboxInstallRoot, Env: env}
}

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// hostSearchPaths lists, per variable, the sysroot directories the host
// backend puts in front of it, in order. Only directories that exist in the
// sysroot are used.
func hostSearchPaths() map[string][]string {
	libs := []string{"usr/local/lib", "usr/lib", "lib"}
	if t := multiarchTriplet(); t != "" {
		libs = append(libs, "usr/lib/"+t, "lib/"+t)
	}
	libs = append(libs, "usr/local/lib64", "usr/lib64", "lib64")
	pkgconfig := make([]string, 0, len(libs)+2)
	for _, l := range libs {
		pkgconfig = append(pkgconfig, l+"/pkgconfig")
	}
	pkgconfig = append(pkgconfig, "usr/local/share/pkgconfig", "usr/share/pkgconfig")
	return map[string][]string{
		"PATH":            {"usr/local/bin", "usr/bin", "bin", "usr/local/sbin", "usr/sbin", "sbin"},
		"LD_LIBRARY_PATH": libs,
		"LIBRARY_PATH":    libs,
		"CPATH":           {"usr/local/include", "usr/include"},
		"PKG_CONFIG_PATH": pkgconfig,
	}
}

// multiarchTriplet is Debian's multiarch directory name for this machine.
func multiarchTriplet() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "386":
		return "i386-linux-gnu"
	case "arm":
		return "arm-linux-gnueabihf"
	case "riscv64":
		return "riscv64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	}
	return ""
}

// hostEnv is the environment of host commands, sorted: cfg.Env, with each
// search-path variable prefixed by the sysroot's existing directories. The
// part after the prefix is cfg.Env's value if set, else the host's.
func hostEnv(cfg Config) []string {
	env := make(map[string]string, len(cfg.Env)+5)
	for k, v := range cfg.Env {
		env[k] = v
	}
	isDir := dirLookup(cfg.Sysroot)
	for name, dirs := range hostSearchPaths() {
		var parts []string
		if cfg.Sysroot != "" {
			for _, d := range dirs {
				if isDir(d) {
					parts = append(parts, filepath.Join(cfg.Sysroot, d))
				}
			}
		}
		rest, ok := cfg.Env[name]
		if !ok {
			rest = os.Getenv(name)
		}
		if rest != "" {
			parts = append(parts, rest)
		}
		if len(parts) > 0 {
			env[name] = strings.Join(parts, ":")
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// dirLookup returns a function reporting whether root/rel is a directory
// (following symlinks, as stat does). It stats each path once, and none
// below a parent that is not a directory: the search paths share their
// parents (usr, usr/lib) and a sparse sysroot lacks most of them.
func dirLookup(root string) func(rel string) bool {
	known := map[string]bool{".": true}
	var isDir func(string) bool
	isDir = func(rel string) bool {
		if ok, seen := known[rel]; seen {
			return ok
		}
		ok := isDir(path.Dir(rel))
		if ok {
			fi, err := os.Stat(filepath.Join(root, rel))
			ok = err == nil && fi.IsDir()
		}
		known[rel] = ok
		return ok
	}
	return isDir
}

// hostShell is the host's sh, which runs host commands: the sysroot's sh
// might need libraries the host lacks.
func hostShell() (string, error) {
	if fi, err := os.Stat("/bin/sh"); err == nil && fi.Mode()&0o111 != 0 {
		return "/bin/sh", nil
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return "", errors.New("no sh found on the host")
	}
	return sh, nil
}

// lookPathIn finds an executable named file in the PATH value pathList, as a
// shell would. A name containing a slash is returned unchanged.
func lookPathIn(file, pathList string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// envValue returns the value of name in a KEY=VALUE list.
func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

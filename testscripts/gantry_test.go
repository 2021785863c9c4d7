// Package testscripts holds gantry's CLI behaviour as testscript files in testdata/.
// Each script runs the real gantry binary (this test binary, registered as "gantry")
// with its own HOME, configuration and cache directories.
package testscripts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gantry-build/gantry/cmd/gantry/cli"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"gantry": func() { os.Exit(cli.Main()) },
	})
}

func TestScripts(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Condition:           scriptCondition,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":   cmdExitCode,
			"httpd":      cmdHTTPD,
			"httpcount":  cmdHTTPCount,
			"sha256":     cmdSHA256,
			"expand":     cmdExpand,
			"nginx":      cmdNginx,
			"cachesrv":   cmdCacheSrv,
			"cachefault": cmdCacheFault,
			"cachecount": cmdCacheCount,
			"cachewait":  cmdCacheWait,
			"bstserver":  cmdBSTServer,
			"corrupt":    cmdCorrupt,
			"deadport":   cmdDeadPort,
			"busybox":    cmdBusybox,
			"cacheserve": cmdCacheServe,

			"setenv-stdout": cmdSetenvStdout,
		},
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", filepath.Join(env.WorkDir, "home"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, "home", ".config"))
			env.Setenv("XDG_CACHE_HOME", filepath.Join(env.WorkDir, "home", ".cache"))
			env.Setenv("GANTRY_CACHE_DIR", "")
			env.Setenv("REPO", root)
			env.Setenv("NCPU", strconv.Itoa(runtime.NumCPU()))
			env.Values[httpdKey{}] = &httpd{}
			env.Values[cacheSrvKey{}] = &cacheSrv{}
			return nil
		},
	})
}

// cmdExitCode runs a command and checks its exit status: `exitcode 2 gantry show`.
// Its stdout and stderr can be checked afterwards like exec's.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %v", err)
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}

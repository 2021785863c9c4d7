package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/sandbox"
)

// JobAction is the job kind that runs a lease's command: in a job child
// (job.RunChild), so that the job's process-tree rules hold for it as for a local
// build — everything the command started dies when the command's job ends, and when
// the worker dies, even by kill -9.
const JobAction = "worker-action"

// Handlers are `gantry worker`'s job kinds, for job.RunChild.
func Handlers() map[string]job.Handler {
	return map[string]job.Handler{JobAction: actionJob}
}

// actionSpec is one command to run, the payload of a JobAction job.
type actionSpec struct {
	Sandbox   sandbox.Kind      `json:"sandbox"`
	InputRoot string            `json:"input-root"`
	Dir       string            `json:"dir"` // the working directory, relative to InputRoot
	Env       map[string]string `json:"env,omitempty"`
	Script    string            `json:"script"`
	Timeout   time.Duration     `json:"timeout,omitempty"` // 0: none
	Stdout    string            `json:"stdout"`            // files receiving its output
	Stderr    string            `json:"stderr"`
}

// actionOutcome is how the command ended, a JobAction job's result data.
type actionOutcome struct {
	ExitCode int  `json:"exit-code"`
	TimedOut bool `json:"timed-out,omitempty"`
}

// actionJob is the child side of a JobAction job: it runs the command in the job's
// process group (the parent terminates the job to cancel it).
func actionJob(ctx context.Context, spec job.Spec, _ *job.Reporter) (job.Result, error) {
	var s actionSpec
	if err := json.Unmarshal(spec.Payload, &s); err != nil {
		return job.Result{}, fmt.Errorf("decoding the action: %w", err)
	}
	out, err := runAction(ctx, s)
	if err != nil {
		return job.Result{}, err
	}
	data, err := json.Marshal(out)
	if err != nil {
		return job.Result{}, err
	}
	return job.Result{OK: true, Data: data}, nil
}

// runAction runs s's command to its end or its timeout. An error means the command
// could not be run (or ctx ended): a non-zero exit is an outcome.
func runAction(ctx context.Context, s actionSpec) (actionOutcome, error) {
	stdout, err := os.Create(s.Stdout)
	if err != nil {
		return actionOutcome{}, err
	}
	defer stdout.Close()
	stderr, err := os.Create(s.Stderr)
	if err != nil {
		return actionOutcome{}, err
	}
	defer stderr.Close()
	cfg := sandbox.Config{Kind: s.Sandbox, BuildDir: filepath.Join(s.InputRoot, s.Dir), Env: s.Env,
		Stdout: stdout, Stderr: stderr, Group: sandbox.CallerGroup}
	if s.Sandbox == sandbox.Bwrap {
		cfg.Sysroot, cfg.WritableSysroot, cfg.SandboxBuildRoot = s.InputRoot, true, "/"+s.Dir
	}
	runCtx := ctx
	if s.Timeout > 0 {
		var stop context.CancelFunc
		runCtx, stop = context.WithTimeout(ctx, s.Timeout)
		defer stop()
	}
	runner, err := sandbox.Prepare(cfg)
	if err != nil {
		return actionOutcome{}, err
	}
	runErr := runner.Run(runCtx, s.Script)
	_ = runner.Close()
	var exit *sandbox.ExitError
	switch {
	case ctx.Err() != nil:
		return actionOutcome{}, ctx.Err()
	case runCtx.Err() != nil:
		return actionOutcome{ExitCode: -1, TimedOut: true}, nil
	case errors.As(runErr, &exit):
		return actionOutcome{ExitCode: exit.ExitCode}, nil
	case runErr != nil:
		return actionOutcome{}, runErr
	}
	return actionOutcome{}, nil
}

// jobSeq numbers the bot's jobs.
var jobSeq atomic.Int64

// run runs s in a job child of b.jobs and waits for it; ctx ending terminates the
// job (SIGTERM to its process group, SIGKILL after the grace).
func (b *bot) run(ctx context.Context, leaseID, logPath string, s actionSpec) (actionOutcome, error) {
	payload, err := json.Marshal(s)
	if err != nil {
		return actionOutcome{}, err
	}
	j, err := b.jobs.Start(job.Spec{ID: "lease-" + strconv.FormatInt(jobSeq.Add(1), 10), Action: JobAction,
		Element: leaseID, LogPath: logPath, Payload: payload}, nil)
	if err != nil {
		return actionOutcome{}, err
	}
	select {
	case <-j.Done():
	case <-ctx.Done():
		_ = j.Terminate()
	}
	outcome := j.Wait()
	if ctx.Err() != nil {
		return actionOutcome{}, ctx.Err()
	}
	if !outcome.Result.OK {
		why := outcome.Result.Error
		if log, err := os.ReadFile(logPath); err == nil && len(log) > 0 {
			why += "\n" + string(log)
		}
		return actionOutcome{}, errors.New(why)
	}
	var out actionOutcome
	if err := json.Unmarshal(outcome.Result.Data, &out); err != nil {
		return actionOutcome{}, fmt.Errorf("decoding the result of the action's job: %w", err)
	}
	return out, nil
}

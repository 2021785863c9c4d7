package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/job"
	"github.com/gantry-build/gantry/source"
)

// jobCommand is the hidden first argument with which gantry re-executes itself to run
// one job (DESIGN.md §5). The job spec arrives on stdin.
const jobCommand = "__job"

func runJob() int {
	return job.RunChild(map[string]job.Handler{
		"build": element.Assemble,
		"fetch": runFetch,
	})
}

func runFetch(ctx context.Context, spec job.Spec, r *job.Reporter) (job.Result, error) {
	var fs fetchSpec
	if err := json.Unmarshal(spec.Payload, &fs); err != nil {
		return job.Result{}, fmt.Errorf("reading fetch spec: %w", err)
	}
	for i, s := range fs.Sources {
		if s.Kind != source.Local && s.Kind != source.Patch {
			return job.Result{}, fmt.Errorf("source %d (%s): %w", i+1, s.Describe(), errNoFetch)
		}
	}
	return job.Result{OK: true}, nil
}

package cli

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
)

// outputFormat is --format text|json of a maintenance command whose result scripts
// read (cache gc, cache verify, artifact delete, init, workspace list): json writes
// the result as JSON objects, one per line, on stdout. What goes to stderr follows
// --ui: JSON lines under --ui json (IOStreams).
type outputFormat struct{ value string }

func (f *outputFormat) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.value, "format", "text", "output format: text, or json (one object per line on stdout)")
}

// check refuses a --format other than text or json.
func (f *outputFormat) check() error {
	if f.value != "text" && f.value != "json" {
		return usagef("--format %q: use text or json", f.value)
	}
	return nil
}

func (f *outputFormat) json() bool { return f.value == "json" }

// writeJSONLine writes v as one JSON object on one line.
func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

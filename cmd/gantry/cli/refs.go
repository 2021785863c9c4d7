package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-build/gantry/element"
	"github.com/gantry-build/gantry/queues"
)

// missingRefsError turns a plan of selected that stopped on a missing ref into an
// error naming every element of the session without a ref, and the commands that
// track them for the graph's targets.
func missingRefsError(g *element.Graph, selected []*element.Element, err error) error {
	var one *queues.NoRefError
	if !errors.As(err, &one) {
		return err
	}
	all := queues.WithoutRef(g, selected)
	if len(all) <= 1 {
		return err
	}
	list := make([]string, len(all))
	for i, e := range all {
		list[i] = fmt.Sprintf("%s (source %d, %s)", e.Element, e.Source, e.Desc)
	}
	names := joinNames(g.Targets, " ")
	return fmt.Errorf("%d elements have a source without a ref: %s: run `gantry track --deps all %s`, or build with `gantry build --track %s`",
		len(all), strings.Join(list, ", "), names, names)
}

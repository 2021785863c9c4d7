package element

import (
	"fmt"
	"strings"
)

// ProjectError is a mistake in the user's project files: malformed TOML, an unknown key,
// a missing element, a cycle. The CLI maps it to exit code 2.
type ProjectError struct {
	File string // path as the user should see it, may be empty
	Line int    // 1-based, 0 when unknown
	Col  int    // 1-based, 0 when unknown
	Msg  string
	Hint string // what the user can do about it, may be empty
	Text string // the offending source line, may be empty
}

func (e *ProjectError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
			if e.Col > 0 {
				fmt.Fprintf(&b, ":%d", e.Col)
			}
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Text != "" {
		fmt.Fprintf(&b, "\n    %s", strings.TrimRight(e.Text, "\r\n"))
		if e.Col > 0 {
			fmt.Fprintf(&b, "\n    %s^", caretPad(e.Text, e.Col))
		}
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "\n%s", e.Hint)
	}
	return b.String()
}

// caretPad returns the whitespace that puts a caret under column col of line, keeping tabs.
func caretPad(line string, col int) string {
	var b strings.Builder
	for i, r := range line {
		if i >= col-1 {
			break
		}
		if r == '\t' {
			b.WriteByte('\t')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// didYouMean returns ` (did you mean "x"?)` for the candidate closest to word, or "".
func didYouMean(word string, candidates []string) string {
	best, bestDist := "", len(word)/2+2
	for _, c := range candidates {
		if d := levenshtein(word, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

package element

import (
	"errors"
	"testing"
)

// A TOML syntax error's column is where the caret under the line shown sits: at the
// start of a line (a key defined twice) and at the newline ending a line (the
// decoder has already counted the next line) as anywhere else.
func TestTOMLSyntaxErrorColumnAgreesWithTheLine(t *testing.T) {
	tests := []struct {
		name, text string
		line, col  int
		shown      string
	}{
		{"duplicate key at a line's start", "kind = \"manual\"\ndescription = \"a long description here\"\nabc = 1\nabc = 2\n", 4, 1, "abc = 2"},
		{"table name ended by a newline", "kind = 1\nx = 1\n[a\n", 3, 3, "[a"},
		{"array ended by the end of the file", "kind = \"manual\"\n\ndepends = [\"lib.toml\"\n", 3, 22, "depends = [\"lib.toml\""},
		{"string ended by a newline", "kind = \"manual\"\nfoo = \"bar\n", 2, 11, "foo = \"bar"},
		{"a value missing", "kind = \"manual\"\nabc = \n", 2, 7, "abc = "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v map[string]any
			_, err := decodeTOMLBytes([]byte(tc.text), "inv.toml", &v)
			var pe *ProjectError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ProjectError", err)
			}
			if pe.Line != tc.line || pe.Col != tc.col || pe.Text != tc.shown {
				t.Errorf("at %d:%d showing %q, want %d:%d showing %q\n%v", pe.Line, pe.Col, pe.Text, tc.line, tc.col, tc.shown, err)
			}
			if pe.Col > len(pe.Text)+1 {
				t.Errorf("column %d is past the end of the line shown, %q", pe.Col, pe.Text)
			}
		})
	}
}

package cli

import "testing"

// Fill, alignment and width as show's --format documents them: the value padded with the
// fill rune (any rune, a space by default) to width runes, left, right or centred (the
// odd rune to the right); a longer value is kept whole.
func TestFormatAlignment(t *testing.T) {
	values := map[string]string{"name": "app", "kind": "manual", "state": "ünïcode"}
	for format, want := range map[string]string{
		"%{name}|%{kind}":     "app|manual",
		"%{name:6}|":          "app   |",
		"%{name:<6}|":         "app   |",
		"%{name: >6}|":        "   app|",
		"%{name:.^8}|":        "..app...|",
		"%{name:·^6}|":        "·app··|",
		"%{state:->9}":        "--ünïcode",
		"[%{kind:2}]%{name}!": "[manual]app!",
	} {
		f, err := parseFormat(format, showPlaceholders)
		if err != nil {
			t.Fatal(err)
		}
		line := f.appendLine([]byte("prefix "), func(name string) string { return values[name] })
		if got := string(line); got != "prefix "+want {
			t.Errorf("%q: %q, want %q", format, got, "prefix "+want)
		}
	}
}

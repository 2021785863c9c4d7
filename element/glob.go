package element

import (
	"fmt"
	"regexp"
	"strings"
)

// Element globs: patterns over a project's element names with BuildStream's meaning:
// '*' and '?' stay inside one directory, '**' crosses directories ('**' alone is every
// element, 'base/*.toml' the elements directly in base/).

// IsGlob says whether an element argument is a pattern.
func IsGlob(a string) bool { return strings.ContainsAny(a, "*?[") }

// GlobRegexp compiles an element glob: '**' matches any text, '*' any text
// without '/', '?' one character but '/', '[...]' a character class.
func GlobRegexp(pattern string) (*regexp.Regexp, error) {
	expr, err := globExpr(pattern)
	if err != nil {
		return nil, fmt.Errorf("element glob %q: %v", pattern, err)
	}
	return regexp.Compile("^" + expr + "$") // globExpr made it: it compiles
}

// globExpr is the regular expression of a glob, unanchored: '**' matches any text,
// '*' any text without '/', '?' one character but '/', '[...]' a character class
// ('[!...]' its complement). Element globs and split rules share it.
func globExpr(pattern string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			end := strings.IndexByte(pattern[i:], ']')
			if end < 0 {
				return "", fmt.Errorf("'[' without ']'")
			}
			class := pattern[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if _, err := regexp.Compile(b.String()); err != nil {
		return "", err
	}
	return b.String(), nil
}

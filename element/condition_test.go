package element

import (
	"testing"
)

// conditionOptions are the declarations the condition tests parse against.
var conditionOptions = map[string]*Option{
	"debug":    {Name: "debug", Type: "bool"},
	"arch":     {Name: "arch", Type: "arch", Values: []string{"x86_64", "aarch64"}},
	"flavour":  {Name: "flavour", Type: "enum", Values: []string{"plain", "fancy"}},
	"features": {Name: "features", Type: "flags", Values: []string{"tests", "docs", "nls"}},
}

func TestConditionEval(t *testing.T) {
	values := map[string]string{"debug": "true", "arch": "aarch64", "flavour": "plain", "features": "tests,nls"}
	for _, c := range []struct {
		cond string
		want bool
	}{
		{`debug`, true},
		{`not debug`, false},
		{`not not debug`, true},
		{`debug == true`, true},
		{`debug == "false"`, false},
		{`debug != false`, true},
		{`arch == "aarch64"`, true},
		{`arch != 'aarch64'`, false},
		{`arch == "x86_64" or flavour == "plain"`, true},
		{`arch == "x86_64" or flavour == "fancy"`, false},
		{`arch == "aarch64" and debug`, true},
		{`"tests" in features`, true},
		{`"docs" in features`, false},
		{`"nls" in features and not "docs" in features`, true},
		// and binds tighter than or; parentheses change it
		{`flavour == "fancy" and debug or arch == "aarch64"`, true},
		{`flavour == "fancy" and (debug or arch == "aarch64")`, false},
		{`not (arch == "x86_64" or "docs" in features)`, true},
		{"(\tdebug\n)", true},
	} {
		cond, err := parseCondition(c.cond, conditionOptions)
		if err != nil {
			t.Errorf("%s: %v", c.cond, err)
			continue
		}
		if got := cond.eval(values); got != c.want {
			t.Errorf("%s: %v, want %v", c.cond, got, c.want)
		}
	}
}

func TestConditionErrors(t *testing.T) {
	for _, c := range []struct{ cond, want string }{
		{``, `column 1: empty condition: expected an expression over options, like debug or arch == "aarch64"`},
		{`dbug`, `column 1: unknown option "dbug" (did you mean "debug"?); options: arch, debug, features, flavour`},
		{`arch = "x86_64"`, `column 6: unexpected "=": expected == or !=`},
		{`debug !`, `column 7: unexpected "!": expected == or !=`},
		{`arch == "x86_64`, `column 9: unterminated string: expected a closing "`},
		{`arch == "ppc64le"`, `column 9: option "arch" cannot be "ppc64le": expected one of x86_64, aarch64`},
		{`arch == "aarch6"`, `column 9: option "arch" cannot be "aarch6" (did you mean "aarch64"?): expected one of x86_64, aarch64`},
		{`debug == "yes"`, `column 10: option "debug" cannot be "yes": expected one of true, false`},
		{`arch`, `column 5: option "arch" is of type arch: expected == or != and a value after it`},
		{`flavour and debug`, `column 9: option "flavour" is of type enum: expected == or != and a value after it`},
		{`features == "tests"`, `column 1: option "features" is a flags option: ask whether it holds a flag with "FLAG" in features`},
		{`"x86_64" in arch`, `column 13: option "arch" is of type arch: in needs a flags option (use == or != to compare)`},
		{`"test" in features`, `column 1: option "features" cannot be "test" (did you mean "tests"?): expected one of tests, docs, nls`},
		{`"tests" debug`, `column 9: unexpected "debug" after a value: expected in and a flags option`},
		{`"tests" in and`, `column 12: unexpected "and": expected an option name`},
		{`debug and`, `column 10: unexpected the end of the condition: expected an option name, a quoted value, not or (`},
		{`(debug`, `column 7: unexpected the end of the condition: expected ) to close the ( at column 1`},
		{`debug)`, `column 6: unexpected ")": expected and, or, or the end of the condition`},
		{`debug debug`, `column 7: unexpected "debug": expected and, or, or the end of the condition`},
		{`arch == debug`, `column 9: unexpected "debug": expected a quoted value after ==`},
		{`debug && arch`, `column 7: unexpected "&": expected an option name, a quoted value, ==, !=, in, and, or, not or parentheses`},
		{`or debug`, `column 1: unexpected "or": expected an option name, a quoted value, not or (`},
	} {
		_, err := parseCondition(c.cond, conditionOptions)
		if err == nil {
			t.Errorf("%s: parsed, want %s", c.cond, c.want)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.cond, err, c.want)
		}
	}
	if _, err := parseCondition(`debug`, nil); err == nil || err.Error() != `column 1: unknown option "debug"; project.toml declares no [options]` {
		t.Errorf("no options declared: %v", err)
	}
}

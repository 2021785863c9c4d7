package element

import "testing"

// A build whose key differs only by its sandbox is explained by the sandbox.
func TestExplainNamesTheSandbox(t *testing.T) {
	host := &Inputs{Kind: "manual", Config: &Resolved{Env: map[string]string{"A": "1"}}}
	hermetic := &Inputs{Kind: "manual", Sandbox: hermeticSandbox, Config: &Resolved{Env: map[string]string{"A": "1"}}}
	c := ownChange(host, hermetic)
	if c == nil || c.What != "sandbox" {
		t.Fatalf("ownChange = %+v, want a sandbox change", c)
	}
	want := "its sandbox changed: host or auto (not hermetic) → bwrap (hermetic) (a host artifact never satisfies a hermetic build)"
	if got := c.String(); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if c := ownChange(host, host); c != nil {
		t.Errorf("same inputs: %+v", c)
	}
}

package cache

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDigestStringRoundTrip(t *testing.T) {
	d := DigestOf([]byte("hello"))
	if d.Hash != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" || d.Size != 5 {
		t.Fatalf("DigestOf(hello) = %v", d)
	}
	got, err := ParseDigest(d.String())
	if err != nil || got != d {
		t.Fatalf("ParseDigest(%q) = %v, %v", d.String(), got, err)
	}
	if p := DigestFromProto(d.Proto()); p != d {
		t.Errorf("proto round trip = %v, want %v", p, d)
	}
	if DigestFromProto(nil) != (Digest{}) {
		t.Errorf("DigestFromProto(nil) is not zero")
	}
}

func TestParseDigestRejects(t *testing.T) {
	h := strings.Repeat("a", 64)
	for _, s := range []string{
		"", h, h + "/", h + "/-1", h + "/x",
		strings.Repeat("A", 64) + "/1", // uppercase
		strings.Repeat("a", 63) + "/1",
		"../../etc/passwd/1",
	} {
		if d, err := ParseDigest(s); err == nil {
			t.Errorf("ParseDigest(%q) = %v, want error", s, d)
		}
	}
}

func TestDigestJSON(t *testing.T) {
	type rec struct {
		A Digest `json:"a"`
		B Digest `json:"b,omitzero"`
	}
	in := rec{A: DigestOf([]byte("x"))}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"` + in.A.String() + `"}`; string(data) != want {
		t.Errorf("json = %s, want %s", data, want)
	}
	var out rec
	if err := json.Unmarshal(data, &out); err != nil || out != in {
		t.Errorf("round trip = %v, %v", out, err)
	}
}

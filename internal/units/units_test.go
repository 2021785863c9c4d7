package units

import "testing"

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"512", 512, true},
		{"10K", 10 << 10, true},
		{"10k", 10 << 10, true},
		{"500M", 500 << 20, true},
		{"1.5G", 3 << 29, true},
		{"2T", 2 << 40, true},
		{"", 0, false},
		{"0", 0, false},
		{"-1M", 0, false},
		{"M", 0, false},
		{"10X", 0, false},
		{"10MB", 0, false},
	} {
		got, ok := ParseSize(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{512, "512 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{123 << 20 / 10, "12.3 MiB"},
		{3 << 30, "3.0 GiB"},
		{5 << 40, "5.0 TiB"},
		{2 << 60, "2.0 EiB"},
	} {
		if got := Bytes(tt.n); got != tt.want {
			t.Errorf("Bytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

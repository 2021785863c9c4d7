package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Digest identifies a blob by the SHA-256 of its content and its size, as
// REAPI does. The zero Digest means "no blob".
type Digest struct {
	Hash string // 64 lowercase hex characters
	Size int64
}

// DigestOf returns the digest of data.
func DigestOf(data []byte) Digest {
	sum := sha256.Sum256(data)
	return Digest{Hash: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// String returns "hash/size", the form used in refs and records.
func (d Digest) String() string {
	return d.Hash + "/" + strconv.FormatInt(d.Size, 10)
}

// Short returns the first 8 hex characters of the hash, for display.
func (d Digest) Short() string {
	if len(d.Hash) < 8 {
		return d.Hash
	}
	return d.Hash[:8]
}

// IsZero reports whether d is the zero Digest ("no blob").
func (d Digest) IsZero() bool { return d == Digest{} }

// Validate reports whether d is a well-formed SHA-256 digest.
func (d Digest) Validate() error {
	if len(d.Hash) != sha256.Size*2 {
		return fmt.Errorf("invalid digest %q: hash must be %d hex characters", d.String(), sha256.Size*2)
	}
	for i := 0; i < len(d.Hash); i++ {
		c := d.Hash[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("invalid digest %q: hash must be lowercase hex", d.String())
		}
	}
	if d.Size < 0 {
		return fmt.Errorf("invalid digest %q: negative size", d.String())
	}
	return nil
}

// ParseDigest parses the "hash/size" form written by Digest.String.
func ParseDigest(s string) (Digest, error) {
	hash, size, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Digest{}, fmt.Errorf("invalid digest %q: want \"sha256/size\"", s)
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return Digest{}, fmt.Errorf("invalid digest %q: size: %w", s, err)
	}
	d := Digest{Hash: hash, Size: n}
	if err := d.Validate(); err != nil {
		return Digest{}, err
	}
	return d, nil
}

// MarshalText encodes d as "hash/size" (the zero Digest as ""), so digests
// read naturally in JSON records and job specs.
func (d Digest) MarshalText() ([]byte, error) {
	if d.IsZero() {
		return []byte{}, nil
	}
	return []byte(d.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (d *Digest) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Digest{}
		return nil
	}
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// Proto converts d to its REAPI form.
func (d Digest) Proto() *repb.Digest {
	return &repb.Digest{Hash: d.Hash, SizeBytes: d.Size}
}

// DigestFromProto converts an REAPI digest; nil gives the zero Digest.
func DigestFromProto(p *repb.Digest) Digest {
	if p == nil {
		return Digest{}
	}
	return Digest{Hash: p.GetHash(), Size: p.GetSizeBytes()}
}

// Package units reads and writes the sizes people type and read: one parser
// for sizes given on the command line, in the environment and in
// configuration ("500M", "1.5G"), and one human format for byte counts
// ("512 B", "1.5 MiB"), used by every display.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads a number of bytes with an optional K, M, G or T suffix (powers of
// 1024, "10G", "1.5T"); ok is false for anything else, zero and negatives included.
func ParseSize(s string) (n int64, ok bool) {
	mult := int64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]&^0x20); i >= 0 {
			mult = 1 << (10 * (i + 1))
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return int64(v * float64(mult)), true
}

// Bytes formats a count of bytes with a binary (IEC) unit, one decimal above
// 1 KiB: "512 B", "1.5 KiB", "12.3 MiB".
func Bytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB", "PiB", "EiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

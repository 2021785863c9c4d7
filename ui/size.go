package ui

// ByteSize formats a count of bytes as the displays do: 512 B, 12.3 MiB.
func ByteSize(n int64) string { return byteSize(n) }

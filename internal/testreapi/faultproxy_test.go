package testreapi

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestFaultProxy carries a connection to an echo server, cuts it, and carries the
// next one.
func TestFaultProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p := StartFaultProxy(t, l.Addr().String())
	echo := func(c net.Conn, line string) (string, error) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, line); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := echo(c, "one\n"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}
	if n := p.Cut(); n != 1 {
		t.Errorf("Cut closed %d connections, want 1", n)
	}
	if got, err := echo(c, "two\n"); err == nil {
		t.Errorf("a cut connection still answered %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := echo(c2, "three\n"); err != nil || got != "three\n" {
		t.Fatalf("a new connection after the cut: %q, %v; want the echo", got, err)
	}
	if got := p.Conns(); got != 2 {
		t.Errorf("Conns %d, want 2", got)
	}
}

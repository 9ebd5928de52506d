package bucket

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFencedConnUserTimeout checks that a fenced connection's kernel gives
// up unacknowledged bytes by the deadline: TCP_USER_TIMEOUT is set, and no
// longer than the time left.
func TestFencedConnUserTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	const left = 5 * time.Second
	c, err := dialFenced(t.Context(), (&net.Dialer{}).DialContext, "tcp", ln.Addr().String(), time.Now().Add(left))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*fencedConn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var gerr error
	if err := raw.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	if ms <= 0 || ms > int(left.Milliseconds()) {
		t.Fatalf("TCP_USER_TIMEOUT = %d ms; want in (0, %d]", ms, left.Milliseconds())
	}
}

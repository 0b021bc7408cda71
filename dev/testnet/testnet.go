// Package testnet gives tests network addresses with a guaranteed behaviour.
//
// The usual way to get "an address nobody listens on" — listen on port 0, note the address, close
// the listener — leaves the port free for any other test running in parallel to take, and then the
// "dead" address answers. RefusingAddr holds the port for the whole test instead.
package testnet

import (
	"fmt"
	"net"
	"syscall"
	"testing"
)

// RefusingAddr returns a loopback "host:port" that refuses every TCP connection (ECONNREFUSED)
// until the test ends. The port is held by a socket that is bound but never listens, so no other
// process or test can listen on it meanwhile; the socket is closed by t.Cleanup.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testnet: bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testnet: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("testnet: bound address is %T, not IPv4", sa)
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(in4.Port))
}

package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestRefusingAddrRefusesAndCannotBeTaken(t *testing.T) {
	addr := RefusingAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded, want connection refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("listen on %s succeeded while the test holds it", addr)
	}
}

package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// A child told to listen on a port picked for it can find the port taken: between the pick (a
// listener on 127.0.0.1:0, closed at once) and the child's bind, any process can get it, and a
// loaded machine running several test binaries does so often enough, most of all through the
// local port of an outgoing connection, which the kernel takes from the same ephemeral range.
// No pick can prevent that; the start is tried again with fresh ports instead ([OnFreePorts]),
// once the child has said that it could not bind ([ErrAddrInUse]).

// ErrAddrInUse is wrapped by the error of Process.Start and StartDetached when the process did
// not become ready and its log, since this start, says that an address was already in use: a
// port it was given had been taken. [OnFreePorts] then starts it again on fresh ports.
var ErrAddrInUse = errors.New("address already in use")

// PortAttempts is how many sets of fresh ports [OnFreePorts] tries.
const PortAttempts = 5

// addrInUse is what every server here writes when its bind fails: Go's syscall.EADDRINUSE text
// (nats-server, Alertmanager, the services), ClickHouse's "Address already in use" (Code: 210),
// Java's BindException (ZooKeeper).
var addrInUse = []byte("address already in use")

// maxLogScan bounds how much of a start's log is searched for addrInUse.
const maxLogScan = 4 << 20

// bindError wraps err with ErrAddrInUse when spec's log, since run r began, says that an address
// was in use.
func bindError(spec *Spec, r *run, err error) error {
	if logSaysAddrInUse(spec.Log, r.logStart) {
		return fmt.Errorf("%w: %w", ErrAddrInUse, err)
	}
	return err
}

func logSaysAddrInUse(path string, from int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, maxLogScan))
	if err != nil {
		return false
	}
	return bytes.Contains(bytes.ToLower(b), addrInUse)
}

// FreePorts returns n distinct loopback TCP ports, each free a moment ago (see [OnFreePorts] for
// what may happen to one before a child binds it).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	// Held open until all are picked, so that no port comes twice.
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		lns = append(lns, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// OnFreePorts calls start with n fresh loopback ports ([FreePorts]), and again with fresh ones
// each time start fails with an error wrapping [ErrAddrInUse], up to [PortAttempts] times in
// all. It returns the ports of the start that succeeded. start builds whatever listens on them
// (a Spec, a server's description, a cluster whose nodes name each other's ports) and starts it
// with a readiness check on them, so that a child that lost a port fails its start instead of
// running without it; what it built for a failed attempt must be left stopped.
func OnFreePorts(ctx context.Context, n int, start func(ctx context.Context, ports []int) error) ([]int, error) {
	var err error
	for attempt := 1; attempt <= PortAttempts; attempt++ {
		var ports []int
		if ports, err = FreePorts(n); err != nil {
			return nil, err
		}
		if err = start(ctx, ports); err == nil {
			return ports, nil
		}
		if !errors.Is(err, ErrAddrInUse) || ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%d sets of free ports were each taken before the process bound them: %w", PortAttempts, err)
}

// StartOnFreePorts is [OnFreePorts] for one process: build describes it on the n ports (its
// Ready must check them), and the process started is returned with its ports. A process that
// lost a port is dropped and a new one built on fresh ports.
func StartOnFreePorts(ctx context.Context, n int, build func(ports []int) (Spec, error)) (*Process, []int, error) {
	var p *Process
	ports, err := OnFreePorts(ctx, n, func(ctx context.Context, ports []int) error {
		spec, err := build(ports)
		if err != nil {
			return err
		}
		if p, err = New(spec); err != nil {
			return err
		}
		return p.Start(ctx)
	})
	if err != nil {
		return nil, nil, err
	}
	return p, ports, nil
}

package proxy

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
)

// Balancing policies across engines.
const (
	// PolicyLeastInFlight sends each request to the engine with the fewest requests in flight
	// through this gateway, ties broken round-robin.
	PolicyLeastInFlight = "least_in_flight"
	// PolicyRoundRobin cycles through the engines.
	PolicyRoundRobin = "round_robin"
)

// upstream is one engine.
type upstream struct {
	url      *url.URL
	name     string // base URL as configured, recorded in request.finished
	inflight atomic.Int64
}

// balancer picks an engine per request.
type balancer struct {
	ups    []*upstream
	policy string
	next   atomic.Uint64
}

// ParseUpstreams parses a comma-separated list of engine base URLs (http or https).
func ParseUpstreams(list string) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("upstream %q is not an http(s)://host:port URL", s)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no upstream URL given")
	}
	return out, nil
}

func newBalancer(urls []*url.URL, policy string) (*balancer, error) {
	switch policy {
	case "", PolicyLeastInFlight:
		policy = PolicyLeastInFlight
	case PolicyRoundRobin:
	default:
		return nil, fmt.Errorf("balancing policy %q: want %s or %s", policy, PolicyLeastInFlight, PolicyRoundRobin)
	}
	b := &balancer{policy: policy}
	for _, u := range urls {
		b.ups = append(b.ups, &upstream{url: u, name: u.String()})
	}
	if len(b.ups) == 0 {
		return nil, fmt.Errorf("no upstream")
	}
	return b, nil
}

// pick returns the engine for the next request and counts it in flight; call release after.
func (b *balancer) pick() *upstream {
	n := len(b.ups)
	if n == 1 {
		u := b.ups[0]
		u.inflight.Add(1)
		return u
	}
	start := int(b.next.Add(1) % uint64(n))
	best := b.ups[start]
	if b.policy == PolicyLeastInFlight {
		for i := 1; i < n; i++ {
			u := b.ups[(start+i)%n]
			if u.inflight.Load() < best.inflight.Load() {
				best = u
			}
		}
	}
	best.inflight.Add(1)
	return best
}

func (u *upstream) release() { u.inflight.Add(-1) }

package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for the processes the harness starts are picked below the kernel's
// ephemeral range (ip_local_port_range), where no outgoing connection and no
// listener on port 0 ever lands, so a port the harness checked cannot be
// taken by another test's connection before the member binds it. Within the
// process no port is handed out twice. Another process that picks ports the
// same way can still collide; starting a cluster retries with fresh ports when
// a member cannot bind.

var ports struct {
	mu    sync.Mutex
	given map[int]bool
}

// lowestPort is the lowest port the harness picks.
const lowestPort = 15000

// ephemeralLow returns the lowest port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > lowestPort+1000 {
				return lo
			}
		}
	}
	return 32768
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	hi := ephemeralLow()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10000 {
			return nil, fmt.Errorf("harness: no free loopback port in [%d, %d)", lowestPort, hi)
		}
		p := lowestPort + rand.IntN(hi-lowestPort)
		if ports.given[p] || !bindable(p) {
			continue
		}
		ports.given[p] = true
		out = append(out, p)
	}
	return out, nil
}

// bindable reports whether a listener can bind 127.0.0.1:p now.
func bindable(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// LoopbackURL returns scheme://127.0.0.1:port.
func LoopbackURL(scheme string, port int) string {
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
}

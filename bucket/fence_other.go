//go:build !linux

package bucket

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available: the
// fence then rests on the refused writes alone.
func setUserTimeout(net.Conn, time.Duration) error { return nil }

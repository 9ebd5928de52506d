package snapshot_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind, such as
// a lease renewal that Save did not stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package snapshot_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/childproc"
)

// TestMain fails the package when a test leaves goroutines behind, such as
// a lease renewal that Save did not stop or a fake S3 server still running.
func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

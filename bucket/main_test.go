package bucket_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/childproc"
)

// TestMain fails the package when a test leaves goroutines behind: HTTP
// connections, fake servers or server processes that were not shut down.
func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

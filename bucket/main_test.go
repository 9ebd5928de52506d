package bucket_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: HTTP
// connections, fake servers or server processes that were not shut down.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

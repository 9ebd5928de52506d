package s3test

import (
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/childproc"
)

func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

// TestVersityGWStopsWithTheTest checks that the server answers while its test
// runs and that its process is gone once the test has ended.
func TestVersityGWStopsWithTheTest(t *testing.T) {
	var srv *Server
	t.Run("Serve", func(t *testing.T) {
		srv = StartVersityGW(t)
		if srv.pid == 0 {
			t.Fatal("no process id recorded")
		}
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(srv.Endpoint + "/" + srv.Bucket)
		if err != nil {
			t.Fatalf("GET %s: %v", srv.Endpoint, err)
		}
		resp.Body.Close()
		// Unsigned requests are refused, which proves a live S3 server.
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("unsigned GET answered %d; want 403", resp.StatusCode)
		}
	})
	if err := syscall.Kill(srv.pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("versitygw process %d still exists after its test ended (kill 0: %v)", srv.pid, err)
	}
}

func TestClock(t *testing.T) {
	c := NewClock(Start)
	c.Advance(time.Hour)
	if got := c.Since(Start); got != time.Hour {
		t.Fatalf("Since(Start) = %v after Advance(1h); want 1h", got)
	}
	c.Set(Start)
	if !c.Now().Equal(Start) {
		t.Fatalf("Now() = %v after Set(Start)", c.Now())
	}
}

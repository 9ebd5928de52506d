package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runSweeper runs the sweeper binary (built as the Dockerfile builds it) with
// args and the extra environment, and returns its exit code and everything it
// logged.
func runSweeper(t *testing.T, args []string, env map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildSweeper(t), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("sweeper %s: %v\n%s", strings.Join(args, " "), err, out.String())
	return 0, ""
}

// logLines returns the lines of a log that contain substr.
func logLines(logs, substr string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

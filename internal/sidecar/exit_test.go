package sidecar

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cairnstore/cairn/sweep"
)

func TestExitCode(t *testing.T) {
	incomplete := fmt.Errorf("%w: 2 of 9 keys", sweep.ErrIncomplete)
	stopped := fmt.Errorf("%w: a delete request failed", sweep.ErrStopped)
	tests := []struct {
		name   string
		err    error
		code   int
		result string
	}{
		{"Success", nil, ExitOK, "success"},
		{"Usage", fmt.Errorf("%w: bad flag", ErrUsage), ExitUsage, "failure"},
		{"Failure", errors.New("etcd is down"), ExitFailure, "failure"},
		{"Partial", incomplete, ExitPartial, "partial"},
		{"PartialThenStopped", errors.Join(stopped, incomplete), ExitFailure, "failure"},
		{"PartialThenCancelled", errors.Join(context.Canceled, incomplete), ExitFailure, "failure"},
		{"VerifyProblems", fmt.Errorf("%w: 1", ErrVerifyProblems), ExitVerify, "verify_problems"},
		{"PartialAndVerifyProblems", errors.Join(incomplete, ErrVerifyProblems), ExitVerify, "verify_problems"},
		{"LockHeld", fmt.Errorf("%w (run x)", ErrLockHeld), ExitLockHeld, "lock_held"},
		{"LockLost", fmt.Errorf("%w: gone", ErrLockLost), ExitFailure, "lock_lost"},
		{"Interrupted", fmt.Errorf("%w: before the next batch", ErrInterrupted), ExitInterrupted, "interrupted"},
		{"InterruptedWithPartial", errors.Join(fmt.Errorf("%w: %w", sweep.ErrStopped, ErrInterrupted), incomplete), ExitInterrupted, "interrupted"},
		{"Uncovered", fmt.Errorf("sweep x: %w", &sweep.UncoveredError{Unregistered: true}), ExitUncovered, "uncovered"},
		{"EmptyStore", fmt.Errorf("%w: 3", ErrEmptyStore), ExitFailure, "failure"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.code {
				t.Errorf("ExitCode(%v) = %d; want %d", tc.err, got, tc.code)
			}
			if got := Result(tc.err); got != tc.result {
				t.Errorf("Result(%v) = %q; want %q", tc.err, got, tc.result)
			}
		})
	}
}

func TestResultsAreRegistered(t *testing.T) {
	for _, err := range []error{nil, ErrUsage, ErrLockHeld, ErrLockLost, ErrInterrupted, ErrVerifyProblems, sweep.ErrIncomplete, sweep.ErrUncovered, errors.New("x")} {
		found := false
		for _, r := range results {
			found = found || r == Result(err)
		}
		if !found {
			t.Errorf("Result(%v) = %q is not in results", err, Result(err))
		}
	}
}

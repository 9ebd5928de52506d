package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

type instanceEnv struct {
	t   *testing.T
	ctx context.Context
	s   cairn.InstanceStore
}

type instanceCase struct {
	name string
	run  func(e *instanceEnv)
}

// record is the upstream fixture record.
func record() cairn.InstanceRecord {
	return cairn.InstanceRecord{Key: "thread-1", Provider: "fake", ProviderSandboxID: "sb-1", ThreadID: "thread-1", UpdatedAt: 1}
}

func (e *instanceEnv) upsert(rec cairn.InstanceRecord) {
	e.t.Helper()
	noErr(e.t, fmt.Sprintf("Upsert(%q)", rec.Key), e.s.Upsert(e.ctx, rec))
}

func (e *instanceEnv) get(key string) *cairn.InstanceRecord {
	e.t.Helper()
	rec, err := e.s.Get(e.ctx, key)
	noErr(e.t, fmt.Sprintf("Get(%q)", key), err)
	return rec
}

// expect checks that key holds want, or nothing when want is nil.
func (e *instanceEnv) expect(key string, want *cairn.InstanceRecord) {
	e.t.Helper()
	got := e.get(key)
	switch {
	case got == nil && want == nil:
	case got == nil:
		e.t.Errorf("Get(%q) = nil, want %+v", key, *want)
	case want == nil:
		e.t.Errorf("Get(%q) = %+v, want nil", key, *got)
	case *got != *want:
		e.t.Errorf("Get(%q) = %+v, want %+v", key, *got, *want)
	}
}

// instanceCases are IC-01 to IC-07 and the rules of contract A15.
func instanceCases() []instanceCase {
	return []instanceCase{
		{"IC-01/MissingKeyIsNil", func(e *instanceEnv) {
			e.expect("absent", nil)
		}},
		{"IC-02/RoundTripAllFields", func(e *instanceEnv) {
			rec := record()
			rec.LatestSnapshotID, rec.LatestRunID = "snap-1", "run-1"
			e.upsert(rec)
			e.expect(rec.Key, &rec)
		}},
		{"IC-03/AbsentOptionalFields", func(e *instanceEnv) {
			rec := record()
			e.upsert(rec)
			e.expect(rec.Key, &rec)
			got := e.get(rec.Key)
			if got == nil {
				return
			}
			b, err := json.Marshal(got)
			noErr(e.t, "json.Marshal", err)
			var fields map[string]any
			noErr(e.t, "json.Unmarshal", json.Unmarshal(b, &fields))
			for _, k := range []string{"latestSnapshotId", "latestRunId"} {
				if _, ok := fields[k]; ok {
					e.t.Errorf("the JSON form of a record without %s has the key: %s", k, b)
				}
			}
		}},
		{"IC-04/UpsertReplacesWholeRecord", func(e *instanceEnv) {
			first := record()
			first.LatestSnapshotID, first.LatestRunID = "snap-1", "run-1"
			e.upsert(first)
			second := record()
			second.ProviderSandboxID, second.UpdatedAt = "sb-2", 2
			e.upsert(second)
			e.expect(second.Key, &second)
		}},
		{"IC-05/IsolatedByKey", func(e *instanceEnv) {
			a, b := record(), record()
			a.Key = "a"
			b.Key, b.ProviderSandboxID = "b", "sb-b"
			e.upsert(a)
			e.upsert(b)
			e.expect("a", &a)
			e.expect("b", &b)
		}},
		{"IC-06/Delete", func(e *instanceEnv) {
			e.upsert(record())
			noErr(e.t, "Delete", e.s.Delete(e.ctx, "thread-1"))
			e.expect("thread-1", nil)
		}},
		{"IC-07/DeleteMissingKey", func(e *instanceEnv) {
			other := record()
			other.Key = "kept"
			e.upsert(other)
			noErr(e.t, "Delete(absent)", e.s.Delete(e.ctx, "absent"))
			noErr(e.t, "second Delete(absent)", e.s.Delete(e.ctx, "absent"))
			e.expect("kept", &other)
		}},
		{"DeleteIsolation", func(e *instanceEnv) {
			a, b := record(), record()
			a.Key, b.Key = "a", "ab"
			e.upsert(a)
			e.upsert(b)
			noErr(e.t, "Delete(a)", e.s.Delete(e.ctx, "a"))
			e.expect("a", nil)
			e.expect("ab", &b)
		}},
		{"LastWriteWins", func(e *instanceEnv) {
			rec := record()
			for i := range 5 {
				rec.UpdatedAt = float64(10 - i)
				rec.LatestRunID = fmt.Sprintf("run-%d", i)
				e.upsert(rec)
			}
			e.expect(rec.Key, &rec)
		}},
		{"ClearOptionalFields", func(e *instanceEnv) {
			rec := record()
			rec.LatestSnapshotID = "snap"
			e.upsert(rec)
			rec.LatestSnapshotID = ""
			rec.LatestRunID = "run"
			e.upsert(rec)
			e.expect(rec.Key, &rec)
		}},
		{"Copies", func(e *instanceEnv) {
			rec := record()
			rec.LatestSnapshotID = "snap"
			e.upsert(rec)
			got := e.get(rec.Key)
			if got == nil {
				e.t.Fatal("Get = nil after Upsert")
			}
			got.ProviderSandboxID, got.LatestSnapshotID, got.UpdatedAt = "changed", "", 99
			e.expect(rec.Key, &rec)
		}},
		{"NoValidation", func(e *instanceEnv) {
			keys := []string{"", " ", "a/b", "a\x00b", "é", "\xff", strings.Repeat("k", 500)}
			for i, k := range keys {
				rec := cairn.InstanceRecord{Key: k, Provider: "", ProviderSandboxID: "", ThreadID: "\xed\xa0\x80", UpdatedAt: -float64(i) - 0.5}
				e.upsert(rec)
			}
			for i, k := range keys {
				rec := cairn.InstanceRecord{Key: k, Provider: "", ProviderSandboxID: "", ThreadID: "\xed\xa0\x80", UpdatedAt: -float64(i) - 0.5}
				e.expect(k, &rec)
			}
		}},
		{"Context/Canceled", func(e *instanceEnv) {
			// A store need not fail with an ended context, but when it fails,
			// the error is the context's, and a failed Upsert or Delete
			// changes nothing.
			kept := record()
			e.upsert(kept)
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			other := record()
			other.ProviderSandboxID = "other"
			if err := e.s.Upsert(ctx, other); err != nil {
				expectErr(e.t, "Upsert with a cancelled context", err, context.Canceled)
				e.expect(kept.Key, &kept)
			}
			if err := e.s.Delete(ctx, kept.Key); err != nil {
				expectErr(e.t, "Delete with a cancelled context", err, context.Canceled)
				if e.get(kept.Key) == nil {
					e.t.Error("a failed Delete removed the record")
				}
			}
			if _, err := e.s.Get(ctx, kept.Key); err != nil {
				expectErr(e.t, "Get with a cancelled context", err, context.Canceled)
			}
		}},
		{"ConcurrentUpserts", func(e *instanceEnv) {
			errs := raceInstances(e, 12)
			for i, err := range errs {
				if err != nil {
					e.t.Errorf("upsert %d: %v", i, err)
				}
			}
			for i := range 12 {
				rec := record()
				rec.Key = fmt.Sprintf("k%02d", i)
				rec.UpdatedAt = float64(i)
				e.expect(rec.Key, &rec)
			}
		}},
	}
}

func raceInstances(e *instanceEnv, n int) []error {
	return race(n, func(i int) error {
		rec := record()
		rec.Key = fmt.Sprintf("k%02d", i)
		rec.UpdatedAt = float64(i)
		return e.s.Upsert(e.ctx, rec)
	})
}

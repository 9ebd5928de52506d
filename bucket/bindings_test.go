package bucket_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

func TestBindingKeys(t *testing.T) {
	tests := []struct {
		name string
		b    cairn.Binding
		key  string
		err  error
	}{
		{"Plain", cairn.Binding{Cluster: "etcd-00000000000000ff", Prefix: "tenant-a/"}, "cairn-bindings/etcd-00000000000000ff/74656e616e742d612f", nil},
		{"EmptyPrefix", cairn.Binding{Cluster: "c", Prefix: ""}, "cairn-bindings/c/-", nil},
		{"AnyBytes", cairn.Binding{Cluster: "c", Prefix: "a/\x00\xff"}, "cairn-bindings/c/612f00ff", nil},
		{"NoCluster", cairn.Binding{Prefix: "a/"}, "", bucket.ErrInvalidBinding},
		{"SlashInCluster", cairn.Binding{Cluster: "a/b", Prefix: "a/"}, "", bucket.ErrInvalidBinding},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := bucket.BindingKey(tc.b)
			if !errors.Is(err, tc.err) || key != tc.key {
				t.Fatalf("BindingKey(%+v) = %q, %v; want %q, %v", tc.b, key, err, tc.key, tc.err)
			}
			if tc.err != nil {
				return
			}
			m := bucket.NewMemory(nil)
			if err := bucket.Record(t.Context(), m, tc.b); err != nil {
				t.Fatal(err)
			}
			got, err := bucket.Bindings(t.Context(), m)
			if err != nil || !slices.Equal(got, []cairn.Binding{tc.b}) {
				t.Fatalf("Bindings = %v, %v; want [%+v]", got, err, tc.b)
			}
			if err := bucket.Unbind(t.Context(), m, tc.b); err != nil {
				t.Fatal(err)
			}
			if got, err := bucket.Bindings(t.Context(), m); err != nil || len(got) != 0 {
				t.Fatalf("after Unbind: %v, %v", got, err)
			}
		})
	}
	t.Run("ForeignKeyFailsTheListing", func(t *testing.T) {
		m := bucket.NewMemory(nil)
		if err := m.Put(t.Context(), bucket.BindingPrefix+"c/not-hex", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := bucket.Bindings(t.Context(), m); !errors.Is(err, bucket.ErrInvalidBinding) {
			t.Fatalf("Bindings = %v; want ErrInvalidBinding", err)
		}
	})
}

// TestBindRegistry: a store binding to a bucket without cairn objects writes
// the registry's marker; to a bucket that has some (written before bindings
// existed) it does not.
func TestBindRegistry(t *testing.T) {
	b := cairn.Binding{Cluster: "c", Prefix: "p/"}
	for _, tc := range []struct {
		name string
		seed []string
		want bool
	}{
		{"NewBucket", nil, true},
		{"OtherKeysOnly", []string{"unrelated/key"}, true},
		{"OldBlobs", []string{bucket.FileKey([]byte("x"))}, false},
		{"OldObjects", []string{cairn.ObjectPrefix + "00"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := bucket.NewMemory(nil)
			for _, k := range tc.seed {
				if err := m.Put(t.Context(), k, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			if err := bucket.Bind(t.Context(), m, b); err != nil {
				t.Fatal(err)
			}
			if got, err := bucket.HasRegistry(t.Context(), m); err != nil || got != tc.want {
				t.Fatalf("HasRegistry = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestBindWaitsForSweepsNotCoveringIt: a sweep marker that does not name the
// binding holds Bind back until it is removed; one that names it does not.
func TestBindWaitsForSweepsNotCoveringIt(t *testing.T) {
	b := cairn.Binding{Cluster: "c", Prefix: "p/"}
	other := cairn.Binding{Cluster: "c", Prefix: "q/"}
	m := bucket.NewMemory(nil)
	covering, err := bucket.BeginSweep(t.Context(), m, []cairn.Binding{other, b})
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.Bind(t.Context(), m, b); err != nil {
		t.Fatalf("Bind with only a covering sweep: %v", err)
	}
	foreign, err := bucket.BeginSweep(t.Context(), m, []cairn.Binding{other})
	if err != nil {
		t.Fatal(err)
	}
	if foreign == covering {
		t.Fatal("two sweeps of different coverage share a marker")
	}
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := bucket.Bind(short, m, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Bind while a sweep not covering it runs = %v; want it to wait until ctx ends", err)
	}
	done := make(chan error, 1)
	go func() { done <- bucket.Bind(t.Context(), m, b) }()
	if err := bucket.EndSweep(t.Context(), m, foreign); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Bind after the sweep ended: %v", err)
	}
}

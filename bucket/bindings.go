package bucket

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnstore/cairn"
)

// The keys of the binding registry (docs/design.md, "A bucket shared by
// several stores"). None of them is under a prefix a sweep lists.
const (
	// BindingPrefix holds one object per store that writes to the bucket:
	// BindingPrefix + cluster + "/" + the prefix in hex (BindingKey).
	BindingPrefix = "cairn-bindings/"
	// SweepMarkerPrefix holds one object per running sweep that may
	// delete: SweepMarkerPrefix + a random name, whose body lists the
	// bindings the sweep covers. A store that binds waits for the sweeps
	// that do not cover it.
	SweepMarkerPrefix = "cairn-sweeps/"
	// RegistryKey is the registry's marker: its presence says that every
	// store that wrote to the bucket has a binding. A store that binds to a
	// bucket without cairn objects writes it; for a bucket written before
	// bindings existed the operator writes it (the sweeper's -bind).
	RegistryKey = "cairn-registry"
)

// ErrInvalidBinding: a binding's cluster is not 1 to 64 bytes of ASCII
// letters, digits, '.', '_' and '-', or a key under BindingPrefix does not
// decode to a binding.
var ErrInvalidBinding = errors.New("bucket: invalid binding")

// ErrCannotBind: a store that records bindings was given a bucket that
// cannot list, read and put, which binding needs.
var ErrCannotBind = errors.New("bucket: the bucket cannot record a binding (it must read, put and list)")

// Binder is what binding needs of a bucket.
type Binder interface {
	Reader
	Putter
	Lister
}

// checkCluster returns ErrInvalidBinding unless c is a valid cluster name.
func checkCluster(c string) error {
	if len(c) == 0 || len(c) > 64 {
		return fmt.Errorf("%w: cluster %q must have 1 to 64 bytes", ErrInvalidBinding, c)
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-') {
			return fmt.Errorf("%w: cluster %q holds %q", ErrInvalidBinding, c, b)
		}
	}
	return nil
}

// BindingKey returns the key of b's binding object, or ErrInvalidBinding.
// The prefix is written in hex, so that any prefix makes a valid key; an
// empty prefix is "-".
func BindingKey(b cairn.Binding) (string, error) {
	if err := checkCluster(b.Cluster); err != nil {
		return "", err
	}
	p := hex.EncodeToString([]byte(b.Prefix))
	if p == "" {
		p = "-"
	}
	return BindingPrefix + b.Cluster + "/" + p, nil
}

// parseBindingKey is BindingKey's inverse.
func parseBindingKey(key string) (cairn.Binding, error) {
	rest, ok := strings.CutPrefix(key, BindingPrefix)
	c, p, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return cairn.Binding{}, fmt.Errorf("%w: key %q", ErrInvalidBinding, key)
	}
	prefix := []byte{}
	if p != "-" {
		var err error
		if prefix, err = hex.DecodeString(p); err != nil || len(prefix) == 0 {
			return cairn.Binding{}, fmt.Errorf("%w: key %q", ErrInvalidBinding, key)
		}
	}
	b := cairn.Binding{Cluster: c, Prefix: string(prefix)}
	if err := checkCluster(c); err != nil {
		return b, fmt.Errorf("%w (key %q)", err, key)
	}
	return b, nil
}

// Bindings lists the bindings recorded in the bucket, sorted by key. A key
// under BindingPrefix that is not a binding's fails the listing with
// ErrInvalidBinding: a sweep must not decide on what it cannot read.
func Bindings(ctx context.Context, l Lister) ([]cairn.Binding, error) {
	var out []cairn.Binding
	for o, err := range Objects(ctx, l, BindingPrefix, 0) {
		if err != nil {
			return nil, fmt.Errorf("bucket: list bindings: %w", err)
		}
		b, err := parseBindingKey(o.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// HasRegistry reports whether the bucket holds the registry's marker
// (RegistryKey).
func HasRegistry(ctx context.Context, r Reader) (bool, error) {
	_, err := r.Head(ctx, RegistryKey)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("bucket: look for the binding registry's marker: %w", err)
	}
}

// MarkRegistry writes the registry's marker: the caller asserts that every
// store that has written to the bucket has a binding there. The sweeper's
// -bind does it after recording the bindings of the stores it covers.
func MarkRegistry(ctx context.Context, p Putter) error {
	if _, err := p.PutIfAbsent(ctx, RegistryKey, []byte("{\"registry\":1}\n")); err != nil {
		return fmt.Errorf("bucket: write the binding registry's marker: %w", err)
	}
	return nil
}

// Record writes b's binding object, idempotently, and nothing else: the
// operator's step for stores that wrote to the bucket before bindings
// existed. A store that writes binds with Bind.
func Record(ctx context.Context, p Putter, b cairn.Binding) error {
	key, err := BindingKey(b)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(b)
	if _, err := p.PutIfAbsent(ctx, key, append(body, '\n')); err != nil {
		return fmt.Errorf("bucket: record the binding %s: %w", key, err)
	}
	return nil
}

// Unbind removes b's binding: the operator's step for a store removed for
// good, whose references no sweep needs to respect any more.
func Unbind(ctx context.Context, d Deleter, b cairn.Binding) error {
	key, err := BindingKey(b)
	if err != nil {
		return err
	}
	if _, err := d.Delete(ctx, []string{key}); err != nil {
		return fmt.Errorf("bucket: remove the binding %s: %w", key, err)
	}
	return nil
}

// Bind makes the bucket safe for b's store to write to and rely on, in this
// order:
//
//  1. it records b's binding (Record), so that every sweep that lists the
//     bindings from now on sees it;
//  2. when the registry's marker is missing and the bucket holds no object
//     under the prefixes a sweep lists, it writes the marker: the bucket is
//     new, and every store that writes to it binds first;
//  3. it waits until no sweep marker that does not cover b remains: such a
//     sweep may have listed the bindings before step 1 and may delete what
//     b's store is about to rely on. A marker is written before its sweep
//     lists the bindings and removed when the sweep has finished deleting,
//     so once step 3 ends, every sweep that could delete in the bucket
//     either covers b or saw its binding (and refuses).
//
// It returns ErrInvalidBinding for an invalid cluster, the bucket's errors,
// and ctx's error when ctx ends while it waits.
func Bind(ctx context.Context, bkt Binder, b cairn.Binding) error {
	if err := Record(ctx, bkt, b); err != nil {
		return err
	}
	ok, err := HasRegistry(ctx, bkt)
	if err != nil {
		return err
	}
	if !ok {
		empty := true
		for _, prefix := range []string{cairn.ArtifactBlobPrefix, cairn.FileBlobPrefix, cairn.ObjectPrefix} {
			page, err := bkt.List(ctx, prefix, "", 1)
			if err != nil {
				return fmt.Errorf("bucket: bind: list %q: %w", prefix, err)
			}
			empty = empty && len(page.Objects) == 0
		}
		if empty {
			if err := MarkRegistry(ctx, bkt); err != nil {
				return err
			}
		}
	}
	for attempt := 0; ; attempt++ {
		others, err := SweepsNotCovering(ctx, bkt, b)
		if err != nil {
			return err
		}
		if len(others) == 0 {
			return nil
		}
		wait := min(50*time.Millisecond<<min(attempt, 5), time.Second)
		select {
		case <-ctx.Done():
			return fmt.Errorf("bucket: bind %s/%q: waiting for the sweep %s, which does not cover it, to finish: %w", b.Cluster, b.Prefix, others[0], ctx.Err())
		case <-time.After(wait):
		}
	}
}

// sweepMarker is the body of a sweep marker.
type sweepMarker struct {
	Covers []cairn.Binding `json:"covers"`
}

// BeginSweep writes the sweep marker of a sweep that covers covers and
// returns its key. The caller writes it before it lists the bindings and
// removes it (EndSweep) once it has no delete left in flight. The key depends
// on covers alone, so a run of a sweep removes the marker an earlier run of
// the same configuration left; two sweeps of one configuration must not run
// at once (the sweeper's lock sees to it).
func BeginSweep(ctx context.Context, p Putter, covers []cairn.Binding) (string, error) {
	body, _ := json.Marshal(sweepMarker{Covers: covers})
	sum := sha256.Sum256(body)
	key := SweepMarkerPrefix + hex.EncodeToString(sum[:12])
	if _, err := p.PutIfAbsent(ctx, key, append(body, '\n')); err != nil {
		return "", fmt.Errorf("bucket: write the sweep marker %s: %w", key, err)
	}
	return key, nil
}

// EndSweep removes the sweep marker key.
func EndSweep(ctx context.Context, d Deleter, key string) error {
	if _, err := d.Delete(ctx, []string{key}); err != nil {
		return fmt.Errorf("bucket: remove the sweep marker %s: %w", key, err)
	}
	return nil
}

// SweepsNotCovering returns the keys of the sweep markers in the bucket that
// do not cover b. A marker that does not decode counts as not covering.
func SweepsNotCovering(ctx context.Context, bkt Binder, b cairn.Binding) ([]string, error) {
	var out []string
	for o, err := range Objects(ctx, bkt, SweepMarkerPrefix, 0) {
		if err != nil {
			return nil, fmt.Errorf("bucket: list sweep markers: %w", err)
		}
		data, err := bkt.Get(ctx, o.Key)
		if errors.Is(err, ErrNotFound) {
			continue // that sweep has ended
		}
		if err != nil {
			return nil, fmt.Errorf("bucket: read the sweep marker %s: %w", o.Key, err)
		}
		var m sweepMarker
		if json.Unmarshal(data, &m) == nil && slices.Contains(m.Covers, b) {
			continue
		}
		out = append(out, o.Key)
	}
	return out, nil
}

// bound remembers the (bucket, binding) pairs this process has bound, so that
// a store binds once per bucket and process.
var bound sync.Map

type boundKey struct {
	bucket any
	b      cairn.Binding
}

// BindStore binds store to bkt (Bind) when the store records bindings
// (cairn.Bound) and has one, once per bucket and process when the bucket's
// value is comparable, and does nothing for other stores. Writers call it
// before their first claim: bucket.UploadBlobs, snapshot's capture and an
// etcd store with Options.Objects do. It returns ErrCannotBind when the
// store has a binding and bkt cannot read, put and list, and Bind's errors.
func BindStore(ctx context.Context, store any, bkt any) error {
	s, ok := store.(cairn.Bound)
	if !ok {
		return nil
	}
	b, has, err := s.BucketBinding(ctx)
	if err != nil {
		return fmt.Errorf("bucket: the store's binding: %w", err)
	}
	if !has {
		return nil
	}
	bb, ok := bkt.(Binder)
	if !ok {
		return fmt.Errorf("%w: %T", ErrCannotBind, bkt)
	}
	var key *boundKey
	if t := reflect.TypeOf(bkt); t != nil && t.Comparable() {
		key = &boundKey{bucket: bkt, b: b}
		if _, done := bound.Load(*key); done {
			return nil
		}
	}
	if err := Bind(ctx, bb, b); err != nil {
		return err
	}
	if key != nil {
		bound.Store(*key, struct{}{})
	}
	return nil
}

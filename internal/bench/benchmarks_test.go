package bench

import (
	"bytes"
	"context"
	"testing"

	"github.com/cairnstore/cairn"
)

// The go test benchmarks of the hot paths. Each starts its own etcd member
// with fsync on, as the bench command does; compare BenchmarkAppend200 with
// BenchmarkBareTxn200, which sends a bare transaction of the same size.

// appendBench runs b.N appends of a 200-entry checkpoint to store.
func appendBench(b *testing.B, store cairn.Store) {
	ctx := context.Background()
	r := &runner{cfg: Full()}
	ch, err := newChain(ctx, store, "bench-thread")
	if err != nil {
		b.Fatal(err)
	}
	build := r.b1Builder(ch)
	for range b1Warmup {
		if err := ch.append(ctx, build()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		in := build()
		b.StartTimer()
		if err := ch.append(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend200(b *testing.B) {
	cli, stop, err := (&runner{tmp: b.TempDir(), log: &bytes.Buffer{}}).etcd(context.Background(), "append")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	store, err := newEtcdStore(cli, b1Prefix)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	appendBench(b, store)
}

func BenchmarkAppend200Memory(b *testing.B) {
	store, err := newMemoryStore()
	if err != nil {
		b.Fatal(err)
	}
	appendBench(b, store)
}

func BenchmarkBareTxn200(b *testing.B) {
	ctx := context.Background()
	cli, stop, err := (&runner{tmp: b.TempDir(), log: &bytes.Buffer{}}).etcd(ctx, "bare")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	store, err := newEtcdStore(cli, b1Prefix)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	// Size the bare transaction as B1 does: after an append of the same
	// checkpoint, under a tally that records request sizes.
	ch, err := newChain(ctx, store, "bench-thread")
	if err != nil {
		b.Fatal(err)
	}
	build := (&runner{cfg: Full()}).b1Builder(ch)
	tctx, t := withTally(ctx, true)
	for range 3 {
		if err := ch.append(tctx, build()); err != nil {
			b.Fatal(err)
		}
	}
	size, _ := writeTxnSize(t.snapshot())
	bare, err := newBareTxn(ctx, cli, b1BarePrefix, size)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := bare.do(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

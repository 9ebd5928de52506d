package snapshot

import (
	"context"
	"sync"
)

// forEach runs fn on every element of items, n at a time, and returns the
// first error; after it, no new call starts and ctx given to fn ends.
func forEach[T any](ctx context.Context, n int, items []T, fn func(ctx context.Context, worker int, it T) error) error {
	return forEachFed(ctx, min(n, len(items)), func(ctx context.Context, send func(T) bool) error {
		for _, it := range items {
			if !send(it) {
				break
			}
		}
		return nil
	}, fn)
}

// forEachFed runs fn, n at a time, on every element that feed sends, as
// forEach does. send blocks until a worker takes the element, and reports
// false, having taken nothing, once the work has failed or ctx has ended;
// feed then returns. An error of feed counts as a failure of the work like
// one of fn: the first is returned.
func forEachFed[T any](ctx context.Context, n int, feed func(ctx context.Context, send func(T) bool) error, fn func(ctx context.Context, worker int, it T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan T)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	fail := func(err error) { once.Do(func() { first = err; cancel(err) }) }
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if err := fn(ctx, w, it); err != nil {
					fail(err)
				}
			}
		}()
	}
	send := func(it T) bool {
		select {
		case next <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if err := feed(ctx, send); err != nil {
		fail(err)
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}

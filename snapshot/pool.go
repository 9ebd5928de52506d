package snapshot

import (
	"context"
	"sync"
)

// forEach runs fn on every element of items, n at a time, and returns the
// first error; after it, no new call starts and ctx given to fn ends.
func forEach[T any](ctx context.Context, n int, items []T, fn func(ctx context.Context, worker int, it T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if n > len(items) {
		n = len(items)
	}
	next := make(chan T)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if err := fn(ctx, w, it); err != nil {
					once.Do(func() { first = err; cancel(err) })
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case next <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}

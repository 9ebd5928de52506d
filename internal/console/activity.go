package console

import (
	"context"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/keys"
)

// activity is one tenant's threads ordered by their last activity: the mod
// revision of their thread records. It is built by one paged range read of
// the records (keys only) at a revision R, then kept current by a watch of
// the records from R+1, so that a page of the list costs O(page) and no
// read of every record. etcd's own sort (a sorted range with a limit)
// would read and sort every record inside etcd on every page.
//
// Entries are kept in ascending revision; a thread written again gets a
// new entry at the end (watch events come in revision order), and its old
// entry goes stale: an entry is live when its revision is the thread's in
// rev. Stale entries are dropped when they are more than half.
type activity struct {
	mu      sync.Mutex
	ready   bool
	entries []actEntry
	rev     map[string]int64
	stale   int
	// done is closed when the watch goroutine has ended.
	done chan struct{}
}

type actEntry struct {
	thread string
	rev    int64
}

// activityFor returns tenant t's index, building it and starting its
// watch when it is not ready (the first request, or the watch ended).
func (c *Console) activityFor(ctx context.Context, t int) (*activity, error) {
	c.actMu.Lock()
	a := c.act[t]
	if a == nil {
		a = &activity{}
		c.act[t] = a
	}
	c.actMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return a, nil
	}
	if a.done != nil {
		<-a.done // the last watch ended; it set ready to false
	}
	layout := c.cfg.Stores[t].Layout()
	threads := layout.Threads()
	rev := map[string]int64{}
	var entries []actEntry
	var at int64
	err := scanRev(ctx, c.cfg.Client, threads, keys.PrefixEnd(threads), true, &at, func(kv *mvccpb.KeyValue) error {
		id, err := layout.DecodeThread(kv.Key)
		if err != nil {
			return err
		}
		rev[id] = kv.ModRevision
		entries = append(entries, actEntry{thread: id, rev: kv.ModRevision})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(x, y actEntry) int { return int(x.rev - y.rev) })
	a.entries, a.rev, a.stale, a.ready = entries, rev, 0, true
	a.done = make(chan struct{})
	wch := c.cfg.Client.Watch(c.watchCtx, string(threads), clientv3.WithRange(string(keys.PrefixEnd(threads))), clientv3.WithRev(at+1))
	c.watches.Add(1)
	go func() {
		defer c.watches.Done()
		defer close(a.done)
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			a.apply(layout, resp.Events)
		}
		a.mu.Lock()
		a.ready = false
		a.mu.Unlock()
	}()
	return a, nil
}

// apply records the watch's events.
func (a *activity) apply(layout keys.Layout, evs []*clientv3.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		id, err := layout.DecodeThread(ev.Kv.Key)
		if err != nil {
			continue
		}
		if _, ok := a.rev[id]; ok {
			a.stale++
		}
		if ev.Type == clientv3.EventTypeDelete {
			delete(a.rev, id)
			continue
		}
		a.rev[id] = ev.Kv.ModRevision
		a.entries = append(a.entries, actEntry{thread: id, rev: ev.Kv.ModRevision})
	}
	if a.stale > len(a.entries)/2 {
		live := a.entries[:0]
		for _, e := range a.entries {
			if a.rev[e.thread] == e.rev {
				live = append(live, e)
			}
		}
		a.entries, a.stale = live, 0
	}
}

// page returns up to n threads, newest activity first, whose activity is
// older than before (0: from the newest), with each one's revision.
func (a *activity) page(before int64, n int) []actEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := len(a.entries)
	if before > 0 {
		i, _ = slices.BinarySearchFunc(a.entries, before, func(e actEntry, r int64) int {
			switch {
			case e.rev < r:
				return -1
			case e.rev > r:
				return 1
			}
			return 0
		})
	}
	var out []actEntry
	for i--; i >= 0 && len(out) < n; i-- {
		if e := a.entries[i]; a.rev[e.thread] == e.rev {
			out = append(out, e)
		}
	}
	return out
}

// scanRev calls fn for every key in [start, end) (without its value when
// keysOnly), in pages, all at one revision, which it stores in *at.
func scanRev(ctx context.Context, client *clientv3.Client, start, end []byte, keysOnly bool, at *int64, fn func(*mvccpb.KeyValue) error) error {
	from := string(start)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(string(end)), clientv3.WithLimit(scanPage)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if *at > 0 {
			opts = append(opts, clientv3.WithRev(*at))
		}
		resp, err := client.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		*at = resp.Header.Revision
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

package console

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/keys"
)

// threadsPageSize is the number of threads a page of the list shows.
const threadsPageSize = 50

// readParallel bounds the concurrent reads of one page.
const readParallel = 8

type threadRow struct {
	ID          string
	Head        string
	Checkpoints int64
	Reason      string
	Label       string
	CreatedAt   float64
}

type threadsData struct {
	Query string
	Rows  []threadRow
	// Next is the address of the next page, "" on the last. It is built
	// from escaped parts only (url.QueryEscape, a number).
	Next template.URL
	// Order says how the rows are sorted.
	Order string
}

// threadsPage lists the tenant's threads: newest activity first, or those
// whose id starts with ?q, by id. Each page is one etcd range request with
// a limit (the activity order pages by mod revision, the search by key),
// then a few reads per shown thread.
func (c *Console) threadsPage(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	q := r.URL.Query()
	data := threadsData{Query: q.Get("q")}
	ids, next, err := c.threadPage1(r.Context(), t, data.Query, q.Get("after"))
	if err != nil {
		c.failErr(w, r, "the thread list", err)
		return
	}
	if next != "" {
		data.Next = template.URL("/console/?" + next)
	}
	data.Order = "newest activity first"
	if data.Query != "" {
		data.Order = "threads whose id starts with the search, by id"
	}
	rows, err := c.threadRows(r.Context(), t, ids)
	if err != nil {
		c.failErr(w, r, "the thread list", err)
		return
	}
	data.Rows = rows
	c.render(w, r, http.StatusOK, "threads", t, "Threads", data)
}

// threadPage1 returns the ids of one page of threads and the query string
// of the next page ("" when this is the last).
func (c *Console) threadPage1(ctx context.Context, t int, prefix, after string) ([]string, string, error) {
	layout := c.cfg.Stores[t].Layout()
	threads := layout.Threads()
	if prefix != "" {
		// The encoding of an id is order-preserving and prefix-free: the
		// ids that start with prefix are the keys that start with its
		// encoding without the terminator.
		enc := keys.String(prefix)
		start := append(threads, enc[:len(enc)-2]...)
		end := keys.PrefixEnd(start)
		from := start
		if after != "" {
			from = append(layout.Thread(after), 0)
		}
		resp, err := c.cfg.Client.Get(ctx, string(from), clientv3.WithRange(string(end)), clientv3.WithLimit(threadsPageSize+1), clientv3.WithKeysOnly())
		if err != nil {
			return nil, "", err
		}
		ids, err := decodeThreads(layout, resp.Kvs)
		if err != nil {
			return nil, "", err
		}
		next := ""
		if len(ids) > threadsPageSize {
			ids = ids[:threadsPageSize]
			next = "q=" + urlq(prefix) + "&after=" + urlq(ids[len(ids)-1])
		}
		return ids, next, nil
	}
	// Newest activity first: a thread record's mod revision is the
	// revision of the thread's last append, delete, prune or fork (each
	// changes one thread record), and the cursor is the last shown one.
	a, err := c.activityFor(ctx, t)
	if err != nil {
		return nil, "", err
	}
	before, _ := strconv.ParseInt(after, 10, 64)
	page := a.page(max(before, 0), threadsPageSize+1)
	next := ""
	if len(page) > threadsPageSize {
		page = page[:threadsPageSize]
		next = "after=" + strconv.FormatInt(page[len(page)-1].rev, 10)
	}
	ids := make([]string, len(page))
	for i, e := range page {
		ids[i] = e.thread
	}
	return ids, next, nil
}

func decodeThreads(layout keys.Layout, kvs []*mvccKV) ([]string, error) {
	ids := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		id, err := layout.DecodeThread(kv.Key)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// threadRows reads each thread's head, its count of checkpoints (a
// count-only range) and its head's reason and label. A thread whose
// checkpoints were all deleted shows without a head.
func (c *Console) threadRows(ctx context.Context, t int, ids []string) ([]threadRow, error) {
	st := c.cfg.Stores[t]
	layout := st.Layout()
	rows := make([]threadRow, len(ids))
	err := forEach(ctx, len(ids), func(gctx context.Context, i int) error {
		id := ids[i]
		row := threadRow{ID: id}
		pfx := layout.Checkpoints(id)
		resp, err := c.cfg.Client.Get(gctx, string(pfx), clientv3.WithRange(string(keys.PrefixEnd(pfx))), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		row.Checkpoints = resp.Count
		head, err := st.GetHead(gctx, id)
		if err != nil {
			return err
		}
		row.Head = head
		if head != "" {
			cp, err := st.Get(gctx, head)
			if err != nil {
				return err
			}
			if cp != nil {
				row.Reason, row.Label, row.CreatedAt = cp.Reason, cp.Label, cp.CreatedAt
			}
		}
		rows[i] = row
		return nil
	})
	return rows, err
}

// forEach calls fn for 0..n-1, readParallel at a time, and returns the
// first error; the others' contexts are cancelled then.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, readParallel)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

type mvccKV = mvccpb.KeyValue

func urlq(s string) string { return url.QueryEscape(s) }

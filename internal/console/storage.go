package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/sidecar"
	"github.com/cairnstore/cairn/keys"
	"github.com/cairnstore/cairn/sweep"
)

// scanPage is the page size of the storage page's etcd and bucket scans.
const scanPage = 1000

// largestThreads is how many threads the storage page ranks.
const largestThreads = 10

type threadBytes struct {
	ID    string
	Bytes int64
}

type storageData struct {
	EtcdBytes   int64
	EtcdKeys    int64
	ThreadBytes int64
	Threads     int64
	Checkpoints int64
	// PerCheckpoint is the average etcd bytes of a checkpoint: about what
	// a fork adds (one checkpoint record; its blobs are shared).
	PerCheckpoint int64
	HasBucket     bool
	BlobKeys      int
	References    int
	FileBytes     int64
	ArtifactBytes int64
	MetaBytes     int64
	Missing       int
	Largest       []threadBytes
	Took          time.Duration
}

// storagePage adds up what the tenant takes: every etcd key under its
// prefix (one paged range), its threads and checkpoints (count-only
// ranges), and the bucket bytes of the keys its checkpoints reference (a
// paged listing of the blob prefixes).
func (c *Console) storagePage(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	began := time.Now()
	d, err := c.storage(r.Context(), t)
	if err != nil {
		c.failErr(w, r, "the storage figures", err)
		return
	}
	d.Took = time.Since(began).Round(time.Millisecond)
	c.render(w, r, http.StatusOK, "storage", t, "Storage", d)
}

func (c *Console) storage(ctx context.Context, t int) (*storageData, error) {
	st := c.cfg.Stores[t]
	layout := st.Layout()
	root := layout.Root()
	d := &storageData{HasBucket: c.blobs != nil}
	// The tag of per-thread keys: the byte after the root in ThreadData.
	threadTag := layout.ThreadData("")[len(root)]
	per := map[string]int64{}
	var at int64
	err := scanRev(ctx, c.cfg.Client, root, keys.PrefixEnd(root), false, &at, func(kv *mvccpb.KeyValue) error {
		k := kv.Key
		n := int64(len(k) + len(kv.Value))
		d.EtcdBytes += n
		d.EtcdKeys++
		if len(k) > len(root) && k[len(root)] == threadTag {
			if id, _, err := keys.DecodeString(k[len(root)+1:]); err == nil {
				per[id] += n
				d.ThreadBytes += n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id, n := range per {
		d.Largest = append(d.Largest, threadBytes{ID: id, Bytes: n})
	}
	slices.SortFunc(d.Largest, func(a, b threadBytes) int {
		if a.Bytes != b.Bytes {
			if a.Bytes > b.Bytes {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(d.Largest) > largestThreads {
		d.Largest = d.Largest[:largestThreads]
	}
	if d.Threads, err = count(ctx, c.cfg.Client, layout.Threads()); err != nil {
		return nil, err
	}
	if d.Checkpoints, err = count(ctx, c.cfg.Client, layout.Indexes()); err != nil {
		return nil, err
	}
	if d.Checkpoints > 0 {
		d.PerCheckpoint = d.ThreadBytes / d.Checkpoints
	}
	if c.blobs == nil {
		return d, nil
	}
	refs := map[string]bool{}
	if err := st.WalkBlobReferences(ctx, func(br cairn.BlobReference) error {
		refs[br.Key] = true
		d.References += br.References
		return nil
	}); err != nil {
		return nil, err
	}
	d.BlobKeys = len(refs)
	for _, pfx := range sweep.Prefixes {
		for token := ""; ; {
			page, err := c.blobs.List(ctx, pfx, token, scanPage)
			if err != nil {
				return nil, err
			}
			for _, o := range page.Objects {
				if !refs[o.Key] {
					continue
				}
				delete(refs, o.Key)
				switch pfx {
				case sweep.FilePrefix:
					d.FileBytes += o.Size
				case sweep.ArtifactPrefix:
					d.ArtifactBytes += o.Size
				default:
					d.MetaBytes += o.Size
				}
			}
			if page.NextToken == "" {
				break
			}
			token = page.NextToken
		}
	}
	d.Missing = len(refs)
	return d, nil
}

func count(ctx context.Context, client *clientv3.Client, prefix []byte) (int64, error) {
	resp, err := client.Get(ctx, string(prefix), clientv3.WithRange(string(keys.PrefixEnd(prefix))), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

type sweeperData struct {
	Status     *sidecar.Status
	StatusErr  string
	Claimed    []string
	Deleting   []cairn.GCRecord
	Candidates int
	HasBucket  bool
	Plan       *sweep.RunReport
	PlanErr    string
	OlderThan  time.Duration
	Keep       int
	Took       time.Duration
}

// sweeperPage shows the sweeper's last run (its status record), the claims
// in flight and the keys in the deleting state (one ReadBlobGC), and the
// dry run of the next run: sweep.Run with DryRun over every tenant's store
// (the sweep covers the bucket, which all tenants share), on a bucket that
// cannot delete.
func (c *Console) sweeperPage(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	ctx := r.Context()
	st := c.cfg.Stores[t]
	d := sweeperData{HasBucket: c.blobs != nil, OlderThan: c.cfg.SweepOlderThan, Keep: c.cfg.SweepKeep}
	status, err := sidecar.ReadStatus(ctx, c.cfg.Client, st.Layout())
	if err != nil {
		d.StatusErr = err.Error()
	}
	d.Status = status
	view, err := st.ReadBlobGC(ctx, func(cairn.BlobReference) error { return nil })
	if err != nil {
		c.failErr(w, r, "the claims and GC records", err)
		return
	}
	d.Claimed = view.Claimed
	for _, rec := range view.Records {
		if rec.State == cairn.GCDeleting {
			d.Deleting = append(d.Deleting, rec)
		} else {
			d.Candidates++
		}
	}
	if c.blobs != nil {
		began := time.Now()
		rep, err := c.dryRun(ctx, t)
		d.Took = time.Since(began).Round(time.Millisecond)
		d.Plan = &rep
		if err != nil {
			d.PlanErr = err.Error()
		}
	}
	c.render(w, r, http.StatusOK, "sweeper", t, "Sweeper", d)
}

// dryRun runs the sweeper's dry run: the prune (when SweepKeep is set) of
// the tenant's threads and the sweep of the bucket with every tenant's
// store, writing nothing.
func (c *Console) dryRun(ctx context.Context, t int) (sweep.RunReport, error) {
	var others []sweep.Other
	for i, s := range c.cfg.Stores {
		if i != t {
			others = append(others, sweep.Other{Store: s})
		}
	}
	opts := sweep.Options{OlderThan: c.cfg.SweepOlderThan, DryRun: true, Others: others, Logger: c.log}
	if c.cfg.SweepKeep > 0 {
		return sweep.Run(ctx, c.cfg.Stores[t], noDeletes{c.blobs}, sweep.RunOptions{Keep: c.cfg.SweepKeep, Sweep: opts})
	}
	rep, err := sweep.Sweep(ctx, c.cfg.Stores[t], noDeletes{c.blobs}, opts)
	return sweep.RunReport{Sweep: rep}, err
}

// noDeletes is the console's bucket as the sweep wants it: it lists and
// reads, and refuses every delete, so that a dry run cannot delete even if
// it tried.
type noDeletes struct{ Bucket }

var errReadOnly = errors.New("console: the console never deletes")

func (noDeletes) Delete(context.Context, []string) (bucket.DeleteResult, error) {
	return bucket.DeleteResult{}, errReadOnly
}

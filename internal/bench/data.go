package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
)

// storeOptions gives writer leases that outlast any run, so that no lease
// expires in the middle of a measurement.
var storeOptions = cairn.Options{LeaseDuration: 24 * time.Hour, RenewAfter: time.Hour}

func newEtcdStore(cli *clientv3.Client, prefix string) (*etcdstore.Store, error) {
	return etcdstore.New(cli, prefix, etcdstore.Options{Options: storeOptions})
}

func newMemoryStore() (*cairn.MemoryStore, error) { return cairn.NewMemoryStore(storeOptions) }

// fileKey and artifactKey name the content seed would hash to.
func fileKey(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return cairn.FileBlobPrefix + hex.EncodeToString(sum[:])
}

func artifactKey(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return cairn.ArtifactBlobPrefix + hex.EncodeToString(sum[:])
}

// fileKeys returns n file keys made from seeds "<tag>-<i>".
func fileKeys(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fileKey(fmt.Sprintf("%s-%d", tag, i))
	}
	return out
}

// conversation returns a JSON transcript of about n bytes.
func conversation(n int) json.RawMessage {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	line := strings.Repeat("edited the parser and ran the tests again; ", 6)
	msgs := []msg{}
	for size := 2; size < n; size += len(line) + 32 {
		role := "assistant"
		if len(msgs)%2 == 0 {
			role = "user"
		}
		msgs = append(msgs, msg{role, line})
	}
	b, _ := json.Marshal(msgs)
	return b
}

// checkpoint returns a checkpoint with one file entry per file key, in a
// tree of 100 files per directory, and one artifact per artifact key.
func checkpoint(id, thread, parent string, createdAt float64, files, artifacts []string, conv json.RawMessage) cairn.Checkpoint {
	c := cairn.Checkpoint{
		ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: createdAt,
		Reason: cairn.ReasonAutomatic, Conversation: conv,
		Files: make([]cairn.Entry, len(files)),
	}
	for i, k := range files {
		c.Files[i] = cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/file%05d.go", i/100, i), Kind: cairn.KindFile, BlobKey: k, Size: int64(1000 + i)}
	}
	for i, k := range artifacts {
		c.Artifacts = append(c.Artifacts, cairn.Artifact{
			ArtifactID: fmt.Sprintf("artifact-%d", i), Name: fmt.Sprintf("report-%d.txt", i), MimeType: "text/plain",
			Size: 100, BlobKey: k, CreatedAt: createdAt,
		})
	}
	return c
}

// chain is one thread and its writer: it builds each next append on top of
// the last one that succeeded.
type chain struct {
	store  cairn.Store
	thread string
	writer cairn.Writer
	head   string
	n      int
}

func newChain(ctx context.Context, store cairn.Store, thread string) (*chain, error) {
	l, err := store.AcquireWriter(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("acquire the writer of %q: %w", thread, err)
	}
	return &chain{store: store, thread: thread, writer: l.Writer}, nil
}

// next returns the input of the chain's next append.
func (c *chain) next(files, artifacts []string, conv json.RawMessage) cairn.AppendInput {
	return cairn.AppendInput{
		Checkpoint:     checkpoint(c.id(c.n), c.thread, c.head, c.createdAt(), files, artifacts, conv),
		ExpectedHeadID: c.head,
		Writer:         c.writer,
	}
}

func (c *chain) id(n int) string { return fmt.Sprintf("%s-ckpt-%06d", c.thread, n) }

func (c *chain) createdAt() float64 { return float64(1_700_000_000_000 + c.n) }

// append appends in, which next or a tree built, and moves the chain on.
func (c *chain) append(ctx context.Context, in cairn.AppendInput) error {
	if _, err := c.store.Append(ctx, in); err != nil {
		return fmt.Errorf("append %q: %w", in.Checkpoint.ID, err)
	}
	c.head = in.Checkpoint.ID
	c.n++
	return nil
}

// tree is the file tree of one thread's checkpoints: fixed paths, the first
// entries with the keys every checkpoint of the thread shares, the others
// with keys new to each checkpoint. An append built from it allocates almost
// nothing, so the harness adds little garbage, and little GC work, to the
// process it measures.
type tree struct {
	files []cairn.Entry
	fixed int
	conv  json.RawMessage
}

func newTree(fixed []string, changing int, conv json.RawMessage) *tree {
	t := &tree{files: make([]cairn.Entry, len(fixed)+changing), fixed: len(fixed), conv: conv}
	for i := range t.files {
		t.files[i] = cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/file%05d.go", i/100, i), Kind: cairn.KindFile, Size: int64(1000 + i)}
		if i < len(fixed) {
			t.files[i].BlobKey = fixed[i]
		}
	}
	return t
}

// changingKeys returns the keys of the n-th checkpoint of a thread that no
// other checkpoint has.
func (t *tree) changingKeys(thread string, n int) []string {
	out := make([]string, len(t.files)-t.fixed)
	for i := range out {
		out[i] = fileKey(fmt.Sprintf("%s-%d-changing-%d", thread, n, i))
	}
	return out
}

// input returns the chain's next append, with the given changing keys. Its
// files are the tree's own slice: every store copies the checkpoint before
// Append returns, so the next input may reuse it, but two inputs of one tree
// must not be in flight at once.
func (t *tree) input(ch *chain, changing []string) cairn.AppendInput {
	for i, k := range changing {
		t.files[t.fixed+i].BlobKey = k
	}
	return cairn.AppendInput{
		Checkpoint: cairn.Checkpoint{
			ID: ch.id(ch.n), ThreadID: ch.thread, ParentCheckpointID: ch.head, CreatedAt: ch.createdAt(),
			Reason: cairn.ReasonAutomatic, Files: t.files, Conversation: t.conv,
		},
		ExpectedHeadID: ch.head,
		Writer:         ch.writer,
	}
}

// nextInput builds the chain's next append from the tree, changing keys
// included.
func (t *tree) nextInput(ch *chain) cairn.AppendInput {
	return t.input(ch, t.changingKeys(ch.thread, ch.n))
}

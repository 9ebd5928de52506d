package etcdstore

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// storedCheckpoint decodes the wire JSON of a checkpoint that the store itself
// encoded and validated. It avoids the field-by-field checks of
// cairn.Checkpoint.UnmarshalJSON, which exist for untrusted input.
type storedCheckpoint struct {
	ID                 string           `json:"id"`
	ThreadID           string           `json:"threadId"`
	ParentCheckpointID *string          `json:"parentCheckpointId"`
	CreatedAt          float64          `json:"createdAt"`
	Reason             string           `json:"reason"`
	Label              string           `json:"label"`
	SourceRunID        string           `json:"sourceRunId"`
	Files              []storedEntry    `json:"files"`
	Conversation       json.RawMessage  `json:"conversation"`
	Artifacts          []storedArtifact `json:"artifacts"`
}

type storedEntry struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	BlobKey string `json:"blobKey"`
	Size    int64  `json:"size"`
}

type storedArtifact struct {
	ArtifactID string  `json:"artifactId"`
	Name       string  `json:"name"`
	MimeType   string  `json:"mimeType"`
	Size       int64   `json:"size"`
	BlobKey    string  `json:"blobKey"`
	CreatedAt  float64 `json:"createdAt"`
}

// encodeCheckpoint returns the wire JSON of c.
func encodeCheckpoint(c *cairn.Checkpoint) ([]byte, error) { return json.Marshal(c) }

// decodeCheckpoint decodes wire JSON written by encodeCheckpoint.
func decodeCheckpoint(b []byte) (cairn.Checkpoint, error) {
	var sc storedCheckpoint
	if err := json.Unmarshal(b, &sc); err != nil {
		return cairn.Checkpoint{}, err
	}
	c := cairn.Checkpoint{
		ID: sc.ID, ThreadID: sc.ThreadID, CreatedAt: sc.CreatedAt, Reason: sc.Reason,
		Label: sc.Label, SourceRunID: sc.SourceRunID,
		Files:     make([]cairn.Entry, len(sc.Files)),
		Artifacts: make([]cairn.Artifact, len(sc.Artifacts)),
	}
	if sc.ParentCheckpointID != nil {
		c.ParentCheckpointID = *sc.ParentCheckpointID
	}
	for i, e := range sc.Files {
		c.Files[i] = cairn.Entry{Path: e.Path, Kind: cairn.EntryKind(e.Kind), BlobKey: e.BlobKey, Size: e.Size}
	}
	for i, a := range sc.Artifacts {
		c.Artifacts[i] = cairn.Artifact{ArtifactID: a.ArtifactID, Name: a.Name, MimeType: a.MimeType, Size: a.Size, BlobKey: a.BlobKey, CreatedAt: a.CreatedAt}
	}
	if len(sc.Conversation) > 0 && !bytes.Equal(sc.Conversation, []byte("null")) {
		c.Conversation = sc.Conversation
	}
	return c, nil
}

// refParts returns, for each shard the checkpoint uses, its sorted distinct
// digests split into parts of at most refPartBytes, and the shard mask.
func refParts(c *cairn.Checkpoint) (parts map[byte][][]byte, mask uint32) {
	byShard := map[byte][]keys.Digest{}
	for _, k := range c.BlobKeys() {
		shard, d, ok := keys.BlobShard(k)
		if !ok {
			continue // impossible for a validated checkpoint
		}
		byShard[shard] = append(byShard[shard], d)
	}
	parts = make(map[byte][][]byte, len(byShard))
	for shard, ds := range byShard {
		slices.SortFunc(ds, func(a, b keys.Digest) int { return bytes.Compare(a[:], b[:]) })
		mask |= 1 << shard
		per := refPartBytes / keys.DigestLen
		for len(ds) > 0 {
			n := min(per, len(ds))
			buf := make([]byte, 0, n*keys.DigestLen)
			for _, d := range ds[:n] {
				buf = append(buf, d[:]...)
			}
			parts[shard] = append(parts[shard], buf)
			ds = ds[n:]
		}
	}
	return parts, mask
}

// shardsOf lists the shards in a mask, in order.
func shardsOf(mask uint32) []byte {
	var out []byte
	for s := range byte(keys.NumShards) {
		if mask&(1<<s) != 0 {
			out = append(out, s)
		}
	}
	return out
}

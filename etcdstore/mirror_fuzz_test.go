package etcdstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/cairnstore/cairn/keys"
)

// The mirror file's decoders (mirror.go) on garbage: no panic; what they
// accept re-encodes to the same bytes; a file they do not accept is
// discarded, never used.

func FuzzMirrorUnseal(f *testing.F) {
	f.Add(sealed([]byte("record")))
	f.Add(sealed(nil))
	f.Add([]byte{1, 2, 3})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, ok := unseal(b)
		if !ok {
			return
		}
		if !bytes.Equal(sealed(slices.Clone(body)), b) {
			t.Fatalf("%x unseals into %x, which seals differently", b, body)
		}
	})
}

func FuzzMirrorDecodeKids(f *testing.F) {
	var d keys.Digest
	d[0] = 0xab
	f.Add(encodeKids([]string{packDigest(packFile, d), nodeID(nodeChunk, d), packDigest(packObject, d), nodeID(nodeRoot, d)}))
	f.Add(sealed([]byte("sandbox-files/a")))
	f.Add(encodeKids(nil))
	f.Add(sealed([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}))
	f.Add(sealed([]byte{5, 'a'}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, ok := decodeKids(b)
		if kidsValid(b) != ok {
			t.Fatalf("%x: kidsValid says %v, decodeKids %v", b, !ok, ok)
		}
		if !ok {
			if ks != nil {
				t.Fatalf("%x: refused, but %q returned", b, ks)
			}
			return
		}
		if !bytes.Equal(encodeKids(ks), b) {
			t.Fatalf("%x decodes into %q, which encodes differently", b, ks)
		}
	})
}

// FuzzMirrorDelta: a change of count in the pend bucket decodes only if it
// is one encodeDelta writes, and then to the change encoded.
func FuzzMirrorDelta(f *testing.F) {
	f.Add(encodeDelta(1))
	f.Add(encodeDelta(-7))
	f.Add(sealed(binary.AppendVarint(nil, 0)))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := decodeDelta(b)
		if !ok {
			return
		}
		if d == 0 || !bytes.Equal(encodeDelta(d), b) {
			t.Fatalf("%x decodes into %d, which encodes differently", b, d)
		}
	})
}

// FuzzMirrorKey: a string packs only if it is a key the mirror counts, and
// then unpacks to itself; packed keys sort as their bucket keys do.
func FuzzMirrorKey(f *testing.F) {
	var d keys.Digest
	d[0], d[31] = 0x80, 0x01
	for _, k := range []string{keys.BlobKey(0, d), keys.BlobKey(keys.NumShards-1, d), objectKey(d), "sandbox-files/sha256/AB", objPrefix + strings.Repeat("A", 64)} {
		f.Add(k, objectKey(keys.Digest{}))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, oka := packKey(a)
		if !oka {
			if pa != "" {
				t.Fatalf("%q refused, but %x returned", a, pa)
			}
			return
		}
		if len(pa) != packedLen || packedSize([]byte(pa)) != packedLen {
			t.Fatalf("%q packs into %x, of length %d", a, pa, len(pa))
		}
		if u, ok := unpackKey(pa); !ok || u != a {
			t.Fatalf("%q packs into %x, which unpacks into %q (%v)", a, pa, u, ok)
		}
		if pb, ok := packKey(b); ok && strings.Compare(pa, pb) != strings.Compare(a, b) {
			t.Fatalf("%q and %q compare %d, packed %d", a, b, strings.Compare(a, b), strings.Compare(pa, pb))
		}
	})
}

// fuzzMirrorStore is a store with what OpenMirror and the file's load use
// (prefix, layout, logger) and no client: the load reads the file only.
func fuzzMirrorStore(prefix string) *Store {
	return &Store{prefix: prefix, layout: keys.NewLayout(prefix), log: slog.New(slog.DiscardHandler)}
}

// FuzzMirrorLoad writes a mirror file of one header, one record and one
// node's children, each from the fuzzer, and that node's count (with seal's
// bit 8, also a change of that count not yet applied, marked as applied up to
// the record's key with bit 16 or to nothing), and opens it: OpenMirror must not
// panic or fail (a file it cannot use is discarded and rebuilt); a file it
// uses must hold what it says: the record count the header gives, every
// counted node's children, and reopening gives the same state.
func FuzzMirrorLoad(f *testing.F) {
	const prefix = "/fuzz/"
	s := fuzzMirrorStore(prefix)
	refs := s.layout.Refs()
	root := keys.Digest{1, 2, 3}
	recKey := append(slices.Clone(refs), keys.RootShard, 'k')
	recVal := append([]byte{0}, root[:]...)
	kidKey := []byte(nodeID(nodeRoot, root))
	kids := []string{"sandbox-meta/sha256/" + string(bytes.Repeat([]byte{'a'}, 64))}
	// A valid file's header, built as persist builds it.
	m := &Mirror{s: s}
	m.reset()
	m.nrecs, m.rsum = 1, recHash(string(recKey), recVal)
	m.ncounts, m.csum, m.nkids = 1, countHash(string(kidKey), 1), 1
	m.rev, m.cluster = 7, 9
	h, _ := unseal(m.header())
	kb, _ := unseal(encodeKids(kids))
	// seal's bits seal the header, the record and the children with their
	// checksum, as persist does, so that the fuzzer reaches what is parsed
	// after the checksums without having to find them.
	f.Add(byte(0), m.header(), recKey, sealed(recVal), kidKey, encodeKids(kids))
	f.Add(byte(7), h, recKey, recVal, kidKey, kb)
	f.Add(byte(7), h[:len(h)-1], recKey, recVal, kidKey, kb)
	f.Add(byte(7), h, recKey, recVal[:5], kidKey, kb)
	f.Add(byte(0), m.header(), recKey, sealed(recVal), kidKey, encodeKids(nil))
	f.Add(byte(0), m.header(), recKey, recVal, kidKey, encodeKids(kids))
	f.Add(byte(0), sealed([]byte{0, 0, 0, 1}), []byte("k"), sealed(nil), []byte("n"), sealed(nil))
	f.Add(byte(0), []byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	f.Add(byte(8), m.header(), recKey, sealed(recVal), kidKey, encodeKids(nil))
	f.Add(byte(8), m.header(), recKey, sealed(recVal), kidKey, encodeKids([]string{packDigest(packFile, root)}))
	f.Add(byte(24), m.header(), recKey, sealed(recVal), kidKey, encodeKids([]string{packDigest(packFile, root)}))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, seal byte, header, rk, rv, kk, kv []byte) {
		if seal&1 != 0 {
			header = sealed(header)
		}
		if seal&2 != 0 {
			rv = sealed(rv)
		}
		if seal&4 != 0 {
			kv = sealed(kv)
		}
		path := filepath.Join(t.TempDir(), "mirror.db")
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			if seal&8 != 0 {
				mark := sealed(nil)
				if seal&16 != 0 {
					mark = rk
				}
				if err := putIn(tx, mirrorPend, kk, encodeDelta(1)); err != nil {
					return err
				}
				if err := putIn(tx, mirrorMeta, pendMark, mark); err != nil {
					return err
				}
			}
			for _, e := range []struct {
				bucket []byte
				k, v   []byte
			}{{mirrorMeta, []byte("header"), header}, {mirrorRecs, rk, rv}, {mirrorKids, kk, kv}, {mirrorCounts, kk, encodeCount(1)}} {
				if err := putIn(tx, e.bucket, e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.OpenMirror(ctx, path)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		st, rev, n := m.Stats(), m.Revision(), m.Records()
		if st.Discarded != "" {
			if rev != 0 || n != 0 || m.storedEntries() != 0 {
				t.Fatalf("discarded (%s) but kept revision %d, %d records, %d entries", st.Discarded, rev, n, m.storedEntries())
			}
		} else if why := m.load(true); why != "" {
			t.Fatalf("a used file fails its own check: %s", why)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		// A discarded file was cleared: it opens empty and unused; a used one
		// opens to the same state.
		again, err := s.OpenMirror(ctx, path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer again.Close()
		if again.Stats().Discarded != "" || again.Revision() != rev || again.Records() != n {
			t.Fatalf("reopened: discarded %q, revision %d, %d records; first open: discarded %q, revision %d, %d records",
				again.Stats().Discarded, again.Revision(), again.Records(), st.Discarded, rev, n)
		}
	})
}

// putIn puts k and v in tx's bucket name, creating it if need be.
func putIn(tx *bolt.Tx, name, k, v []byte) error {
	if len(k) == 0 || len(k) > bolt.MaxKeySize {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(name)
	if err != nil {
		return err
	}
	return b.Put(k, v)
}

// The claiming blob-store wrapper, against a fake claimer and bucket that
// record the order of calls.

import { describe, it } from "node:test";
import assert from "node:assert/strict";

import { claimAll, claimingBlobStore, type BlobClaimer } from "../src/blobs.js";
import { SandboxCheckpointInvalidEntryError, SandboxCheckpointWriterLostError } from "../src/errors.js";
import type { SandboxCheckpointWriter } from "../src/types.js";

const key = (c: string) => "sandbox-files/sha256/" + c.repeat(64);
const writer: SandboxCheckpointWriter = { threadId: "t", ownerToken: "o", fence: 1 };

function fakes(opts: { busyRounds?: Map<string, number>; lost?: boolean } = {}) {
  const calls: string[] = [];
  const busy = opts.busyRounds ?? new Map<string, number>();
  const claimer: BlobClaimer = {
    async claimBlobs(w, keys) {
      assert.deepEqual(w, writer);
      calls.push(`claim ${keys.join(",")}`);
      if (opts.lost) throw new SandboxCheckpointWriterLostError();
      return keys.filter((k) => (busy.get(k) ?? 0) > 0);
    },
    async waitBlobs(keys) {
      calls.push(`wait ${keys.join(",")}`);
      for (const k of keys) busy.set(k, (busy.get(k) ?? 1) - 1);
    },
  };
  const bucket = new Map<string, string>([[key("a"), "bytes-a"]]);
  const blobs = {
    async get(k: string) {
      calls.push(`get ${k}`);
      return bucket.get(k) ?? null;
    },
    async head(k: string) {
      calls.push(`head ${k}`);
      return bucket.has(k) ? { key: k } : null;
    },
    async put(k: string, v: string) {
      calls.push(`put ${k}`);
      bucket.set(k, v);
      return { key: k };
    },
    async list() {
      return [...bucket.keys()];
    },
  };
  return { calls, claimer, blobs };
}

describe("claimingBlobStore", () => {
  it("claims a key before it asks the bucket", async () => {
    const { calls, claimer, blobs } = fakes();
    const b = claimingBlobStore(blobs, { claimer, writer });
    assert.deepEqual(await b.head(key("a")), { key: key("a") });
    assert.deepEqual(calls, [`claim ${key("a")}`, `head ${key("a")}`]);
  });

  it("claims before a put too, and passes get and other methods through", async () => {
    const { calls, claimer, blobs } = fakes();
    const b = claimingBlobStore(blobs, { claimer, writer: () => writer });
    await b.put(key("b"), "x");
    assert.equal(await b.get(key("b")), "x");
    assert.deepEqual(await b.list(), [key("a"), key("b")]);
    assert.deepEqual(calls, [`claim ${key("b")}`, `put ${key("b")}`, `get ${key("b")}`]);
  });

  it("reports a key a sweep was deleting as absent after waiting and claiming again", async () => {
    const { calls, claimer, blobs } = fakes({ busyRounds: new Map([[key("a"), 2]]) });
    const b = claimingBlobStore(blobs, { claimer, writer });
    assert.equal(await b.head(key("a")), null);
    assert.deepEqual(calls, [`claim ${key("a")}`, `wait ${key("a")}`, `claim ${key("a")}`, `wait ${key("a")}`, `claim ${key("a")}`]);
  });

  it("passes keys outside the swept namespaces through unclaimed", async () => {
    const { calls, claimer, blobs } = fakes();
    const b = claimingBlobStore(blobs, { claimer, writer });
    await b.head("artifacts/run-1/a");
    assert.deepEqual(calls, ["head artifacts/run-1/a"]);
  });

  it("rejects a malformed key in a swept namespace before any call", async () => {
    const { calls, claimer, blobs } = fakes();
    const b = claimingBlobStore(blobs, { claimer, writer });
    await assert.rejects(b.head("sandbox-files/sha256/XYZ"), SandboxCheckpointInvalidEntryError);
    assert.deepEqual(calls, []);
  });

  it("fails a head and a put with WRITER_LOST when the lease is gone, without touching the bucket", async () => {
    const { calls, claimer, blobs } = fakes({ lost: true });
    const b = claimingBlobStore(blobs, { claimer, writer });
    await assert.rejects(b.head(key("a")), SandboxCheckpointWriterLostError);
    await assert.rejects(b.put(key("c"), "x"), SandboxCheckpointWriterLostError);
    assert.deepEqual(calls, [`claim ${key("a")}`, `claim ${key("c")}`]);
  });
});

describe("claimAll", () => {
  it("claims in one call and returns the keys to upload anew", async () => {
    const { calls, claimer } = fakes({ busyRounds: new Map([[key("c"), 1]]) });
    assert.deepEqual(await claimAll(claimer, writer, [key("a"), key("c")]), [key("c")]);
    assert.deepEqual(calls, [`claim ${key("a")},${key("c")}`, `wait ${key("c")}`, `claim ${key("c")}`]);
  });
});

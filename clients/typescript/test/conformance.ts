// A conformance suite for the checkpoint, fork, transcript and instance
// stores, written from the contract (Part B §2–§6 and the check orders of
// §3.2, §3.3, §3A, §4.1; Part A A10–A12, A15). Each case is a plain async
// function that throws on failure, so the same case can run as a test
// (conformance.test.ts) and against a deliberately broken store, where it
// must fail (mutants.test.ts).

import assert from "node:assert/strict";

import type {
  ForkCapableSandboxCheckpointStore,
  SandboxCheckpoint,
  SandboxCheckpointDeleteInput,
  SandboxCheckpointStoreOptions,
  SandboxCheckpointWriter,
  SandboxCheckpointWriterLease,
  SandboxInstanceRecord,
  SandboxInstanceStore,
  SandboxSnapshotArtifact,
  SandboxTranscriptStore,
} from "../src/types.js";
import { SandboxCheckpointError, SandboxCheckpointWriterConflictError } from "../src/errors.js";

/** The checkpoint store under test: the fork capability and deleteCheckpoints are required here. */
export type ConformanceCheckpointStore = ForkCapableSandboxCheckpointStore & {
  deleteCheckpoints(input: SandboxCheckpointDeleteInput): Promise<{ deleted: string[] }>;
};

/** One fresh, empty store domain: checkpoints, the transcripts fork writes, and instances. */
export interface StoreSet {
  checkpoints: ConformanceCheckpointStore;
  transcripts: SandboxTranscriptStore;
  instances: SandboxInstanceStore;
}

/** Makes a fresh, empty StoreSet whose lease clock and times are the options'. */
export type Factory = (options: SandboxCheckpointStoreOptions) => Promise<StoreSet>;

export interface Case {
  /** Stable id, e.g. "CC-03" (the contract's catalogue) or "ORD-A06" (check order). */
  id: string;
  title: string;
  run(factory: Factory): Promise<void>;
}

/** The options upstream's in-memory conformance run passes: a frozen clock. */
export const frozen: SandboxCheckpointStoreOptions = { now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 };

const C = {
  staleHead: "SANDBOX_SNAPSHOT_STALE_HEAD",
  parentMismatch: "SANDBOX_SNAPSHOT_PARENT_MISMATCH",
  duplicate: "SANDBOX_SNAPSHOT_DUPLICATE_ID",
  notHead: "SANDBOX_SNAPSHOT_NOT_HEAD",
  conflict: "SANDBOX_SNAPSHOT_WRITER_CONFLICT",
  lost: "SANDBOX_SNAPSHOT_WRITER_LOST",
  invalidId: "SANDBOX_SNAPSHOT_INVALID_ID",
  invalidEntry: "SANDBOX_SNAPSHOT_INVALID_ENTRY",
  sourceNotFound: "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND",
  sourceMismatch: "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH",
  notEmpty: "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY",
} as const;

/** Asserts that p rejects with a SandboxCheckpointError of code. */
export async function rejectsWith(p: Promise<unknown>, code: string, note = ""): Promise<void> {
  let got: unknown;
  try {
    await p;
  } catch (e) {
    got = e;
  }
  assert.ok(got !== undefined, `${note}: resolved, want ${code}`);
  assert.ok(got instanceof SandboxCheckpointError, `${note}: got ${String(got)}, want ${code}`);
  assert.equal(got.code, code, `${note}: ${got.message}`);
}

function digits(id: string): string {
  return id.replace(/\D/g, "");
}

/** The upstream suite's fixture: one file whose key and createdAt come from the id's digits. */
export function checkpoint(id: string, parent: string | null = null, thread = "thread-a"): SandboxCheckpoint {
  const d = digits(id);
  const n = d === "" ? 1 : Number(d);
  return {
    id,
    threadId: thread,
    parentCheckpointId: parent,
    createdAt: d === "" ? 1 : n,
    reason: "automatic",
    files: [{ path: `${id}.txt`, kind: "file", blobKey: fileKey(n.toString(16)), size: 1 }],
    conversation: [{ role: "user", content: id }],
    artifacts: [],
  };
}

export function fileKey(hex: string): string {
  return "sandbox-files/sha256/" + hex.padStart(64, "0");
}

export function artifactKey(hex: string): string {
  return "sandbox-artifacts/sha256/" + hex.padStart(64, "0");
}

/** Caches one lease per (store, thread), as upstream's helpers do. */
class Writers {
  private leases = new Map<string, SandboxCheckpointWriterLease>();
  constructor(private store: ConformanceCheckpointStore) {}
  async of(thread: string): Promise<SandboxCheckpointWriterLease> {
    let l = this.leases.get(thread);
    if (!l) {
      l = await this.store.acquireWriter(thread);
      this.leases.set(thread, l);
    }
    return l;
  }
  async append(c: SandboxCheckpoint, expectedHeadId: string | null = c.parentCheckpointId) {
    return this.store.append({ checkpoint: c, expectedHeadId, writer: await this.of(c.threadId) });
  }
  async deleteHead(threadId: string, checkpointId: string) {
    return this.store.deleteHead({ threadId, checkpointId, writer: await this.of(threadId) });
  }
}

async function state(s: ConformanceCheckpointStore, thread = "thread-a") {
  return { head: await s.getHead(thread), list: await s.list(thread), refs: await s.listBlobReferences() };
}

async function unchanged(s: ConformanceCheckpointStore, thread: string, op: () => Promise<void>): Promise<void> {
  const before = await state(s, thread);
  await op();
  assert.deepEqual(await state(s, thread), before, "state changed after a failed write");
}

async function fresh(factory: Factory, options: SandboxCheckpointStoreOptions = frozen) {
  const set = await factory(options);
  return { ...set, w: new Writers(set.checkpoints) };
}

/** A mutable clock for the lease cases. */
function clock(seed: number) {
  const c = { current: seed, now: () => c.current };
  return c;
}

const leaseOpts = (now: () => number): SandboxCheckpointStoreOptions => ({ now, leaseDurationMs: 100, renewAfterMs: 25 });

// ---------------------------------------------------------------------------
// The store catalogue (contract §6.1).

export const storeCases: Case[] = [
  {
    id: "CC-01",
    title: "returns null and an empty list for an unknown thread",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      assert.equal(await s.get("missing"), null);
      assert.equal(await s.getHead("missing-thread"), null);
      assert.deepEqual(await s.list("missing-thread"), []);
      assert.deepEqual(await s.listBlobReferences(), []);
    },
  },
  {
    id: "CC-02",
    title: "appends a root and then a parent-linked checkpoint",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      assert.deepEqual(await w.append(checkpoint("1")), { headId: "1" });
      assert.deepEqual(await w.append(checkpoint("2", "1")), { headId: "2" });
      assert.equal(await s.getHead("thread-a"), "2");
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["1", "2"]);
      assert.deepEqual(await s.get("2"), checkpoint("2", "1"));
    },
  },
  {
    id: "CC-03",
    title: "enforces expected-head and parent compare-and-swap rules",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("2"), null), C.staleHead, "root on a non-empty thread"));
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("3"), "1"), C.parentMismatch, "parent null, expected 1"));
    },
  },
  {
    id: "CC-04",
    title: "rejects duplicate checkpoint ids",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("1"), "1"), C.duplicate));
    },
  },
  {
    id: "CC-05",
    title: "isolates checkpoints and heads by thread",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("a", null, "thread-a"));
      await w.append(checkpoint("b", null, "thread-b"));
      assert.equal(await s.getHead("thread-a"), "a");
      assert.equal(await s.getHead("thread-b"), "b");
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["a"]);
      assert.deepEqual((await s.list("thread-b")).map((c) => c.id), ["b"]);
    },
  },
  {
    id: "CC-06",
    title: "lists checkpoints by createdAt and then checkpoint id",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append({ ...checkpoint("z"), createdAt: 2 });
      await w.append({ ...checkpoint("a", "z"), createdAt: 1 });
      await w.append({ ...checkpoint("b", "a"), createdAt: 1 });
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["a", "b", "z"]);
    },
  },
  {
    id: "CC-07",
    title: "orders checkpoint ids and blob keys by UTF-8 bytes",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const ids = ["é", "a", "B", "😀", "\uE000", "\u{10000}"];
      let parent: string | null = null;
      for (const [i, id] of ids.entries()) {
        await w.append({ ...checkpoint(id, parent), createdAt: 1, files: [{ path: "f", kind: "file", blobKey: fileKey(String(i + 1)), size: 1 }] });
        parent = id;
      }
      // UTF-8 order, not UTF-16 order: U+E000 sorts before U+10000, but after it in UTF-16.
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["B", "a", "é", "\uE000", "\u{10000}", "😀"]);
      assert.deepEqual((await s.listBlobReferences()).map((r) => r.key), ["1", "2", "3", "4", "5", "6"].map(fileKey));
    },
  },
  {
    id: "CC-08",
    title: "rejects malformed Unicode checkpoint ids and blob keys",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("\uD800")), C.invalidId, "lone surrogate id"));
      const bad = { ...checkpoint("root"), files: [{ path: "root.txt", kind: "file" as const, blobKey: "sandbox-files/sha256/\uD800" + "0".repeat(63), size: 1 }] };
      await unchanged(s, "thread-a", () => rejectsWith(w.append(bad), C.invalidEntry, "lone surrogate blob key"));
    },
  },
  ...[NaN, Infinity, -Infinity].map(
    (v, i): Case => ({
      id: `CC-09${"abc"[i]}`,
      title: `rejects non-finite createdAt without changing state: ${v}`,
      async run(f) {
        const { checkpoints: s, w } = await fresh(f);
        await rejectsWith(w.append({ ...checkpoint("invalid"), createdAt: v }), C.invalidEntry);
        assert.deepEqual(await state(s), { head: null, list: [], refs: [] });
      },
    }),
  ),
  {
    id: "CC-10",
    title: "keeps checkpoints immutable and reference counts distinct blob keys",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const input = { ...checkpoint("1"), files: [{ path: "1.txt", kind: "file" as const, blobKey: fileKey("1"), size: 1 }, { path: "same.txt", kind: "file" as const, blobKey: fileKey("1"), size: 1 }] };
      await w.append(input);
      (input.files[0] as { path: string }).path = "mutated-input";
      const got = await s.get("1");
      assert.ok(got && got !== input);
      assert.equal(got.files[0]?.path, "1.txt");
      (got.files[0] as { path: string }).path = "mutated-get";
      assert.equal((await s.get("1"))?.files[0]?.path, "1.txt");
      const listed = await s.list("thread-a");
      (listed[0]!.files[0] as { path: string }).path = "mutated-list";
      assert.equal((await s.list("thread-a"))[0]?.files[0]?.path, "1.txt");
      assert.deepEqual(await s.listBlobReferences(), [{ key: fileKey("1"), references: 1 }]);
    },
  },
  {
    id: "CC-11",
    title: "counts one reference per checkpoint for shared blob keys",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const key = fileKey("f".repeat(64));
      await w.append({ ...checkpoint("1"), files: [{ path: "a", kind: "file", blobKey: key, size: 1 }] });
      await w.append({ ...checkpoint("2", "1"), files: [{ path: "b", kind: "file", blobKey: key, size: 1 }] });
      assert.deepEqual(await s.listBlobReferences(), [{ key, references: 2 }]);
      await w.deleteHead("thread-a", "2");
      assert.deepEqual(await s.listBlobReferences(), [{ key, references: 1 }]);
    },
  },
  {
    id: "CC-12",
    title: "allows one non-waiting writer lease per thread",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      const a = await s.acquireWriter("thread-a");
      let err: unknown;
      await s.acquireWriter("thread-a").catch((e: unknown) => (err = e));
      assert.ok(err instanceof SandboxCheckpointWriterConflictError, `second acquire: ${String(err)}`);
      const b = await s.acquireWriter("thread-b");
      await a.release();
      await b.release();
      const again = await s.acquireWriter("thread-a");
      assert.ok(again.fence > a.fence);
      assert.notEqual(again.ownerToken, a.ownerToken);
    },
  },
  {
    id: "CC-13",
    title: "extends a lease when renew succeeds",
    async run(f) {
      const c = clock(1000);
      const { checkpoints: s } = await fresh(f, leaseOpts(c.now));
      const lease = await s.acquireWriter("thread-a");
      assert.equal(lease.expiresAt, 1100);
      assert.equal(lease.renewAfterMs, 25);
      const first = lease.expiresAt;
      c.current += lease.renewAfterMs;
      assert.deepEqual(await lease.renew(), { expiresAt: c.current + 100 });
      assert.ok(lease.expiresAt > first);
      assert.equal(lease.expiresAt, c.current + 100);
    },
  },
  {
    id: "CC-14",
    title: "does not let a stale lease release a replacement lease",
    async run(f) {
      const c = clock(1000);
      const { checkpoints: s } = await fresh(f, leaseOpts(c.now));
      const old = await s.acquireWriter("thread-a");
      c.current += 101;
      const replacement = await s.acquireWriter("thread-a");
      assert.ok(replacement.fence > old.fence);
      await old.release();
      await rejectsWith(s.acquireWriter("thread-a"), C.conflict, "old release freed the replacement");
    },
  },
  {
    id: "CC-15",
    title: "rejects stale leases after expiry takeover without changing state",
    async run(f) {
      const c = clock(Date.now());
      const { checkpoints: s } = await fresh(f, leaseOpts(c.now));
      const old = await s.acquireWriter("thread-a");
      await s.append({ checkpoint: checkpoint("root"), expectedHeadId: null, writer: old });
      c.current += 101;
      const attempts = async () => {
        await unchanged(s, "thread-a", async () => {
          await rejectsWith(old.renew(), C.lost, "renew");
          await rejectsWith(s.append({ checkpoint: checkpoint("stale", "root"), expectedHeadId: "root", writer: old }), C.lost, "append");
          await rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "root", writer: old }), C.lost, "deleteHead");
        });
        assert.equal(await s.get("stale"), null);
        assert.ok(await s.get("root"));
      };
      await attempts();
      const next = await s.acquireWriter("thread-a");
      assert.ok(next.fence > old.fence);
      await attempts();
      await old.release();
      assert.equal(await s.getHead("thread-a"), "root");
      await rejectsWith(s.acquireWriter("thread-a"), C.conflict, "old release freed the new lease");
      await next.release();
      await s.acquireWriter("thread-a");
    },
  },
  {
    id: "CC-16",
    title: "deletes only the current head and transitions to its parent",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await w.append(checkpoint("2", "1"));
      await unchanged(s, "thread-a", () => rejectsWith(w.deleteHead("thread-a", "1"), C.notHead));
      await w.deleteHead("thread-a", "2");
      assert.equal(await s.getHead("thread-a"), "1");
      await w.deleteHead("thread-a", "1");
      assert.equal(await s.getHead("thread-a"), null);
      assert.deepEqual(await s.listBlobReferences(), []);
      await rejectsWith(w.deleteHead("thread-a", "1"), C.notHead, "empty thread");
    },
  },
  {
    id: "ST-01",
    title: "reuses an id after deleteHead removed it, and round-trips optional fields and opaque conversation",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const conv = [{ role: "assistant", content: [{ type: "text", text: "é 😀" }], toolCalls: [{ id: "t", n: 1.5, z: null }] }];
      const full: SandboxCheckpoint = { ...checkpoint("1"), reason: "named", label: "L", sourceRunId: "run-1", conversation: conv, createdAt: -2.5 };
      await w.append(full);
      assert.deepEqual(await s.get("1"), full);
      await w.deleteHead("thread-a", "1");
      const plain = checkpoint("1");
      await w.append(plain);
      const got = await s.get("1");
      assert.deepEqual(got, plain);
      assert.ok(got && !("label" in got) && !("sourceRunId" in got), "absent optional fields came back");
    },
  },
  {
    id: "ST-02",
    title: "normalises an absent parentCheckpointId to null (R1)",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const { parentCheckpointId: _, ...rest } = checkpoint("1");
      await s.append({ checkpoint: rest as SandboxCheckpoint, expectedHeadId: null, writer: await w.of("thread-a") });
      assert.equal((await s.get("1"))?.parentCheckpointId, null);
    },
  },
  {
    id: "ST-03",
    title: "counts artifact keys with file keys and sorts artifacts before files",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const art: SandboxSnapshotArtifact = { artifactId: "x", name: "n", mimeType: "text/plain", size: 3, blobKey: artifactKey("9"), createdAt: 5 };
      await w.append({ ...checkpoint("1"), artifacts: [art, { ...art, artifactId: "x" }], files: [{ path: "d", kind: "dir" }, { path: "f", kind: "file", blobKey: fileKey("1"), size: 0 }] });
      assert.deepEqual(await s.listBlobReferences(), [
        { key: artifactKey("9"), references: 1 },
        { key: fileKey("1"), references: 1 },
      ]);
      assert.deepEqual((await s.get("1"))?.artifacts, [art, art]);
    },
  },
];

// ---------------------------------------------------------------------------
// Entry and artifact rules (§2.3, §2.4), each as a failing append that changes nothing.

const okFile = { path: "a", kind: "file", blobKey: fileKey("1"), size: 1 };
const okArt = { artifactId: "x", name: "n", mimeType: "m", size: 1, blobKey: artifactKey("1"), createdAt: 1 };

const invalidFiles: Array<[string, unknown]> = [
  ["files not an array", null],
  ["files a string", "a"],
  ["entry null", [null]],
  ["entry a number", [1]],
  ["path empty", [{ ...okFile, path: "" }]],
  ["path not a string", [{ ...okFile, path: 7 }]],
  ["path with NUL", [{ ...okFile, path: "a\0b" }]],
  ["path absolute", [{ ...okFile, path: "/a" }]],
  ["path with backslash", [{ ...okFile, path: "a\\b" }]],
  ["path drive letter", [{ ...okFile, path: "C:" }]],
  ["path drive letter and slash", [{ ...okFile, path: "C:/a" }]],
  ["path double slash", [{ ...okFile, path: "a//b" }]],
  ["path trailing slash", [{ ...okFile, path: "a/" }]],
  ["path dot segment", [{ ...okFile, path: "./a" }]],
  ["path dotdot segment", [{ ...okFile, path: "a/../b" }]],
  ["duplicate path", [okFile, { path: "a", kind: "dir" }]],
  ["entry beneath a file", [okFile, { path: "a/b", kind: "dir" }]],
  ["file above an earlier entry", [{ path: "a/b", kind: "dir" }, okFile]],
  ["blob key of the artifact namespace", [{ ...okFile, blobKey: artifactKey("1") }]],
  ["blob key upper-case hex", [{ ...okFile, blobKey: fileKey("A") }]],
  ["blob key short", [{ ...okFile, blobKey: "sandbox-files/sha256/" + "0".repeat(63) }]],
  ["blob key missing", [{ path: "a", kind: "file", size: 1 }]],
  ["size missing", [{ path: "a", kind: "file", blobKey: fileKey("1") }]],
  ["size a string", [{ ...okFile, size: "1" }]],
  ["size fractional", [{ ...okFile, size: 1.5 }]],
  ["size negative", [{ ...okFile, size: -1 }]],
  ["size 2^53", [{ ...okFile, size: 2 ** 53 }]],
  ["dir with a blobKey key holding undefined", [{ path: "a", kind: "dir", blobKey: undefined }]],
  ["dir with a size", [{ path: "a", kind: "dir", size: 0 }]],
  ["kind symlink", [{ path: "a", kind: "symlink" }]],
  ["kind missing", [{ path: "a" }]],
  // The contract accepts these; a UTF-8 wire cannot carry them, so the client refuses them (README).
  ["path not well-formed Unicode", [{ ...okFile, path: "x\uD800" }]],
];

const invalidArtifacts: Array<[string, unknown]> = [
  ["artifacts not an array", {}],
  ["artifact null", [null]],
  ["artifactId empty", [{ ...okArt, artifactId: "" }]],
  ["artifactId a lone surrogate", [{ ...okArt, artifactId: "\uDC00" }]],
  ["artifactId a number", [{ ...okArt, artifactId: 5 }]],
  ["name empty", [{ ...okArt, name: "" }]],
  ["mimeType missing", [{ ...okArt, mimeType: undefined }]],
  ["blob key of the file namespace", [{ ...okArt, blobKey: fileKey("1") }]],
  ["size fractional", [{ ...okArt, size: 0.5 }]],
  ["createdAt NaN", [{ ...okArt, createdAt: NaN }]],
  ["createdAt a string", [{ ...okArt, createdAt: "1" }]],
  ["name not well-formed Unicode", [{ ...okArt, name: "\uDC00" }]],
];

const validFiles: Array<[string, unknown[]]> = [
  ["drive-like C:foo", [{ ...okFile, path: "C:foo" }]],
  ["dots and spaces", [{ ...okFile, path: "..." }, { path: ".hidden", kind: "dir" }, { path: " ", kind: "dir" }]],
  ["file below a dir entry", [{ path: "a/b", kind: "file", blobKey: fileKey("1"), size: 1 }, { path: "a", kind: "dir" }]],
  ["size -0", [{ ...okFile, size: -0 }]],
  ["size 2^53-1", [{ ...okFile, size: 2 ** 53 - 1 }]],
];

export const entryCases: Case[] = [
  ...invalidFiles.map(
    ([name, files]): Case => ({
      id: `ENT-F ${name}`,
      title: `rejects ${name} with INVALID_ENTRY`,
      async run(f) {
        const { checkpoints: s, w } = await fresh(f);
        await unchanged(s, "thread-a", () => rejectsWith(w.append({ ...checkpoint("1"), files: files as SandboxCheckpoint["files"] }), C.invalidEntry, name));
      },
    }),
  ),
  ...invalidArtifacts.map(
    ([name, artifacts]): Case => ({
      id: `ENT-A ${name}`,
      title: `rejects ${name} with INVALID_ENTRY`,
      async run(f) {
        const { checkpoints: s, w } = await fresh(f);
        await unchanged(s, "thread-a", () => rejectsWith(w.append({ ...checkpoint("1"), artifacts: artifacts as SandboxCheckpoint["artifacts"] }), C.invalidEntry, name));
      },
    }),
  ),
  {
    id: "ENT-T",
    title: "rejects a label, reason or sourceRunId that is not well-formed Unicode with INVALID_ENTRY",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      for (const field of ["label", "reason", "sourceRunId"]) {
        await unchanged(s, "thread-a", () => rejectsWith(w.append({ ...checkpoint("1"), [field]: "a\uD800" } as SandboxCheckpoint), C.invalidEntry, field));
      }
    },
  },
  {
    id: "ENT-V",
    title: "accepts the entries the path rule allows, in the order given",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      let parent: string | null = null;
      for (const [i, [name, files]] of validFiles.entries()) {
        const id = `v${i}`;
        await w.append({ ...checkpoint(id, parent), files: files as SandboxCheckpoint["files"] }).catch((e: unknown) => {
          throw new Error(`${name}: ${String(e)}`);
        });
        const got = await s.get(id);
        assert.deepEqual(got?.files.map((e) => e.path), (files as Array<{ path: string }>).map((e) => e.path), name);
        parent = id;
      }
    },
  },
];

// ---------------------------------------------------------------------------
// Check order: each case fails two checks at once and must report the first.

export const orderCases: Case[] = [
  {
    id: "ORD-A01",
    title: "append: a non-string threadId is INVALID_ID before the writer-thread mismatch",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const c = { ...checkpoint("1"), threadId: 7 as unknown as string };
      await rejectsWith(s.append({ checkpoint: c, expectedHeadId: null, writer: await w.of("thread-a") }), C.invalidId);
    },
  },
  {
    id: "ORD-A02",
    title: "append: an invalid writer.threadId is INVALID_ID before an invalid checkpoint id is checked",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      await rejectsWith(s.append({ checkpoint: checkpoint("1"), expectedHeadId: null, writer: { threadId: "", ownerToken: "x", fence: 1 } }), C.invalidId);
    },
  },
  {
    id: "ORD-A03",
    title: "append: an empty checkpoint id with another thread's writer is INVALID_ID",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await rejectsWith(s.append({ checkpoint: checkpoint(""), expectedHeadId: null, writer: await w.of("thread-b") }), C.invalidId);
    },
  },
  {
    id: "ORD-A04",
    title: "append: expectedHeadId undefined, '' or a lone surrogate is INVALID_ID (null must be explicit)",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      for (const bad of [undefined, "", "\uD800", 5]) {
        await unchanged(s, "thread-a", async () =>
          rejectsWith(s.append({ checkpoint: checkpoint("1"), expectedHeadId: bad as unknown as null, writer: await w.of("thread-a") }), C.invalidId, String(bad)),
        );
      }
    },
  },
  {
    id: "ORD-A05",
    title: "append: a parentCheckpointId of '' is INVALID_ID before the writer-thread mismatch",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await rejectsWith(s.append({ checkpoint: checkpoint("1", ""), expectedHeadId: null, writer: await w.of("thread-b") }), C.invalidId);
    },
  },
  {
    id: "ORD-A06",
    title: "append: another thread's writer is WRITER_LOST even when createdAt and entries are invalid",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const bad = { ...checkpoint("1"), createdAt: NaN, files: null as unknown as [] };
      await unchanged(s, "thread-a", async () => rejectsWith(s.append({ checkpoint: bad, expectedHeadId: null, writer: await w.of("thread-b") }), C.lost));
    },
  },
  {
    id: "ORD-A07",
    title: "append: a released writer with an invalid entry is INVALID_ENTRY (lease currency is checked last)",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      const lease = await s.acquireWriter("thread-a");
      await lease.release();
      await rejectsWith(s.append({ checkpoint: { ...checkpoint("1"), createdAt: Infinity }, expectedHeadId: null, writer: lease }), C.invalidEntry, "createdAt");
      await rejectsWith(s.append({ checkpoint: { ...checkpoint("1"), artifacts: [null] as unknown as [] }, expectedHeadId: null, writer: lease }), C.invalidEntry, "artifact");
    },
  },
  {
    id: "ORD-A08",
    title: "append: a released writer is WRITER_LOST before a duplicate id and a stale head",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      const mine = await w.of("thread-a");
      await mine.release();
      await unchanged(s, "thread-a", () => rejectsWith(s.append({ checkpoint: checkpoint("1"), expectedHeadId: null, writer: mine }), C.lost));
    },
  },
  {
    id: "ORD-A09",
    title: "append: a duplicate id (from another thread) is DUPLICATE_ID before a stale head",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await w.append(checkpoint("x", null, "thread-b"));
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("x", null, "thread-a"), "nope"), C.duplicate));
    },
  },
  {
    id: "ORD-A10",
    title: "append: a stale head is STALE_HEAD before a parent mismatch",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await unchanged(s, "thread-a", () => rejectsWith(w.append(checkpoint("2", "other"), "nope"), C.staleHead));
    },
  },
  {
    id: "ORD-A11",
    title: "append: a forged writer (wrong token, wrong fence, never acquired) is WRITER_LOST",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const real = await w.of("thread-a");
      const forged: SandboxCheckpointWriter[] = [
        { threadId: "thread-a", ownerToken: "not-the-token", fence: real.fence },
        { threadId: "thread-a", ownerToken: real.ownerToken, fence: real.fence + 1 },
        { threadId: "thread-a", ownerToken: "", fence: 0 },
      ];
      for (const writer of forged) {
        await unchanged(s, "thread-a", () => rejectsWith(s.append({ checkpoint: checkpoint("1"), expectedHeadId: null, writer }), C.lost, JSON.stringify(writer)));
      }
      const plain = { threadId: real.threadId, ownerToken: real.ownerToken, fence: real.fence };
      assert.deepEqual(await s.append({ checkpoint: checkpoint("1"), expectedHeadId: null, writer: plain }), { headId: "1" });
    },
  },
  {
    id: "ORD-D01",
    title: "deleteHead: thread id, checkpoint id and writer thread id are INVALID_ID in that order before anything else",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const other = await w.of("thread-b");
      await rejectsWith(s.deleteHead({ threadId: "", checkpointId: "", writer: other }), C.invalidId, "thread");
      await rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "\uD800", writer: other }), C.invalidId, "checkpoint");
      await rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "1", writer: { threadId: "", ownerToken: "", fence: 0 } }), C.invalidId, "writer");
    },
  },
  {
    id: "ORD-D02",
    title: "deleteHead: another thread's writer or a released writer is WRITER_LOST before NOT_HEAD",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await unchanged(s, "thread-a", async () => rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "nope", writer: await w.of("thread-b") }), C.lost, "other thread"));
      const mine = await w.of("thread-a");
      await mine.release();
      await unchanged(s, "thread-a", () => rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "1", writer: mine }), C.lost, "released"));
    },
  },
  {
    id: "ORD-L01",
    title: "acquireWriter: an invalid thread id is INVALID_ID, and a fence grows with every acquire",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      await rejectsWith(s.acquireWriter(""), C.invalidId, "empty");
      await rejectsWith(s.acquireWriter("\uDC00x"), C.invalidId, "surrogate");
      const a = await s.acquireWriter("t");
      await a.release();
      await a.release();
      const b = await s.acquireWriter("t");
      assert.ok(b.fence > a.fence, "fence did not grow after release");
      assert.equal(b.threadId, "t");
    },
  },
  {
    id: "ORD-L02",
    title: "leases expire at expiresAt <= now: acquire succeeds and renew fails at that instant",
    async run(f) {
      const c = clock(5000);
      const { checkpoints: s } = await fresh(f, leaseOpts(c.now));
      const a = await s.acquireWriter("t");
      c.current = a.expiresAt - 1;
      await rejectsWith(s.acquireWriter("t"), C.conflict, "one ms before expiry");
      c.current = a.expiresAt;
      await rejectsWith(a.renew(), C.lost, "renew at expiry");
      const b = await s.acquireWriter("t");
      assert.equal(b.expiresAt, c.current + 100);
    },
  },
  {
    id: "ORD-L03",
    title: "an expired lease cannot be renewed even without a takeover; its release resolves and the thread can be taken",
    async run(f) {
      const c = clock(0);
      const { checkpoints: s } = await fresh(f, leaseOpts(c.now));
      const a = await s.acquireWriter("t");
      c.current += 200;
      await rejectsWith(a.renew(), C.lost, "revived");
      assert.equal(await a.release(), undefined);
      const b = await s.acquireWriter("t");
      assert.ok(b.fence > a.fence);
      await rejectsWith(a.renew(), C.lost, "old lease renewed over the new one");
    },
  },
];

// ---------------------------------------------------------------------------
// Reads (§3.4) and races: each write is one linearizable step.

export const readAndRaceCases: Case[] = [
  {
    id: "RD-01",
    title: "get, list, getHead and acquireWriter refuse invalid ids with INVALID_ID",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      for (const bad of ["", "\uD800", 7, {}, null, undefined]) {
        const id = bad as unknown as string;
        await rejectsWith(s.get(id), C.invalidId, `get ${String(bad)}`);
        await rejectsWith(s.list(id), C.invalidId, `list ${String(bad)}`);
        await rejectsWith(s.getHead(id), C.invalidId, `getHead ${String(bad)}`);
        await rejectsWith(s.acquireWriter(id), C.invalidId, `acquireWriter ${String(bad)}`);
      }
    },
  },
  {
    id: "RC-01",
    title: "racing appends at the same head: exactly one wins, the others fail with STALE_HEAD and leave no trace",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const lease = await w.of("thread-a");
      const ids = ["1", "2", "3", "4", "5"];
      const results = await Promise.allSettled(ids.map((id) => s.append({ checkpoint: checkpoint(id), expectedHeadId: null, writer: lease })));
      const won = ids.filter((_, i) => results[i]!.status === "fulfilled");
      assert.equal(won.length, 1, "not exactly one append won");
      for (const r of results) if (r.status === "rejected") await rejectsWith(Promise.reject(r.reason), C.staleHead, "a losing append");
      assert.equal(await s.getHead("thread-a"), won[0]);
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), won);
      assert.deepEqual(await s.listBlobReferences(), [{ key: fileKey(won[0]!), references: 1 }]);
    },
  },
  {
    id: "RC-02",
    title: "racing acquires of one thread: exactly one lease, the others WRITER_CONFLICT",
    async run(f) {
      const { checkpoints: s } = await fresh(f);
      const results = await Promise.allSettled([1, 2, 3, 4].map(() => s.acquireWriter("t")));
      assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
      for (const r of results) if (r.status === "rejected") await rejectsWith(Promise.reject(r.reason), C.conflict, "a losing acquire");
    },
  },
  {
    id: "RC-03",
    title: "racing forks into one destination with one lease: exactly one fork, one checkpoint, one head (MB-16)",
    async run(f) {
      const { checkpoints: s, transcripts: t, w } = await fresh(f);
      await w.append({ ...checkpoint("src"), threadId: "source" });
      const dest = await w.of("destination");
      const ids = ["f1", "f2", "f3"];
      const results = await Promise.allSettled(
        ids.map((id) => s.forkFromCheckpoint({ sourceThreadId: "source", sourceCheckpointId: "src", destinationThreadId: "destination", destinationCheckpointId: id, createdAt: 1, writer: dest })),
      );
      const won = ids.filter((_, i) => results[i]!.status === "fulfilled");
      assert.equal(won.length, 1, "not exactly one fork won");
      for (const r of results) if (r.status === "rejected") await rejectsWith(Promise.reject(r.reason), C.notEmpty, "a losing fork");
      assert.deepEqual((await s.list("destination")).map((c) => c.id), won);
      assert.equal(await s.getHead("destination"), won[0]);
      assert.deepEqual(await t.loadThread("destination"), checkpoint("src").conversation);
    },
  },
];

// ---------------------------------------------------------------------------
// deleteCheckpoints (A10, A11).

export const pruneCases: Case[] = [
  {
    id: "PR-01",
    title: "deleteCheckpoints keeps the head chain's newest, returns the removed ids oldest first, and drops their counts",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      for (const [id, parent] of [["1", null], ["2", "1"], ["3", "2"], ["4", "3"]] as const) await w.append(checkpoint(id, parent));
      assert.deepEqual(await s.deleteCheckpoints({ threadId: "thread-a", keep: 2, writer: await w.of("thread-a") }), { deleted: ["1", "2"] });
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["3", "4"]);
      assert.deepEqual(await s.listBlobReferences(), [{ key: fileKey("3"), references: 1 }, { key: fileKey("4"), references: 1 }]);
      assert.deepEqual(await s.deleteCheckpoints({ threadId: "thread-a", keep: 5, writer: await w.of("thread-a") }), { deleted: [] });
    },
  },
  {
    id: "PR-04",
    title: "deleteCheckpoints follows the parent chain, not createdAt",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append({ ...checkpoint("1"), createdAt: 30 });
      await w.append({ ...checkpoint("2", "1"), createdAt: 20 });
      await w.append({ ...checkpoint("3", "2"), createdAt: 10 });
      assert.deepEqual(await s.deleteCheckpoints({ threadId: "thread-a", keep: 2, writer: await w.of("thread-a") }), { deleted: ["1"] });
      assert.deepEqual((await s.list("thread-a")).map((c) => c.id), ["3", "2"]);
      assert.equal(await s.getHead("thread-a"), "3");
    },
  },
  {
    id: "PR-02",
    title: "deleteHead after pruning leaves no head when the parent is gone (A10)",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await w.append(checkpoint("2", "1"));
      await s.deleteCheckpoints({ threadId: "thread-a", keep: 1, writer: await w.of("thread-a") });
      await w.deleteHead("thread-a", "2");
      assert.deepEqual(await state(s), { head: null, list: [], refs: [] });
    },
  },
  {
    id: "PR-03",
    title: "deleteCheckpoints: ids, then another thread's writer, then keep, then lease currency",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"));
      await w.append(checkpoint("2", "1"));
      const other = await w.of("thread-b");
      await rejectsWith(s.deleteCheckpoints({ threadId: "", keep: 0, writer: other }), C.invalidId, "thread id");
      await rejectsWith(s.deleteCheckpoints({ threadId: "thread-a", keep: 0, writer: { threadId: "", ownerToken: "", fence: 0 } }), C.invalidId, "writer thread id");
      await rejectsWith(s.deleteCheckpoints({ threadId: "thread-a", keep: 0, writer: other }), C.lost, "other thread before keep");
      const mine = await w.of("thread-a");
      for (const keep of [0, -1, 1.5, NaN, Infinity, 2 ** 53]) {
        await unchanged(s, "thread-a", () => rejectsWith(s.deleteCheckpoints({ threadId: "thread-a", keep, writer: mine }), C.invalidEntry, `keep ${keep}`));
      }
      await mine.release();
      await unchanged(s, "thread-a", () => rejectsWith(s.deleteCheckpoints({ threadId: "thread-a", keep: 1, writer: mine }), C.lost, "released"));
    },
  },
];

// ---------------------------------------------------------------------------
// Fork (§6.2, §4.1, §4.2).

const source: SandboxCheckpoint = {
  id: "source-root",
  threadId: "source",
  parentCheckpointId: null,
  createdAt: 10,
  reason: "named",
  label: "source label",
  sourceRunId: "run-1",
  files: [{ path: "a.txt", kind: "file", blobKey: fileKey("a".repeat(64)), size: 1 }],
  conversation: [{ role: "user", content: "checkpoint conversation" }],
  artifacts: [],
};

async function forkSetup(f: Factory, withSource = true) {
  const set = await fresh(f);
  if (withSource) await set.w.append(source);
  const input = (writer: SandboxCheckpointWriter, over: Record<string, unknown> = {}) => ({
    sourceThreadId: "source",
    sourceCheckpointId: "source-root",
    destinationThreadId: "destination",
    destinationCheckpointId: "fork-root",
    createdAt: 20,
    writer,
    ...over,
  });
  const destState = async (thread = "destination") => ({
    transcript: await set.transcripts.loadThread(thread),
    ...(await state(set.checkpoints, thread)),
  });
  const destUnchanged = async (op: () => Promise<void>, thread = "destination") => {
    const before = await destState(thread);
    await op();
    assert.deepEqual(await destState(thread), before, "destination changed after a failed fork");
  };
  return { ...set, input, destUnchanged };
}

export const forkCases: Case[] = [
  {
    id: "FC-01",
    title: "copies a selected historical checkpoint and creates an exact fork root",
    async run(f) {
      const { checkpoints: s, transcripts: t, w, input } = await forkSetup(f);
      await w.append({ ...source, id: "source-head", parentCheckpointId: "source-root", createdAt: 11, files: [], conversation: [{ role: "user", content: "newer" }] });
      await t.saveThread("source", [{ role: "user", content: "current source message" }]);
      const { checkpoint: root } = await s.forkFromCheckpoint(input(await w.of("destination")));
      const want = { id: "fork-root", threadId: "destination", parentCheckpointId: null, createdAt: 20, reason: "fork-root", files: source.files, conversation: source.conversation, artifacts: [] };
      assert.deepEqual(root, want);
      assert.deepEqual(await s.get("fork-root"), want);
      assert.deepEqual(await t.loadThread("destination"), source.conversation);
      assert.equal(await s.getHead("source"), "source-head");
      assert.equal(await s.getHead("destination"), "fork-root");
      assert.deepEqual(await t.loadThread("source"), [{ role: "user", content: "current source message" }]);
      assert.deepEqual(await s.listBlobReferences(), [{ key: fileKey("a".repeat(64)), references: 2 }]);
    },
  },
  {
    id: "FC-03",
    title: "rejects a missing source without changing the destination",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f, false);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("destination"), { sourceCheckpointId: "missing" })), C.sourceNotFound));
    },
  },
  {
    id: "FC-04",
    title: "rejects a source thread mismatch without changing the destination",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("destination"), { sourceThreadId: "another-source" })), C.sourceMismatch));
    },
  },
  {
    id: "FC-05",
    title: "rejects equal source and destination threads without changing the source",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("source"), { destinationThreadId: "source" })), C.sourceMismatch), "source");
    },
  },
  {
    id: "FC-06",
    title: "rejects a missing destination writer without changing the destination",
    async run(f) {
      const { checkpoints: s, input, destUnchanged } = await forkSetup(f);
      await destUnchanged(() => rejectsWith(s.forkFromCheckpoint(input({ threadId: "destination", ownerToken: "missing-owner", fence: 1 })), C.lost));
    },
  },
  {
    id: "FC-07",
    title: "rejects a wrong destination writer without changing the destination",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("another-thread"))), C.lost));
    },
  },
  {
    id: "FC-08",
    title: "rejects a stale destination writer without changing the destination",
    async run(f) {
      const { checkpoints: s, input, destUnchanged } = await forkSetup(f);
      const lease = await s.acquireWriter("destination");
      await lease.release();
      await destUnchanged(() => rejectsWith(s.forkFromCheckpoint(input(lease)), C.lost));
    },
  },
  {
    id: "FC-09",
    title: "rejects a destination transcript without changing its checkpoint state",
    async run(f) {
      const { checkpoints: s, transcripts: t, w, input, destUnchanged } = await forkSetup(f);
      await t.saveThread("destination", [{ role: "user", content: "already here" }]);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("destination"))), C.notEmpty));
    },
  },
  {
    id: "FC-10",
    title: "rejects an orphaned checkpoint id without changing the destination",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f);
      await w.append({ ...source, id: "orphaned-id", threadId: "orphan-thread" });
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("destination"), { destinationCheckpointId: "orphaned-id" })), C.notEmpty));
    },
  },
  {
    id: "FK-01",
    title: "an empty saved transcript and an existing head both make the destination not empty",
    async run(f) {
      const { checkpoints: s, transcripts: t, w, input, destUnchanged } = await forkSetup(f);
      await t.saveThread("destination", []);
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("destination"))), C.notEmpty, "empty transcript"));
      await w.append(checkpoint("d1", null, "dest2"));
      await destUnchanged(async () => rejectsWith(s.forkFromCheckpoint(input(await w.of("dest2"), { destinationThreadId: "dest2" })), C.notEmpty, "head"), "dest2");
    },
  },
  {
    id: "FK-02",
    title: "fork: the four ids and the writer thread id are INVALID_ID, then createdAt, then equal threads",
    async run(f) {
      const { checkpoints: s, w, input, destUnchanged } = await forkSetup(f);
      const dest = await w.of("destination");
      for (const field of ["sourceThreadId", "sourceCheckpointId", "destinationThreadId", "destinationCheckpointId"]) {
        await destUnchanged(() => rejectsWith(s.forkFromCheckpoint(input(dest, { [field]: "\uD800", createdAt: NaN })), C.invalidId, field));
      }
      await rejectsWith(s.forkFromCheckpoint(input({ threadId: "", ownerToken: "", fence: 0 }, { createdAt: NaN })), C.invalidId, "writer thread id");
      await rejectsWith(s.forkFromCheckpoint(input(dest, { createdAt: NaN, destinationThreadId: "source" })), C.invalidEntry, "NaN before equal threads");
      await rejectsWith(s.forkFromCheckpoint(input(dest, { destinationThreadId: "source", sourceCheckpointId: "missing" })), C.sourceMismatch, "equal threads before a missing source");
    },
  },
  {
    id: "FK-03",
    title: "fork: a missing source beats a wrong writer; a wrong writer beats an existing destination id",
    async run(f) {
      const { checkpoints: s, w, input } = await forkSetup(f);
      const wrong = await w.of("another-thread");
      await rejectsWith(s.forkFromCheckpoint(input(wrong, { sourceCheckpointId: "missing" })), C.sourceNotFound, "missing source");
      await rejectsWith(s.forkFromCheckpoint(input(wrong, { destinationCheckpointId: "source-root" })), C.lost, "wrong writer");
    },
  },
  {
    id: "FK-04",
    title: "a fork works while another holds the source lease; its root can be built on and deleted, and the destination stays not empty",
    async run(f) {
      const { checkpoints: s, w, input } = await forkSetup(f);
      const dest = await w.of("destination");
      await rejectsWith(s.acquireWriter("source"), C.conflict, "source lease held");
      await s.forkFromCheckpoint(input(dest));
      await s.append({ checkpoint: checkpoint("d2", "fork-root", "destination"), expectedHeadId: "fork-root", writer: dest });
      await s.deleteHead({ threadId: "destination", checkpointId: "d2", writer: dest });
      await s.deleteHead({ threadId: "destination", checkpointId: "fork-root", writer: dest });
      assert.equal(await s.getHead("destination"), null);
      await rejectsWith(s.forkFromCheckpoint(input(dest, { destinationCheckpointId: "fork-2" })), C.notEmpty, "transcript stays");
    },
  },
  {
    id: "TR-01",
    title: "transcripts: an unknown thread loads [], save is a full replace, and reads are copies",
    async run(f) {
      const { transcripts: t } = await fresh(f);
      assert.deepEqual(await t.loadThread("nobody"), []);
      await t.saveThread("t", [{ role: "user", content: "a" }, { role: "assistant", content: "b" }]);
      await t.saveThread("t", [{ role: "user", content: "c" }]);
      const got = await t.loadThread("t");
      assert.deepEqual(got, [{ role: "user", content: "c" }]);
      got.push({ role: "user", content: "mutated" });
      assert.deepEqual(await t.loadThread("t"), [{ role: "user", content: "c" }]);
    },
  },
];

// ---------------------------------------------------------------------------
// Instance store (§6.3, §5).

const record = (over: Partial<SandboxInstanceRecord> = {}): SandboxInstanceRecord => ({
  key: "thread-1",
  provider: "fake",
  providerSandboxId: "sb-1",
  threadId: "thread-1",
  updatedAt: 1,
  ...over,
});

export const instanceCases: Case[] = [
  {
    id: "IC-01",
    title: "returns null for a missing key",
    async run(f) {
      const { instances: i } = await fresh(f);
      assert.equal(await i.get("absent"), null);
    },
  },
  {
    id: "IC-02",
    title: "round-trips an upserted record with all fields",
    async run(f) {
      const { instances: i } = await fresh(f);
      const r = record({ latestSnapshotId: "snap-1", latestRunId: "run-1", updatedAt: 1_700_000_000_123 });
      await i.upsert(r);
      assert.deepEqual(await i.get("thread-1"), r);
    },
  },
  {
    id: "IC-03",
    title: "omits absent optional fields on read",
    async run(f) {
      const { instances: i } = await fresh(f);
      await i.upsert(record());
      const got = await i.get("thread-1");
      assert.deepEqual(got, record());
      assert.ok(got && !("latestSnapshotId" in got) && !("latestRunId" in got));
    },
  },
  {
    id: "IC-04",
    title: "overwrites an existing record on re-upsert",
    async run(f) {
      const { instances: i } = await fresh(f);
      await i.upsert(record({ latestSnapshotId: "snap-1" }));
      await i.upsert({ ...record({ providerSandboxId: "sb-2", updatedAt: 2 }), latestSnapshotId: undefined } as unknown as SandboxInstanceRecord);
      const got = await i.get("thread-1");
      assert.equal(got?.providerSandboxId, "sb-2");
      assert.equal(got?.updatedAt, 2);
      assert.ok(got && !("latestSnapshotId" in got), "re-upsert merged instead of replacing");
    },
  },
  {
    id: "IC-05",
    title: "isolates records by key",
    async run(f) {
      const { instances: i } = await fresh(f);
      await i.upsert(record({ key: "a" }));
      await i.upsert(record({ key: "b", providerSandboxId: "sb-b" }));
      assert.equal((await i.get("a"))?.providerSandboxId, "sb-1");
      assert.equal((await i.get("b"))?.providerSandboxId, "sb-b");
    },
  },
  {
    id: "IC-06",
    title: "deletes a record",
    async run(f) {
      const { instances: i } = await fresh(f);
      await i.upsert(record());
      await i.delete("thread-1");
      assert.equal(await i.get("thread-1"), null);
    },
  },
  {
    id: "IC-07",
    title: "delete of a missing key is a no-op",
    async run(f) {
      const { instances: i } = await fresh(f);
      assert.equal(await i.delete("absent"), undefined);
    },
  },
];


// ---------------------------------------------------------------------------
// The bounds of cairn's contract (docs/limits.md): every identifier and name
// at its bound is accepted, one byte past it is refused with the code of the
// check it belongs to, in that check's place, and the refusal changes
// nothing. Lengths are bytes of UTF-8: "é" counts two, so a string of
// MAX/2 "é" is at the bound with half as many UTF-16 units.

/** A string of exactly n bytes of UTF-8 that begins with tag: NUL bytes after it, which keys and JSON escape the most. */
function idOf(tag: string, n: number): string {
  return tag + "\0".repeat(n - tag.length);
}

/** A string of exactly n bytes of UTF-8 that begins with tag, padded with the two-byte "é". */
function nameOf(tag: string, n: number): string {
  const pad = n - tag.length;
  return tag + "x".repeat(pad % 2) + "é".repeat(Math.floor(pad / 2));
}

/** An entry path of exactly n bytes that ends with tag: a deep chain of one-letter directories. */
function pathOf(tag: string, n: number): string {
  const pad = n - tag.length;
  return "d/".repeat(Math.floor(pad / 2)) + "x".repeat(pad % 2) + tag;
}

const ID = 1024;
const NAME = 1024;
const PATH = 4096;
const TOKEN = 1024;

/** A root checkpoint whose every name and path is at its bound. */
function bounded(id: string, thread: string): SandboxCheckpoint {
  return {
    ...checkpoint(id, null, thread),
    createdAt: 1,
    reason: nameOf("reason-", NAME) as SandboxCheckpoint["reason"],
    label: nameOf("label-", NAME),
    sourceRunId: nameOf("run-", NAME),
    files: [{ path: pathOf("f", PATH), kind: "file", blobKey: fileKey("1"), size: 1 }, { path: "d", kind: "dir" }],
    artifacts: [{ artifactId: nameOf("artifact-", NAME), name: nameOf("name-", NAME), mimeType: nameOf("text/", NAME), blobKey: artifactKey("2"), size: 3, createdAt: 5 }],
  };
}

export const boundCases: Case[] = [
  {
    id: "BND-01",
    title: "bounds: every identifier, name and path at its bound is accepted and reads back",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const thread = idOf("t", ID);
      const root = bounded(idOf("c", ID), thread);
      await w.append(root, null);
      assert.deepEqual(await s.get(root.id), root);
      const child = { ...checkpoint(nameOf("k", ID), root.id, thread), files: [{ path: "c", kind: "dir" as const }] };
      await w.append(child, root.id);
      assert.equal(await s.getHead(thread), child.id);
      assert.deepEqual((await s.list(thread)).map((c) => c.id), [root.id, child.id]);
      await w.deleteHead(thread, child.id);
      assert.equal(await s.getHead(thread), root.id);
    },
  },
  {
    id: "BND-02",
    title: "bounds: an identifier one byte past its bound is INVALID_ID everywhere, and changes nothing",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"), null);
      const lease = await w.of("thread-a");
      for (const past of [idOf("p", ID + 1), nameOf("p", ID + 1)]) {
        await unchanged(s, "thread-a", async () => {
          await rejectsWith(s.get(past), C.invalidId, "get");
          await rejectsWith(s.list(past), C.invalidId, "list");
          await rejectsWith(s.getHead(past), C.invalidId, "getHead");
          await rejectsWith(s.acquireWriter(past), C.invalidId, "acquireWriter");
          await rejectsWith(s.append({ checkpoint: checkpoint("2", "1", past), expectedHeadId: "1", writer: lease }), C.invalidId, "append thread");
          await rejectsWith(s.append({ checkpoint: checkpoint("2", "1"), expectedHeadId: "1", writer: { ...lease, threadId: past } }), C.invalidId, "append writer thread");
          await rejectsWith(s.append({ checkpoint: { ...checkpoint("2", "1"), id: past }, expectedHeadId: "1", writer: lease }), C.invalidId, "append id");
          await rejectsWith(s.append({ checkpoint: checkpoint("2", "1"), expectedHeadId: past, writer: lease }), C.invalidId, "append expected head");
          await rejectsWith(s.append({ checkpoint: checkpoint("2", past), expectedHeadId: "1", writer: lease }), C.invalidId, "append parent");
          await rejectsWith(s.deleteHead({ threadId: past, checkpointId: "1", writer: lease }), C.invalidId, "deleteHead thread");
          await rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: past, writer: lease }), C.invalidId, "deleteHead id");
          await rejectsWith(s.deleteCheckpoints({ threadId: past, keep: 1, writer: lease }), C.invalidId, "deleteCheckpoints thread");
        });
      }
    },
  },
  {
    id: "BND-03",
    title: "bounds: a name or path one byte past its bound is INVALID_ENTRY, and changes nothing",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"), null);
      const over: Array<[string, (c: SandboxCheckpoint) => void]> = [
        ["reason", (c) => (c.reason = nameOf("reason-", NAME + 1) as SandboxCheckpoint["reason"])],
        ["label", (c) => (c.label = nameOf("label-", NAME + 1))],
        ["sourceRunId", (c) => (c.sourceRunId = nameOf("run-", NAME + 1))],
        ["path", (c) => (c.files[0]!.path = pathOf("f", PATH + 1))],
        ["artifactId", (c) => (c.artifacts[0]!.artifactId = nameOf("artifact-", NAME + 1))],
        ["name", (c) => (c.artifacts[0]!.name = nameOf("name-", NAME + 1))],
        ["mimeType", (c) => (c.artifacts[0]!.mimeType = nameOf("text/", NAME + 1))],
      ];
      for (const [what, set] of over) {
        const c = { ...bounded("2", "thread-a"), parentCheckpointId: "1" };
        set(c);
        await unchanged(s, "thread-a", () => rejectsWith(w.append(c, "1"), C.invalidEntry, what));
      }
    },
  },
  {
    id: "BND-04",
    title: "bounds: an id past its bound is INVALID_ID before another thread's writer, a label past its bound WRITER_LOST after it",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"), null);
      const other = await w.of("thread-b");
      await rejectsWith(s.append({ checkpoint: { ...checkpoint("2", "1"), id: idOf("c", ID + 1) }, expectedHeadId: "1", writer: other }), C.invalidId);
      await rejectsWith(s.append({ checkpoint: { ...checkpoint("2", "1"), label: nameOf("l", NAME + 1) }, expectedHeadId: "1", writer: other }), C.lost);
    },
  },
  {
    id: "BND-05",
    title: "bounds: an ownerToken past its bound is WRITER_LOST, and the lease stays current",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      await w.append(checkpoint("1"), null);
      const bad = { ...(await w.of("thread-a")), ownerToken: nameOf("token-", TOKEN + 1) };
      await unchanged(s, "thread-a", async () => {
        await rejectsWith(s.append({ checkpoint: checkpoint("2", "1"), expectedHeadId: "1", writer: bad }), C.lost, "append");
        await rejectsWith(s.deleteHead({ threadId: "thread-a", checkpointId: "1", writer: bad }), C.lost, "deleteHead");
      });
      await w.append(checkpoint("2", "1"), "1");
    },
  },
  {
    id: "BND-06",
    title: "bounds: fork ids at their bound fork; one byte past is INVALID_ID",
    async run(f) {
      const { checkpoints: s, w } = await fresh(f);
      const src = bounded(idOf("s", ID), idOf("t", ID));
      await w.append(src, null);
      const dest = idOf("u", ID);
      const input = { sourceThreadId: src.threadId, sourceCheckpointId: src.id, destinationThreadId: dest, destinationCheckpointId: idOf("f", ID), createdAt: 20, writer: await w.of(dest) };
      const { checkpoint: root } = await s.forkFromCheckpoint(input);
      assert.equal(root.id, input.destinationCheckpointId);
      assert.equal(await s.getHead(dest), root.id);
      const past = idOf("p", ID + 1);
      for (const k of ["sourceThreadId", "sourceCheckpointId", "destinationThreadId", "destinationCheckpointId"] as const) {
        await rejectsWith(s.forkFromCheckpoint({ ...input, destinationThreadId: "d2", destinationCheckpointId: "f2", [k]: past }), C.invalidId, k);
      }
    },
  },
  {
    id: "BND-07",
    title: "bounds: an instance key at its bound round-trips; past it INVALID_ID, a field past its bound INVALID_ENTRY",
    async run(f) {
      const { instances: i } = await fresh(f);
      const r = record({ key: idOf("k", ID), provider: nameOf("p", NAME), providerSandboxId: nameOf("s", NAME), threadId: nameOf("t", NAME), latestSnapshotId: nameOf("n", NAME), latestRunId: nameOf("r", NAME) });
      await i.upsert(r);
      assert.deepEqual(await i.get(r.key), r);
      const past = idOf("k", ID + 1);
      await rejectsWith(i.get(past), C.invalidId, "get");
      await rejectsWith(i.upsert(record({ key: past })), C.invalidId, "upsert");
      await rejectsWith(i.delete(past), C.invalidId, "delete");
      for (const k of ["provider", "providerSandboxId", "threadId", "latestSnapshotId", "latestRunId"] as const) {
        await rejectsWith(i.upsert({ ...r, [k]: nameOf(k, NAME + 1) }), C.invalidEntry, k);
      }
      assert.deepEqual(await i.get(r.key), r);
    },
  },
];

export const allCases: Case[] = [...storeCases, ...entryCases, ...orderCases, ...readAndRaceCases, ...pruneCases, ...forkCases, ...instanceCases, ...boundCases];

/**
 * Runs cases against a factory until one fails and returns its id and
 * error, or undefined when every case passed.
 */
export async function firstFailure(cases: Case[], factory: Factory): Promise<{ id: string; error: unknown } | undefined> {
  for (const c of cases) {
    try {
      await c.run(factory);
    } catch (error) {
      return { id: c.id, error };
    }
  }
  return undefined;
}

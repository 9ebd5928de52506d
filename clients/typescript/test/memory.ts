// A small in-memory store that follows the contract, used only to check the
// conformance cases themselves (a case that fails here is wrong) and as the
// base of the deliberately broken stores in mutants.test.ts. It is not part of
// the package: the package's store is cairnd.

import type { SandboxCheckpoint, SandboxCheckpointStoreOptions, SandboxInstanceRecord, ModelMessageLike } from "../src/types.js";
import {
  SandboxCheckpointConflictError,
  SandboxCheckpointDuplicateIdError,
  SandboxCheckpointError,
  SandboxCheckpointNotHeadError,
  SandboxCheckpointParentMismatchError,
  SandboxCheckpointWriterConflictError,
  SandboxCheckpointWriterLostError,
} from "../src/errors.js";
import { assertInstanceKey, assertInstanceRecord, assertValidIdentifier, assertWriterThread, checkAppendInput, checkDeleteCheckpointsInput, checkDeleteHeadInput, checkForkInput, validateEntries, type WriterFields } from "../src/validate.js";
import type { StoreSet } from "./conformance.js";

/** Rules a mutant breaks; each must make at least one conformance case fail. */
export type Fault =
  | "none"
  | "instance-unbounded"
  | "ids-unbounded"
  | "get-shares-memory"
  | "list-utf16-order"
  | "refs-count-duplicates"
  | "no-stale-head-check"
  | "parent-before-duplicate"
  | "lease-expires-after-now"
  | "release-ignores-owner"
  | "fence-resets"
  | "renew-revives"
  | "fork-copies-label"
  | "fork-ignores-transcript"
  | "instance-merges"
  | "prune-by-created-at"
  | "writer-after-entries"
  | "append-not-atomic";

const enc = new TextEncoder();
function utf8Compare(a: string, b: string): number {
  const x = enc.encode(a);
  const y = enc.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

function blobKeys(c: SandboxCheckpoint, fault: Fault): string[] {
  const keys: string[] = [];
  for (const e of c.files) if (e.kind === "file") keys.push(e.blobKey);
  for (const a of c.artifacts) keys.push(a.blobKey);
  return fault === "refs-count-duplicates" ? keys : [...new Set(keys)];
}

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

export function memoryStoreSet(options: SandboxCheckpointStoreOptions, fault: Fault = "none"): StoreSet {
  const now = options.now ?? (() => Date.now());
  const leaseMs = options.leaseDurationMs ?? 120_000;
  const renewAfterMs = options.renewAfterMs ?? 45_000;
  const checkpoints = new Map<string, SandboxCheckpoint>();
  const heads = new Map<string, string>();
  const writers = new Map<string, { ownerToken: string; fence: number; expiresAt: number }>();
  const fences = new Map<string, number>();
  const refs = new Map<string, number>();
  const messages = new Map<string, ModelMessageLike[]>();
  const instances = new Map<string, SandboxInstanceRecord>();
  let tokens = 0;

  const expired = (expiresAt: number) => (fault === "lease-expires-after-now" ? expiresAt < now() : expiresAt <= now());
  const current = (w: WriterFields, thread: string) => {
    const row = writers.get(thread);
    return row !== undefined && row.ownerToken === w.ownerToken && row.fence === w.fence && !expired(row.expiresAt);
  };
  const assertCurrent = (w: WriterFields, thread: string) => {
    if (!current(w, thread)) throw new SandboxCheckpointWriterLostError();
  };
  const addRefs = (c: SandboxCheckpoint, d: number) => {
    for (const k of blobKeys(c, fault)) {
      const n = (refs.get(k) ?? 0) + d;
      if (n <= 0) refs.delete(k);
      else refs.set(k, n);
    }
  };
  const remove = (c: SandboxCheckpoint) => {
    checkpoints.delete(c.id);
    addRefs(c, -1);
  };
  const out = (c: SandboxCheckpoint) => (fault === "get-shares-memory" ? c : clone(c));

  const s: StoreSet["checkpoints"] = {
    async get(id) {
      assertValidIdentifier(id, "id");
      const c = checkpoints.get(id);
      return c ? out(c) : null;
    },
    async list(threadId) {
      assertValidIdentifier(threadId, "threadId");
      const cmp = fault === "list-utf16-order" ? (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0) : utf8Compare;
      return [...checkpoints.values()]
        .filter((c) => c.threadId === threadId)
        .sort((a, b) => a.createdAt - b.createdAt || cmp(a.id, b.id))
        .map(out);
    },
    async getHead(threadId) {
      assertValidIdentifier(threadId, "threadId");
      return heads.get(threadId) ?? null;
    },
    async append(input) {
      if (fault === "writer-after-entries" && input.writer.threadId !== input.checkpoint.threadId) {
        // Checks the entries before the writer's thread, against the contract's order.
        validateEntries(input.checkpoint.files);
      }
      // ids-unbounded checks a checkpoint id cut to its first bytes, so an id
      // past the bound passes as a store without the bound would let it.
      const probe = fault === "ids-unbounded" && typeof input.checkpoint?.id === "string" ? { ...input, checkpoint: { ...input.checkpoint, id: input.checkpoint.id.slice(0, 8) } } : input;
      const { checkpoint: checked, expectedHeadId, parent, writer: w } = checkAppendInput(probe);
      const c = clone({ ...checked, id: input.checkpoint.id, parentCheckpointId: parent });
      c.createdAt = checked.createdAt;
      assertCurrent(w, c.threadId);
      if (fault === "parent-before-duplicate" && parent !== expectedHeadId) throw new SandboxCheckpointParentMismatchError();
      if (checkpoints.has(c.id)) throw new SandboxCheckpointDuplicateIdError();
      if (fault !== "no-stale-head-check" && (heads.get(c.threadId) ?? null) !== expectedHeadId) throw new SandboxCheckpointConflictError();
      if (parent !== expectedHeadId) throw new SandboxCheckpointParentMismatchError();
      if (fault === "append-not-atomic") await new Promise((ok) => setTimeout(ok, 1)); // a gap between the checks and the write
      checkpoints.set(c.id, c);
      heads.set(c.threadId, c.id);
      addRefs(c, 1);
      return { headId: c.id };
    },
    async deleteHead(input) {
      const { threadId, checkpointId, writer: w } = checkDeleteHeadInput(input);
      assertCurrent(w, threadId);
      const c = checkpoints.get(checkpointId);
      if (heads.get(threadId) !== checkpointId || !c) throw new SandboxCheckpointNotHeadError();
      remove(c);
      if (c.parentCheckpointId && checkpoints.has(c.parentCheckpointId)) heads.set(threadId, c.parentCheckpointId);
      else heads.delete(threadId);
    },
    async acquireWriter(threadId) {
      assertValidIdentifier(threadId, "threadId");
      const row = writers.get(threadId);
      if (row && !expired(row.expiresAt)) throw new SandboxCheckpointWriterConflictError();
      const fence = fault === "fence-resets" && !row ? 1 : (fences.get(threadId) ?? 0) + 1;
      fences.set(threadId, fence);
      const mine = { ownerToken: `token-${++tokens}`, fence, expiresAt: now() + leaseMs };
      writers.set(threadId, mine);
      const id: WriterFields = { threadId, ownerToken: mine.ownerToken, fence, plausible: true };
      let expiresAt = mine.expiresAt;
      return {
        threadId,
        ownerToken: mine.ownerToken,
        fence,
        get expiresAt() {
          return expiresAt;
        },
        renewAfterMs,
        async renew() {
          const r = writers.get(threadId);
          const ok = fault === "renew-revives" ? r?.ownerToken === id.ownerToken : current(id, threadId);
          if (!ok || !r) throw new SandboxCheckpointWriterLostError();
          r.expiresAt = expiresAt = now() + leaseMs;
          return { expiresAt };
        },
        async release() {
          const r = writers.get(threadId);
          if (r && (fault === "release-ignores-owner" || (r.ownerToken === id.ownerToken && r.fence === id.fence))) writers.delete(threadId);
        },
      };
    },
    async listBlobReferences() {
      return [...refs.entries()].sort(([a], [b]) => utf8Compare(a, b)).map(([key, references]) => ({ key, references }));
    },
    async deleteCheckpoints(input) {
      const { threadId, keep, writer: w } = checkDeleteCheckpointsInput(input);
      assertCurrent(w, threadId);
      const chain: SandboxCheckpoint[] = [];
      for (let id = heads.get(threadId); id; ) {
        const c = checkpoints.get(id);
        if (!c) break;
        chain.push(c);
        id = c.parentCheckpointId ?? undefined;
      }
      if (fault === "prune-by-created-at") chain.sort((a, b) => b.createdAt - a.createdAt);
      const deleted: string[] = [];
      for (let i = chain.length - 1; i >= keep; i--) {
        remove(chain[i]!);
        deleted.push(chain[i]!.id);
      }
      return { deleted };
    },
    async forkFromCheckpoint(input) {
      const { sourceThreadId, sourceCheckpointId, destinationThreadId, destinationCheckpointId, createdAt, writer: w } = checkForkInput(input);
      const src = checkpoints.get(sourceCheckpointId);
      if (!src) throw new SandboxCheckpointError("SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND", "no source");
      if (src.threadId !== sourceThreadId) throw new SandboxCheckpointError("SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH", "source thread");
      assertWriterThread(w, destinationThreadId, "fork destination");
      assertCurrent(w, destinationThreadId);
      const notEmpty =
        (fault !== "fork-ignores-transcript" && messages.has(destinationThreadId)) ||
        heads.has(destinationThreadId) ||
        checkpoints.has(destinationCheckpointId) ||
        [...checkpoints.values()].some((c) => c.threadId === destinationThreadId);
      if (notEmpty) throw new SandboxCheckpointError("SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY", "not empty");
      const root: SandboxCheckpoint = {
        id: destinationCheckpointId,
        threadId: destinationThreadId,
        parentCheckpointId: null,
        createdAt,
        reason: "fork-root",
        ...(fault === "fork-copies-label" && src.label !== undefined ? { label: src.label } : {}),
        files: clone(src.files),
        conversation: clone(src.conversation),
        artifacts: clone(src.artifacts),
      };
      messages.set(destinationThreadId, clone([...src.conversation]));
      checkpoints.set(root.id, root);
      heads.set(destinationThreadId, root.id);
      addRefs(root, 1);
      return { checkpoint: clone(root) };
    },
  };
  return {
    checkpoints: s,
    transcripts: {
      async loadThread(threadId) {
        return clone(messages.get(threadId) ?? []);
      },
      async saveThread(threadId, m) {
        messages.set(threadId, clone([...m]));
      },
    },
    instances: {
      async get(key) {
        if (fault !== "instance-unbounded") assertInstanceKey(key);
        const r = instances.get(key);
        return r ? clone(r) : null;
      },
      async upsert(record) {
        if (fault !== "instance-unbounded") assertInstanceRecord(record);
        const prev = instances.get(record.key);
        const next = clone(record);
        instances.set(record.key, fault === "instance-merges" && prev ? { ...prev, ...next } : next);
      },
      async delete(key) {
        if (fault !== "instance-unbounded") assertInstanceKey(key);
        instances.delete(key);
      },
    },
  };
}

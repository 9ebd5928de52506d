// The stores over cairnd: Connect over fetch, so they run in Node 20+,
// Cloudflare Workers, Deno and browsers with no other dependency.

import { create, isFieldSet, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

import {
  AppendRequestSchema,
  CheckpointSchema,
  CheckpointService,
  ErrorDetailSchema,
  GetHeadResponseSchema,
  InstanceRecordSchema,
  InstanceService,
  TestClockService,
  WriterSchema,
  type Checkpoint as PbCheckpoint,
  type InstanceRecord as PbInstanceRecord,
  type Writer as PbWriter,
} from "./gen/cairn/v1/cairn_pb.js";
import type { BlobClaimer } from "./blobs.js";
import {
  CairnRequestError,
  CairnUnknownOutcomeError,
  checkpointErrorFromCode,
  SandboxCheckpointError,
  SandboxCheckpointInvalidEntryError,
} from "./errors.js";
import type {
  AnyMessage,
  ForkCapableSandboxCheckpointStore,
  SandboxBlobReference,
  SandboxCheckpoint,
  SandboxCheckpointDeleteInput,
  SandboxCheckpointStoreOptions,
  SandboxCheckpointWriterLease,
  SandboxInstanceRecord,
  SandboxInstanceStore,
  SandboxSnapshotArtifact,
  SandboxSnapshotEntry,
  SandboxTranscriptStore,
} from "./types.js";
import {
  assertPlausible,
  assertInstanceKey,
  assertInstanceRecord,
  assertValidIdentifier,
  checkAppendInput,
  checkDeleteCheckpointsInput,
  checkDeleteHeadInput,
  checkForkInput,
  isBlobKey,
  readWriter,
  type WriterFields,
} from "./validate.js";

/** How to reach cairnd. */
export interface CairnClientOptions {
  /** cairnd's address, e.g. "https://cairnd.internal:8443" or "http://127.0.0.1:7070". */
  baseUrl: string;
  /** The tenant's bearer token; it selects the tenant's key prefix on the server. */
  token: string;
  /** The fetch to use (default globalThis.fetch), e.g. a Worker's service binding's fetch. */
  fetch?: typeof globalThis.fetch;
  /** The deadline of each request in milliseconds (default: none beyond the server's). */
  timeoutMs?: number;
  /** Send protobuf binary (default) or JSON (true: easier to read in a proxy log). */
  json?: boolean;
  /** A ready transport instead of the fetch transport (tests, interceptors of your own). */
  transport?: Transport;
  /** Runs every request in a test session of a server started with --test-clock (see openTestSession). */
  testSession?: { id: string; now: () => number };
}

/** The checkpoint store over cairnd: upstream's methods plus the optional capabilities. */
export interface CairnCheckpointStore<M = AnyMessage> extends ForkCapableSandboxCheckpointStore<M>, BlobClaimer {
  deleteCheckpoints(input: SandboxCheckpointDeleteInput): Promise<{ deleted: string[] }>;
  /**
   * One page of thread ids (threads with at least one checkpoint) after
   * `after`, sorted by their UTF-8 bytes; an empty page means no more.
   */
  listThreads(after?: string, limit?: number): Promise<string[]>;
}

type Svc = Client<typeof CheckpointService>;

function transportOf(o: CairnClientOptions): Transport {
  if (o.transport) return o.transport;
  const auth: Interceptor = (next) => async (req) => {
    req.header.set("Authorization", `Bearer ${o.token}`);
    if (o.testSession) {
      req.header.set("Cairn-Test-Session", o.testSession.id);
      req.header.set("Cairn-Test-Now", String(o.testSession.now()));
    }
    return next(req);
  };
  return createConnectTransport({
    baseUrl: o.baseUrl,
    useBinaryFormat: !o.json,
    interceptors: [auth],
    ...(o.fetch ? { fetch: o.fetch } : {}),
    ...(o.timeoutMs !== undefined ? { defaultTimeoutMs: o.timeoutMs } : {}),
  });
}

// Connect codes with which a write may have been applied: the request was
// sent, and no answer says what happened.
const uncertain = new Set([Code.Unknown, Code.Unavailable, Code.DeadlineExceeded, Code.Canceled, Code.Internal, Code.DataLoss]);

/**
 * Maps a failure to the package's errors: a contract failure to its
 * checkpoint error class, an unknown outcome (reported by the server, or a
 * write whose answer was lost) to CairnUnknownOutcomeError, anything else to
 * CairnRequestError.
 */
export function mapError(e: unknown, write: boolean, operation: string): Error {
  if (e instanceof SandboxCheckpointError || e instanceof CairnUnknownOutcomeError || e instanceof CairnRequestError) return e;
  const ce = ConnectError.from(e);
  const detail = ce.findDetails(ErrorDetailSchema)[0];
  if (detail?.unknownOutcome) {
    return new CairnUnknownOutcomeError(`${operation}: the outcome is unknown: ${detail.message || ce.rawMessage}`, { cause: ce });
  }
  if (detail && detail.code) {
    const mapped = checkpointErrorFromCode(detail.code, detail.message || ce.rawMessage, { cause: ce });
    if (mapped) return mapped;
  }
  if (write && uncertain.has(ce.code)) {
    return new CairnUnknownOutcomeError(`${operation}: the outcome is unknown (${Code[ce.code]}): ${ce.rawMessage}`, { cause: ce });
  }
  return new CairnRequestError(codeName(ce.code), `${operation}: ${ce.rawMessage}`, { cause: ce });
}

function codeName(c: Code): string {
  return (Code[c] ?? "unknown").replace(/[A-Z]/g, (m, i: number) => (i ? "_" : "") + m.toLowerCase());
}

async function call<T>(operation: string, write: boolean, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw mapError(e, write, operation);
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder();

// jsonBytes is the JSON text of v, undefined for undefined; a value JSON
// cannot hold (a cycle, a BigInt) is INVALID_ENTRY.
function jsonBytes(v: unknown, what: string): Uint8Array | undefined {
  let text: string | undefined;
  try {
    text = JSON.stringify(v);
  } catch (e) {
    throw new SandboxCheckpointInvalidEntryError(`${what} is not JSON: ${String(e)}`, { cause: e });
  }
  return text === undefined ? undefined : enc.encode(text);
}

function writerPb(w: WriterFields): MessageInitShape<typeof WriterSchema> {
  return { threadId: w.threadId, ownerToken: w.ownerToken, fence: BigInt(w.fence) };
}

function entryOut(e: PbCheckpoint["files"][number]): SandboxSnapshotEntry {
  return e.kind === "file" ? { path: e.path, kind: "file", blobKey: e.blobKey, size: e.size } : { path: e.path, kind: e.kind as "dir" };
}

function artifactOut(a: PbCheckpoint["artifacts"][number]): SandboxSnapshotArtifact {
  return { artifactId: a.artifactId, name: a.name, mimeType: a.mimeType, size: a.size, blobKey: a.blobKey, createdAt: a.createdAt };
}

/** The upstream shape of a checkpoint read from the wire. */
export function checkpointOut(c: PbCheckpoint): SandboxCheckpoint {
  const out: SandboxCheckpoint = {
    id: c.id,
    threadId: c.threadId,
    parentCheckpointId: isFieldSet(c, CheckpointSchema.field.parentCheckpointId) ? c.parentCheckpointId : null,
    createdAt: c.createdAt,
    reason: c.reason as SandboxCheckpoint["reason"],
    files: c.files.map(entryOut),
    conversation: isFieldSet(c, CheckpointSchema.field.conversation) ? (JSON.parse(dec.decode(c.conversation)) as AnyMessage[]) : (null as unknown as []),
    artifacts: c.artifacts.map(artifactOut),
  };
  if (isFieldSet(c, CheckpointSchema.field.label)) out.label = c.label;
  if (isFieldSet(c, CheckpointSchema.field.sourceRunId)) out.sourceRunId = c.sourceRunId;
  return out;
}

/** The wire form of a checkpoint that passed the client's checks. */
export function checkpointIn(c: SandboxCheckpoint, parent: string | null): MessageInitShape<typeof CheckpointSchema> {
  const conversation = jsonBytes(c.conversation, "Checkpoint conversation");
  return {
    id: c.id,
    threadId: c.threadId,
    ...(parent !== null ? { parentCheckpointId: parent } : {}),
    createdAt: c.createdAt,
    reason: String(c.reason),
    ...(typeof c.label === "string" ? { label: c.label } : {}),
    ...(typeof c.sourceRunId === "string" ? { sourceRunId: c.sourceRunId } : {}),
    files: c.files.map((e) => (e.kind === "file" ? { path: e.path, kind: e.kind, blobKey: e.blobKey, size: e.size } : { path: e.path, kind: e.kind })),
    ...(conversation ? { conversation } : {}),
    artifacts: c.artifacts.map((a) => ({ ...a })),
  };
}

class Lease implements SandboxCheckpointWriterLease {
  readonly threadId: string;
  readonly ownerToken: string;
  readonly fence: number;
  readonly renewAfterMs: number;
  #expiresAt: number;
  #svc: Svc;
  constructor(svc: Svc, w: PbWriter, expiresAt: number, renewAfterMs: number) {
    this.#svc = svc;
    this.threadId = w.threadId;
    this.ownerToken = w.ownerToken;
    this.fence = Number(w.fence);
    this.#expiresAt = expiresAt;
    this.renewAfterMs = renewAfterMs;
  }
  get expiresAt(): number {
    return this.#expiresAt;
  }
  /** Rejects with SandboxCheckpointWriterLostError when the lease expired, was released or taken over. */
  async renew(): Promise<{ expiresAt: number }> {
    const res = await call("renew", true, () => this.#svc.renewWriter({ writer: this.#writer() }));
    this.#expiresAt = res.expiresAt;
    return { expiresAt: res.expiresAt };
  }
  /**
   * Ends the lease unless a newer one replaced it. It never rejects: when
   * cairnd cannot be reached the lease simply runs until it expires.
   */
  async release(): Promise<void> {
    try {
      await this.#svc.releaseWriter({ writer: this.#writer() });
    } catch {
      // The contract's release never throws; an unreleased lease expires.
    }
  }
  #writer(): MessageInitShape<typeof WriterSchema> {
    return { threadId: this.threadId, ownerToken: this.ownerToken, fence: BigInt(this.fence) };
  }
  toJSON() {
    return { threadId: this.threadId, ownerToken: this.ownerToken, fence: this.fence, expiresAt: this.#expiresAt, renewAfterMs: this.renewAfterMs };
  }
}

/**
 * A SandboxCheckpointStore (with forkFromCheckpoint, deleteCheckpoints, the
 * thread lister and the blob claims) served by cairnd for the token's tenant.
 * Pass it wherever TanStack AI takes a checkpoint store.
 *
 * Every method rejects with the contract's error classes, in the contract's
 * check order (input checks run locally first, the rest on the server); with
 * CairnUnknownOutcomeError when a write may or may not have been applied
 * (read before retrying); and with CairnRequestError for a failure outside
 * the contract (authentication, size limit, service unavailable), which
 * changed nothing.
 */
export function createCheckpointStore<M = AnyMessage>(options: CairnClientOptions): CairnCheckpointStore<M> {
  return checkpointStoreOn(createClient(CheckpointService, transportOf(options)));
}

function checkpointStoreOn(svc: Svc): CairnCheckpointStore {
  return {
    async get(id) {
      assertValidIdentifier(id, "id");
      const res = await call("get", false, () => svc.getCheckpoint({ id }));
      return res.checkpoint ? checkpointOut(res.checkpoint) : null;
    },
    async list(threadId) {
      assertValidIdentifier(threadId, "threadId");
      return call("list", false, async () => {
        const out: SandboxCheckpoint[] = [];
        for await (const res of svc.listCheckpoints({ threadId })) if (res.checkpoint) out.push(checkpointOut(res.checkpoint));
        return out;
      });
    },
    async getHead(threadId) {
      assertValidIdentifier(threadId, "threadId");
      const res = await call("getHead", false, () => svc.getHead({ threadId }));
      return isFieldSet(res, GetHeadResponseSchema.field.headId) ? res.headId : null;
    },
    async append(input) {
      const { checkpoint: c, expectedHeadId, parent, writer } = checkAppendInput(input);
      const req = create(AppendRequestSchema, {
        checkpoint: checkpointIn(c, parent),
        ...(expectedHeadId !== null ? { expectedHeadId } : {}),
        writer: writerPb(writer),
      });
      const res = await call("append", true, () => svc.append(req));
      return { headId: res.headId };
    },
    async deleteHead(input) {
      const { threadId, checkpointId, writer } = checkDeleteHeadInput(input);
      await call("deleteHead", true, () => svc.deleteHead({ threadId, checkpointId, writer: writerPb(writer) }));
    },
    async acquireWriter(threadId) {
      assertValidIdentifier(threadId, "threadId");
      const res = await call("acquireWriter", true, () => svc.acquireWriter({ threadId }));
      const l = res.lease;
      if (!l?.writer) throw new CairnRequestError("internal", "acquireWriter: the answer has no lease");
      return new Lease(svc, l.writer, l.expiresAt, l.renewAfterMs);
    },
    async listBlobReferences() {
      return call("listBlobReferences", false, async () => {
        const out: SandboxBlobReference[] = [];
        for await (const page of svc.listBlobReferences({})) for (const r of page.references) out.push({ key: r.key, references: Number(r.references) });
        return out;
      });
    },
    async deleteCheckpoints(input) {
      const { threadId, keep, writer } = checkDeleteCheckpointsInput(input);
      const res = await call("deleteCheckpoints", true, () => svc.deleteCheckpoints({ threadId, keep, writer: writerPb(writer) }));
      return { deleted: [...res.removedIds] };
    },
    async forkFromCheckpoint(input) {
      // The source checks and the writer checks run on the server, in the
      // contract's order; a token that can match no lease is sent as it is
      // and fails there as WRITER_LOST.
      const { writer, ...fields } = checkForkInput(input);
      const res = await call("forkFromCheckpoint", true, () => svc.forkFromCheckpoint({ ...fields, writer: writerPb(writer) }));
      if (!res.checkpoint) throw new CairnRequestError("internal", "forkFromCheckpoint: the answer has no checkpoint");
      return { checkpoint: checkpointOut(res.checkpoint) };
    },
    async listThreads(after = "", limit = 0) {
      const res = await call("listThreads", false, () => svc.listThreads({ after, limit }));
      return [...res.threadIds];
    },
    async claimBlobs(writer, keys, signal) {
      const w = readWriter(writer);
      for (const k of keys) if (!isBlobKey(k)) throw new SandboxCheckpointInvalidEntryError(`${JSON.stringify(k)} is not a blob key`);
      assertPlausible(w);
      const res = await call("claimBlobs", true, () => svc.claimBlobs({ writer: writerPb(w), keys: [...keys] }, signal ? { signal } : {}));
      return [...res.busy];
    },
    async waitBlobs(keys, signal) {
      for (const k of keys) if (!isBlobKey(k)) throw new SandboxCheckpointInvalidEntryError(`${JSON.stringify(k)} is not a blob key`);
      await call("waitBlobs", false, () => svc.waitBlobs({ keys: [...keys] }, signal ? { signal } : {}));
    },
  };
}

/**
 * The thread transcript store (loadThread/saveThread) in the same
 * transactional domain as the checkpoints, which forkFromCheckpoint writes.
 */
export function createTranscriptStore<M = AnyMessage>(options: CairnClientOptions): SandboxTranscriptStore<M> {
  return transcriptStoreOn(createClient(CheckpointService, transportOf(options)));
}

function transcriptStoreOn(svc: Svc): SandboxTranscriptStore {
  return {
    async loadThread(threadId) {
      assertValidIdentifier(threadId, "threadId");
      const res = await call("loadThread", false, () => svc.loadThread({ threadId }));
      const v = JSON.parse(dec.decode(res.messages)) as unknown;
      return (v ?? []) as AnyMessage[];
    },
    async saveThread(threadId, messages) {
      assertValidIdentifier(threadId, "threadId");
      const bytes = jsonBytes(messages, "Thread messages");
      if (!bytes) throw new SandboxCheckpointInvalidEntryError("messages must be JSON");
      await call("saveThread", true, () => svc.saveThread({ threadId, messages: bytes }));
    },
  };
}

/** TanStack AI's SandboxInstanceStore, served by cairnd for the token's tenant. */
export function createInstanceStore(options: CairnClientOptions): SandboxInstanceStore {
  return instanceStoreOn(createClient(InstanceService, transportOf(options)));
}

function instanceOut(r: PbInstanceRecord): SandboxInstanceRecord {
  const out: SandboxInstanceRecord = { key: r.key, provider: r.provider, providerSandboxId: r.providerSandboxId, threadId: r.threadId, updatedAt: r.updatedAt };
  if (isFieldSet(r, InstanceRecordSchema.field.latestSnapshotId)) out.latestSnapshotId = r.latestSnapshotId;
  if (isFieldSet(r, InstanceRecordSchema.field.latestRunId)) out.latestRunId = r.latestRunId;
  return out;
}

function instanceStoreOn(svc: Client<typeof InstanceService>): SandboxInstanceStore {
  return {
    async get(key) {
      assertInstanceKey(key);
      const res = await call("instances.get", false, () => svc.getInstance({ key }));
      return res.record ? instanceOut(res.record) : null;
    },
    async upsert(record) {
      const r = record as unknown as Record<string, unknown>;
      const str = (k: string) => (typeof r[k] === "string" ? (r[k] as string) : String(r[k] ?? ""));
      const init: MessageInitShape<typeof InstanceRecordSchema> = {
        key: str("key"),
        provider: str("provider"),
        providerSandboxId: str("providerSandboxId"),
        threadId: str("threadId"),
        updatedAt: Number(r["updatedAt"]),
        ...(typeof r["latestSnapshotId"] === "string" ? { latestSnapshotId: r["latestSnapshotId"] } : {}),
        ...(typeof r["latestRunId"] === "string" ? { latestRunId: r["latestRunId"] } : {}),
      };
      assertInstanceRecord(init);
      await call("instances.upsert", true, () => svc.upsertInstance({ record: init }));
    },
    async delete(key) {
      assertInstanceKey(key);
      await call("instances.delete", true, () => svc.deleteInstance({ key }));
    },
  };
}

/** The three stores of one tenant over one transport. */
export interface CairnStores<M = AnyMessage> {
  checkpoints: CairnCheckpointStore<M>;
  transcripts: SandboxTranscriptStore<M>;
  instances: SandboxInstanceStore;
}

/** All three stores over one transport. */
export function createCairnStores<M = AnyMessage>(options: CairnClientOptions): CairnStores<M> {
  const t = transportOf(options);
  const svc = createClient(CheckpointService, t);
  return { checkpoints: checkpointStoreOn(svc), transcripts: transcriptStoreOn(svc), instances: instanceStoreOn(createClient(InstanceService, t)) };
}

/** A test session: an empty store whose clock and lease timings the client sets. */
export interface TestSession<M = AnyMessage> extends CairnStores<M> {
  id: string;
  /** Ends the session's leases and deletes its data. */
  close(): Promise<void>;
}

/**
 * Opens a test session on a cairnd started with --test-clock, with
 * upstream's store options: every request sends `now()` (default Date.now)
 * as the session's clock, so a test moves time by changing what now returns.
 * A server without --test-clock refuses with CairnRequestError
 * ("failed_precondition"). Lease options are checked as upstream's
 * constructor checks them, with plain Errors.
 */
export async function openTestSession<M = AnyMessage>(options: CairnClientOptions & SandboxCheckpointStoreOptions): Promise<TestSession<M>> {
  const leaseDurationMs = options.leaseDurationMs ?? 120_000;
  const renewAfterMs = options.renewAfterMs ?? 45_000;
  if (!Number.isFinite(leaseDurationMs) || leaseDurationMs <= 0) throw new Error("leaseDurationMs must be finite and positive");
  if (!Number.isFinite(renewAfterMs) || renewAfterMs <= 0 || renewAfterMs >= leaseDurationMs) {
    throw new Error("renewAfterMs must be finite, positive, and less than leaseDurationMs");
  }
  const now = options.now ?? (() => Date.now());
  const plain: CairnClientOptions = { ...options };
  delete plain.testSession;
  const clockSvc = createClient(TestClockService, transportOf(plain));
  const res = await call("openTestSession", true, () => clockSvc.openTestSession({ now: now(), leaseDurationMs, renewAfterMs }));
  const id = res.sessionId;
  const stores = createCairnStores<M>({ ...plain, testSession: { id, now } });
  return {
    id,
    ...stores,
    async close() {
      await call("closeTestSession", true, () => clockSvc.closeTestSession({ sessionId: id }));
    },
  };
}

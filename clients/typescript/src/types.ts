// The public shapes of the checkpoint contract (docs: /docs/design.md and the
// contract's Part B §1). They are written so that an object of these types is
// assignable to TanStack AI's `SandboxCheckpointStore`,
// `ForkCapableSandboxCheckpointStore` and `SandboxInstanceStore`: the same
// method names, argument and result shapes.

/** A regular file of the workspace; its bytes live in the blob store under blobKey. */
export interface SandboxSnapshotFileEntry {
  path: string;
  kind: "file";
  /** `sandbox-files/sha256/<64 lowercase hex>` */
  blobKey: string;
  /** Byte length of the stored bytes; a safe integer >= 0. */
  size: number;
}

/** An empty directory of the workspace. It has no blobKey and no size. */
export interface SandboxSnapshotDirectoryEntry {
  path: string;
  kind: "dir";
}

export type SandboxSnapshotEntry = SandboxSnapshotFileEntry | SandboxSnapshotDirectoryEntry;

/** An immutable copy of a thread artifact owned by one checkpoint. */
export interface SandboxSnapshotArtifact {
  artifactId: string;
  name: string;
  mimeType: string;
  size: number;
  /** `sandbox-artifacts/sha256/<64 lowercase hex>` */
  blobKey: string;
  createdAt: number;
}

export type SandboxCheckpointReason = "automatic" | "named" | "fork-root";

/**
 * A message of the conversation. The store treats the conversation as opaque
 * JSON and returns it as given (after a JSON round trip: a Date becomes its
 * ISO string, undefined values vanish).
 */
export interface ModelMessageLike {
  role: string;
  content: unknown;
  [key: string]: unknown;
}

/**
 * The message type of the store types when none is given. It is `any` so
 * that a store stands, with no type argument, where TanStack AI expects its
 * own `ModelMessage` (in both directions: checkpoints passed in and read
 * back). Give your message type for stricter checks:
 * `createCheckpointStore<ModelMessage>(...)`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyMessage = any;

export interface SandboxCheckpoint<M = AnyMessage> {
  /** Unique across all threads. */
  id: string;
  threadId: string;
  /** The head at append time; null for a root. */
  parentCheckpointId: string | null;
  /** Milliseconds; any finite number. */
  createdAt: number;
  reason: SandboxCheckpointReason;
  label?: string;
  sourceRunId?: string;
  files: ReadonlyArray<SandboxSnapshotEntry>;
  conversation: ReadonlyArray<M>;
  artifacts: ReadonlyArray<SandboxSnapshotArtifact>;
}

/** The identity of a writer lease. A plain object with these fields is a valid writer. */
export interface SandboxCheckpointWriter {
  threadId: string;
  ownerToken: string;
  fence: number;
}

/** A writer lease returned by acquireWriter. */
export interface SandboxCheckpointWriterLease extends SandboxCheckpointWriter {
  /** When the lease expires, in ms by the store's clock; reflects every successful renew(). */
  readonly expiresAt: number;
  /** The store's renew interval: renew at least this often. */
  readonly renewAfterMs: number;
  /** Extends the lease; rejects with SandboxCheckpointWriterLostError once it expired or was replaced. */
  renew(): Promise<{ expiresAt: number }>;
  /** Ends the lease unless a newer one replaced it. Never rejects. */
  release(): Promise<void>;
}

export interface SandboxCheckpointAppendInput<M = AnyMessage> {
  checkpoint: SandboxCheckpoint<M>;
  /** The head the caller saw; null for an empty thread. */
  expectedHeadId: string | null;
  writer: SandboxCheckpointWriter;
}

export interface SandboxCheckpointDeleteHeadInput {
  threadId: string;
  checkpointId: string;
  writer: SandboxCheckpointWriter;
}

export interface SandboxCheckpointDeleteInput {
  threadId: string;
  /** How many checkpoints of the head chain stay (the head included); a safe integer >= 1. */
  keep: number;
  writer: SandboxCheckpointWriter;
}

export interface SandboxCheckpointForkInput {
  sourceThreadId: string;
  sourceCheckpointId: string;
  destinationThreadId: string;
  destinationCheckpointId: string;
  createdAt: number;
  /** The lease of the destination thread. */
  writer: SandboxCheckpointWriter;
}

export interface SandboxBlobReference {
  key: string;
  references: number;
}

/** TanStack AI's `SandboxCheckpointStore`. */
export interface SandboxCheckpointStore<M = AnyMessage> {
  get(id: string): Promise<SandboxCheckpoint<M> | null>;
  list(threadId: string): Promise<SandboxCheckpoint<M>[]>;
  getHead(threadId: string): Promise<string | null>;
  append(input: SandboxCheckpointAppendInput<M>): Promise<{ headId: string }>;
  deleteHead(input: SandboxCheckpointDeleteHeadInput): Promise<void>;
  acquireWriter(threadId: string): Promise<SandboxCheckpointWriterLease>;
  listBlobReferences(): Promise<SandboxBlobReference[]>;
  deleteCheckpoints?(input: SandboxCheckpointDeleteInput): Promise<{ deleted: string[] }>;
  forkFromCheckpoint?(input: SandboxCheckpointForkInput): Promise<{ checkpoint: SandboxCheckpoint<M> }>;
}

/** A store with the optional fork capability. */
export interface ForkCapableSandboxCheckpointStore<M = AnyMessage> extends SandboxCheckpointStore<M> {
  forkFromCheckpoint(input: SandboxCheckpointForkInput): Promise<{ checkpoint: SandboxCheckpoint<M> }>;
}

/** The thread transcript store that fork writes in the same transaction as the fork root. */
export interface SandboxTranscriptStore<M = AnyMessage> {
  /** The thread's messages; [] for an unknown thread. */
  loadThread(threadId: string): Promise<M[]>;
  /** Replaces the thread's whole transcript. */
  saveThread(threadId: string, messages: ReadonlyArray<M>): Promise<void>;
}

export interface SandboxInstanceRecord {
  key: string;
  provider: string;
  providerSandboxId: string;
  latestSnapshotId?: string;
  threadId: string;
  latestRunId?: string;
  /** Epoch milliseconds. */
  updatedAt: number;
}

/** TanStack AI's `SandboxInstanceStore`. */
export interface SandboxInstanceStore {
  /** The record, or null for a missing key. */
  get(key: string): Promise<SandboxInstanceRecord | null>;
  /** Replaces the whole record of record.key: omitted optional fields are absent afterwards. */
  upsert(record: SandboxInstanceRecord): Promise<void>;
  /** Removes the record; a missing key is a no-op. */
  delete(key: string): Promise<void>;
}

/** Options of the store factory; the same names as upstream's SandboxCheckpointStoreOptions. */
export interface SandboxCheckpointStoreOptions {
  now?: () => number;
  leaseDurationMs?: number;
  renewAfterMs?: number;
}

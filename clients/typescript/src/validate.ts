// Checks the client runs before a request leaves, in the contract's order.
//
// cairnd runs every check again; the client runs the input checks too because
// some inputs cannot cross the wire unchanged: a lone UTF-16 surrogate becomes
// U+FFFD when a string is encoded as UTF-8, a non-string id has no protobuf
// form, `expectedHeadId: undefined` and `null` look alike, and a directory
// entry whose `blobKey` key holds undefined loses the key in JSON. Each check
// here fails exactly where the contract says the store fails, so the order of
// the codes a caller sees is the contract's.

import {
  SandboxCheckpointError,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointInvalidIdError,
  SandboxCheckpointWriterLostError,
} from "./errors.js";
import type { SandboxCheckpoint } from "./types.js";

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Reports whether s is a string without an unpaired UTF-16 surrogate. */
export function isWellFormed(s: string): boolean {
  const native = (s as { isWellFormed?: () => boolean }).isWellFormed;
  return native ? native.call(s) : !loneSurrogate.test(s);
}

// The bounds of cairn's contract, a deliberate difference from upstream
// (which has none), in bytes of UTF-8: the same as the Go package's
// (cairn.MaxIDBytes and its siblings; docs/limits.md says why each is what
// it is). The client checks them where the contract checks the field, so
// that a value past its bound gets the same code from it as from cairnd.

/** The longest identifier: thread, checkpoint, parent and fork ids, instance keys. */
export const MAX_ID_BYTES = 1024;
/** The longest writer ownerToken; a longer one can match no lease (WRITER_LOST). */
export const MAX_OWNER_TOKEN_BYTES = 1024;
/** The longest reason, label, sourceRunId, artifact id, name and mime type, and instance field. */
export const MAX_NAME_BYTES = 1024;
/** The longest entry path. */
export const MAX_PATH_BYTES = 4096;

/** Returns the length of s in UTF-8, where a lone surrogate counts 3 bytes. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** Reports whether s, a string, is longer than max bytes of UTF-8. */
function tooLong(s: string, max: number): boolean {
  return s.length > max || (s.length * 3 > max && utf8Length(s) > max);
}

function tooLongMessage(what: string, s: string, max: number): string {
  return `${what} is ${utf8Length(s)} bytes long, more than the ${max} bytes this store accepts`;
}

/** Throws SandboxCheckpointInvalidIdError unless value is a non-empty, well-formed string of at most MAX_ID_BYTES. */
export function assertValidIdentifier(value: unknown, what: string): asserts value is string {
  if (typeof value !== "string" || value.length === 0 || !isWellFormed(value)) {
    throw new SandboxCheckpointInvalidIdError(`${what} must be a non-empty well-formed string`);
  }
  if (tooLong(value, MAX_ID_BYTES)) throw new SandboxCheckpointInvalidIdError(tooLongMessage(what, value, MAX_ID_BYTES));
}

/** Throws SandboxCheckpointInvalidIdError when an instance key is a string longer than MAX_ID_BYTES. */
export function assertInstanceKey(key: unknown): void {
  if (typeof key === "string" && tooLong(key, MAX_ID_BYTES)) throw new SandboxCheckpointInvalidIdError(tooLongMessage("instance key", key, MAX_ID_BYTES));
}

/**
 * Checks an instance record's bounds in order: its key (INVALID_ID), then
 * provider, providerSandboxId, latestSnapshotId, threadId and latestRunId,
 * each at most MAX_NAME_BYTES (INVALID_ENTRY). Nothing else is validated.
 */
export function assertInstanceRecord(record: unknown): void {
  const r = (record ?? {}) as Record<string, unknown>;
  assertInstanceKey(r["key"]);
  for (const f of ["provider", "providerSandboxId", "latestSnapshotId", "threadId", "latestRunId"]) {
    const v = r[f];
    if (typeof v === "string" && tooLong(v, MAX_NAME_BYTES)) throw new SandboxCheckpointInvalidEntryError(tooLongMessage(`instance ${f}`, v, MAX_NAME_BYTES));
  }
}

function isFiniteNumber(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

function isSize(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

const fileKey = /^sandbox-files\/sha256\/[0-9a-f]{64}$/;
const artifactKey = /^sandbox-artifacts\/sha256\/[0-9a-f]{64}$/;

/** Reports whether key is a file or artifact blob key. */
export function isBlobKey(key: unknown): key is string {
  return typeof key === "string" && (fileKey.test(key) || artifactKey.test(key));
}

// Paths, labels, reasons, run ids and artifact names must be well-formed
// Unicode here, where the contract accepts a lone surrogate in them: the
// wire carries text as UTF-8, which has no form for a lone surrogate (it
// would arrive as U+FFFD, and the checkpoint would not read back as it was
// appended). The client refuses it with INVALID_ENTRY instead.
function isNormalizedPath(p: unknown): p is string {
  if (typeof p !== "string" || p.length === 0 || !isWellFormed(p)) return false;
  if (p.includes("\0") || p.startsWith("/") || p.includes("\\")) return false;
  if (/^[A-Za-z]:(\/|$)/.test(p)) return false;
  // No segment is "", "." or "..": one pass over the segment boundaries.
  for (let start = 0; start <= p.length; ) {
    let end = p.indexOf("/", start);
    if (end < 0) end = p.length;
    const n = end - start;
    if (n === 0 || (n <= 2 && p.charCodeAt(start) === 0x2e && (n === 1 || p.charCodeAt(start + 1) === 0x2e))) return false;
    start = end + 1;
  }
  return true;
}

function hasOwn(o: object, k: string): boolean {
  return Object.prototype.hasOwnProperty.call(o, k);
}

/** Throws SandboxCheckpointInvalidEntryError unless keep is a safe integer >= 1. */
export function assertKeep(keep: unknown): asserts keep is number {
  if (typeof keep !== "number" || !Number.isSafeInteger(keep) || keep < 1) throw new SandboxCheckpointInvalidEntryError("keep must be a safe integer of 1 or more");
}

/** Throws SandboxCheckpointInvalidEntryError unless createdAt is a finite number. */
export function assertCreatedAt(createdAt: unknown, what: string): asserts createdAt is number {
  if (!isFiniteNumber(createdAt)) throw new SandboxCheckpointInvalidEntryError(`${what} createdAt must be a finite number`);
}

/** Validates a checkpoint's files in array order (contract §2.3). */
export function validateEntries(files: unknown): void {
  if (!Array.isArray(files)) throw new SandboxCheckpointInvalidEntryError("Checkpoint files must be an array");
  const kinds = new Map<string, string>();
  // Every proper ancestor (cut at a "/") of the paths seen so far, so that
  // "a file above an earlier entry" is one lookup rather than a scan.
  const ancestors = new Set<string>();
  for (const entry of files as unknown[]) {
    if (entry === null || typeof entry !== "object") throw new SandboxCheckpointInvalidEntryError("Checkpoint entry must be an object");
    const e = entry as Record<string, unknown>;
    const path = e["path"];
    if (typeof path === "string" && tooLong(path, MAX_PATH_BYTES)) throw new SandboxCheckpointInvalidEntryError(tooLongMessage("Checkpoint entry path", path, MAX_PATH_BYTES));
    if (!isNormalizedPath(path)) throw new SandboxCheckpointInvalidEntryError("Checkpoint entry path must be a normalized workspace-relative path");
    if (kinds.has(path)) throw new SandboxCheckpointInvalidEntryError(`Checkpoint entry path ${JSON.stringify(path)} is duplicated`);
    for (let i = path.indexOf("/"); i >= 0; i = path.indexOf("/", i + 1)) {
      if (kinds.get(path.slice(0, i)) === "file") throw new SandboxCheckpointInvalidEntryError(`Checkpoint entry ${JSON.stringify(path)} is beneath a file`);
    }
    if (e["kind"] === "file" && ancestors.has(path)) {
      throw new SandboxCheckpointInvalidEntryError(`Checkpoint file ${JSON.stringify(path)} has entries beneath it`);
    }
    for (let i = path.indexOf("/"); i >= 0; i = path.indexOf("/", i + 1)) ancestors.add(path.slice(0, i));
    kinds.set(path, "pending");
    if (e["kind"] === "file") {
      const key = e["blobKey"];
      // The pattern admits only ASCII, so a key that matches is well-formed.
      if (typeof key !== "string" || !fileKey.test(key)) throw new SandboxCheckpointInvalidEntryError("Checkpoint file blobKey is invalid");
      if (!hasOwn(e, "size") || !isSize(e["size"])) throw new SandboxCheckpointInvalidEntryError("Checkpoint file size must be a safe integer >= 0");
    } else if (e["kind"] === "dir") {
      if (hasOwn(e, "blobKey") || hasOwn(e, "size")) throw new SandboxCheckpointInvalidEntryError("Directory entries cannot contain file fields");
    } else {
      throw new SandboxCheckpointInvalidEntryError("Checkpoint entry kind must be file or dir");
    }
    kinds.set(path, e["kind"]);
  }
}

/** Validates a checkpoint's artifacts (contract §2.4). */
export function validateArtifacts(artifacts: unknown): void {
  if (!Array.isArray(artifacts)) throw new SandboxCheckpointInvalidEntryError("Checkpoint artifacts must be an array");
  for (const a of artifacts as unknown[]) {
    if (a === null || typeof a !== "object") throw new SandboxCheckpointInvalidEntryError("Checkpoint artifact must be an object");
    const r = a as Record<string, unknown>;
    for (const f of ["artifactId", "name", "mimeType"]) {
      const v = r[f];
      if (typeof v === "string" && tooLong(v, MAX_NAME_BYTES)) throw new SandboxCheckpointInvalidEntryError(tooLongMessage(`Checkpoint artifact ${f}`, v, MAX_NAME_BYTES));
    }
    const ok =
      typeof r["artifactId"] === "string" &&
      r["artifactId"].length > 0 &&
      isWellFormed(r["artifactId"]) &&
      typeof r["name"] === "string" &&
      r["name"].length > 0 &&
      isWellFormed(r["name"]) &&
      typeof r["mimeType"] === "string" &&
      r["mimeType"].length > 0 &&
      isWellFormed(r["mimeType"]) &&
      typeof r["blobKey"] === "string" &&
      artifactKey.test(r["blobKey"]) &&
      isSize(r["size"]) &&
      isFiniteNumber(r["createdAt"]);
    if (!ok) throw new SandboxCheckpointInvalidEntryError("Checkpoint artifact has invalid fields");
  }
}

/**
 * Throws INVALID_ENTRY when the reason, label or sourceRunId is a string that
 * is not well-formed Unicode (see isNormalizedPath for why) or is longer than
 * MAX_NAME_BYTES.
 */
export function validateText(c: { reason?: unknown; label?: unknown; sourceRunId?: unknown }): void {
  for (const [what, v] of [["reason", c.reason], ["label", c.label], ["sourceRunId", c.sourceRunId]] as const) {
    if (typeof v === "string" && !isWellFormed(v)) throw new SandboxCheckpointInvalidEntryError(`Checkpoint ${what} must be well-formed Unicode`);
    if (typeof v === "string" && tooLong(v, MAX_NAME_BYTES)) throw new SandboxCheckpointInvalidEntryError(tooLongMessage(`Checkpoint ${what}`, v, MAX_NAME_BYTES));
  }
}

/** The writer fields as read once from the caller's object. */
export interface WriterFields {
  threadId: string;
  ownerToken: string;
  fence: number;
  /**
   * False when the token is not a well-formed string of at most
   * MAX_OWNER_TOKEN_BYTES or the fence not a safe integer: such a writer can match no lease, so the write fails with
   * WRITER_LOST where the contract checks lease currency.
   */
  plausible: boolean;
}

/** Reads a writer argument once; its thread id must be a valid identifier (INVALID_ID). */
export function readWriter(writer: unknown): WriterFields {
  const w = (writer ?? {}) as Record<string, unknown>;
  const threadId = w["threadId"];
  assertValidIdentifier(threadId, "writer.threadId");
  const ownerToken = w["ownerToken"];
  const fence = w["fence"];
  if (
    typeof ownerToken !== "string" ||
    !isWellFormed(ownerToken) ||
    tooLong(ownerToken, MAX_OWNER_TOKEN_BYTES) ||
    typeof fence !== "number" ||
    !Number.isSafeInteger(fence)
  ) {
    return { threadId, ownerToken: "", fence: -1, plausible: false };
  }
  return { threadId, ownerToken, fence, plausible: true };
}

/** Throws WRITER_LOST for a writer that can match no lease. */
export function assertPlausible(writer: WriterFields): void {
  if (!writer.plausible) throw new SandboxCheckpointWriterLostError("writer has no valid ownerToken and fence");
}

/** Throws WRITER_LOST when the writer belongs to another thread. */
export function assertWriterThread(writer: WriterFields, threadId: string, what: string): void {
  if (writer.threadId !== threadId) throw new SandboxCheckpointWriterLostError(`writer thread does not match ${what} thread`);
}

/** An append's input after the checks that need no store state. */
export interface AppendFields {
  checkpoint: SandboxCheckpoint;
  expectedHeadId: string | null;
  /** parentCheckpointId with absent read as null (R1). */
  parent: string | null;
  writer: WriterFields;
}

/**
 * Runs append's checks that need no store state, in the contract's order
 * (§3.2 steps 1–10): the ids (INVALID_ID), the writer's thread
 * (WRITER_LOST), createdAt, files, artifacts and text (INVALID_ENTRY), then a
 * writer that can match no lease (WRITER_LOST, where lease currency is checked).
 */
export function checkAppendInput(input: unknown): AppendFields {
  const { checkpoint, expectedHeadId, writer } = (input ?? {}) as { checkpoint?: unknown; expectedHeadId?: unknown; writer?: unknown };
  const c = (checkpoint ?? {}) as SandboxCheckpoint;
  assertValidIdentifier(c.threadId, "checkpoint.threadId");
  const w = readWriter(writer);
  assertValidIdentifier(c.id, "checkpoint.id");
  if (expectedHeadId !== null) assertValidIdentifier(expectedHeadId, "expectedHeadId");
  const parent = c.parentCheckpointId ?? null;
  if (parent !== null) assertValidIdentifier(parent, "checkpoint.parentCheckpointId");
  assertWriterThread(w, c.threadId, "checkpoint");
  assertCreatedAt(c.createdAt, "Checkpoint");
  validateEntries(c.files);
  validateArtifacts(c.artifacts);
  validateText(c);
  assertPlausible(w);
  return { checkpoint: c, expectedHeadId, parent, writer: w };
}

/** Runs deleteHead's checks that need no store state (§3.3 steps 1–4). */
export function checkDeleteHeadInput(input: unknown): { threadId: string; checkpointId: string; writer: WriterFields } {
  const { threadId, checkpointId, writer } = (input ?? {}) as Record<string, unknown>;
  assertValidIdentifier(threadId, "threadId");
  assertValidIdentifier(checkpointId, "checkpointId");
  const w = readWriter(writer);
  assertWriterThread(w, threadId, "deleteHead");
  assertPlausible(w);
  return { threadId, checkpointId, writer: w };
}

/** Runs deleteCheckpoints' checks that need no store state: ids, the writer's thread, keep. */
export function checkDeleteCheckpointsInput(input: unknown): { threadId: string; keep: number; writer: WriterFields } {
  const { threadId, keep, writer } = (input ?? {}) as Record<string, unknown>;
  assertValidIdentifier(threadId, "threadId");
  const w = readWriter(writer);
  assertWriterThread(w, threadId, "deleteCheckpoints");
  assertKeep(keep);
  assertPlausible(w);
  return { threadId, keep, writer: w };
}

/** A fork's input after the checks that need no store state. */
export interface ForkFields {
  sourceThreadId: string;
  sourceCheckpointId: string;
  destinationThreadId: string;
  destinationCheckpointId: string;
  createdAt: number;
  writer: WriterFields;
}

/**
 * Runs the fork's checks that need no store state (§4.1 steps 0–3): each
 * field read once, the four ids and the writer's thread (INVALID_ID),
 * createdAt (INVALID_ENTRY), equal threads (FORK_SOURCE_THREAD_MISMATCH).
 * The writer's currency comes after the source checks, so a writer that can
 * match no lease is left for the store to refuse.
 */
export function checkForkInput(input: unknown): ForkFields {
  const i = (input ?? {}) as Record<string, unknown>;
  const sourceThreadId = i["sourceThreadId"];
  const sourceCheckpointId = i["sourceCheckpointId"];
  const destinationThreadId = i["destinationThreadId"];
  const destinationCheckpointId = i["destinationCheckpointId"];
  const createdAt = i["createdAt"];
  const writer = i["writer"];
  assertValidIdentifier(sourceThreadId, "sourceThreadId");
  assertValidIdentifier(sourceCheckpointId, "sourceCheckpointId");
  assertValidIdentifier(destinationThreadId, "destinationThreadId");
  assertValidIdentifier(destinationCheckpointId, "destinationCheckpointId");
  const w = readWriter(writer);
  assertCreatedAt(createdAt, "Fork checkpoint");
  if (sourceThreadId === destinationThreadId) {
    throw new SandboxCheckpointError("SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH", "source and destination thread are the same");
  }
  return { sourceThreadId, sourceCheckpointId, destinationThreadId, destinationCheckpointId, createdAt, writer: w };
}

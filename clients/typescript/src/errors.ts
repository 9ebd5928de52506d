// Error classes whose `code` and `name` match TanStack AI's checkpoint errors,
// so callers that test `error.code` (or `instanceof` these classes) behave the
// same against cairnd as against the in-memory store.

/** Every code a checkpoint store can report. */
export type SandboxCheckpointErrorCode =
  | "SANDBOX_SNAPSHOT_STALE_HEAD"
  | "SANDBOX_SNAPSHOT_PARENT_MISMATCH"
  | "SANDBOX_SNAPSHOT_DUPLICATE_ID"
  | "SANDBOX_SNAPSHOT_NOT_HEAD"
  | "SANDBOX_SNAPSHOT_WRITER_CONFLICT"
  | "SANDBOX_SNAPSHOT_WRITER_LOST"
  | "SANDBOX_SNAPSHOT_INVALID_ID"
  | "SANDBOX_SNAPSHOT_INVALID_ENTRY"
  | "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND"
  | "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH"
  | "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY"
  | "SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND"
  | "SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED"
  | "SANDBOX_SNAPSHOT_STORE_FULL";

/** The base class of every checkpoint error; `code` says which rule failed. */
export class SandboxCheckpointError extends Error {
  readonly code: SandboxCheckpointErrorCode;
  constructor(code: SandboxCheckpointErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxCheckpointError";
    this.code = code;
  }
}

/** append: the head is not expectedHeadId. */
export class SandboxCheckpointConflictError extends SandboxCheckpointError {
  constructor(message = "Checkpoint head changed", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_STALE_HEAD", message, options);
    this.name = "SandboxCheckpointConflictError";
  }
}

/** append: parentCheckpointId is not expectedHeadId. */
export class SandboxCheckpointParentMismatchError extends SandboxCheckpointError {
  constructor(message = "Checkpoint parent does not match the expected head", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_PARENT_MISMATCH", message, options);
    this.name = "SandboxCheckpointParentMismatchError";
  }
}

/** append: the checkpoint id exists in some thread. */
export class SandboxCheckpointDuplicateIdError extends SandboxCheckpointError {
  constructor(message = "Checkpoint id already exists", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_DUPLICATE_ID", message, options);
    this.name = "SandboxCheckpointDuplicateIdError";
  }
}

/** deleteHead: the checkpoint is not the thread's head. */
export class SandboxCheckpointNotHeadError extends SandboxCheckpointError {
  constructor(message = "Checkpoint is not the thread head", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_NOT_HEAD", message, options);
    this.name = "SandboxCheckpointNotHeadError";
  }
}

/** acquireWriter: another unexpired lease holds the thread. */
export class SandboxCheckpointWriterConflictError extends SandboxCheckpointError {
  constructor(message = "Another writer holds the thread", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_WRITER_CONFLICT", message, options);
    this.name = "SandboxCheckpointWriterConflictError";
  }
}

/** A write's writer is not the thread's current lease (other thread, released, replaced or expired). */
export class SandboxCheckpointWriterLostError extends SandboxCheckpointError {
  constructor(message = "Checkpoint writer lease is not current", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_WRITER_LOST", message, options);
    this.name = "SandboxCheckpointWriterLostError";
  }
}

/** An identifier is not a non-empty well-formed string. */
export class SandboxCheckpointInvalidIdError extends SandboxCheckpointError {
  constructor(message = "Invalid checkpoint identifier", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_INVALID_ID", message, options);
    this.name = "SandboxCheckpointInvalidIdError";
  }
}

/** createdAt, a file entry, an artifact or keep is invalid. */
export class SandboxCheckpointInvalidEntryError extends SandboxCheckpointError {
  constructor(message = "Invalid checkpoint entry", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_INVALID_ENTRY", message, options);
    this.name = "SandboxCheckpointInvalidEntryError";
  }
}

/**
 * Any write: the store's etcd is out of space (its NOSPACE alarm is raised)
 * and refused the write. Nothing was written; retrying does not help until an
 * operator frees space (`sweeper --once`, then `cairn doctor --recover`).
 * Reads still work. cairnd sends it as resource_exhausted. This code is
 * cairn's own, not TanStack AI's.
 */
export class SandboxCheckpointStoreFullError extends SandboxCheckpointError {
  constructor(message = "Checkpoint store is out of space", options?: { cause?: unknown }) {
    super("SANDBOX_SNAPSHOT_STORE_FULL", message, options);
    this.name = "SandboxCheckpointStoreFullError";
  }
}

/**
 * The request reached the service, or may have, and its outcome is not known:
 * the write may have been applied or not. Read the state (getHead, get) before
 * retrying. It is never one of the checkpoint errors above, which each mean
 * "nothing changed".
 */
export class CairnUnknownOutcomeError extends Error {
  readonly code = "CAIRN_UNKNOWN_OUTCOME" as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CairnUnknownOutcomeError";
  }
}

/**
 * The service refused or failed the request for a reason outside the
 * checkpoint contract (authentication, permission, size limit, unavailable,
 * a bad test-clock session). Nothing was changed. `connectCode` is the
 * Connect code name (e.g. "unauthenticated").
 */
export class CairnRequestError extends Error {
  readonly code = "CAIRN_REQUEST_FAILED" as const;
  readonly connectCode: string;
  constructor(connectCode: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CairnRequestError";
    this.connectCode = connectCode;
  }
}

const byCode: Record<string, (message: string, options?: { cause?: unknown }) => SandboxCheckpointError> = {
  SANDBOX_SNAPSHOT_STALE_HEAD: (m, o) => new SandboxCheckpointConflictError(m, o),
  SANDBOX_SNAPSHOT_PARENT_MISMATCH: (m, o) => new SandboxCheckpointParentMismatchError(m, o),
  SANDBOX_SNAPSHOT_DUPLICATE_ID: (m, o) => new SandboxCheckpointDuplicateIdError(m, o),
  SANDBOX_SNAPSHOT_NOT_HEAD: (m, o) => new SandboxCheckpointNotHeadError(m, o),
  SANDBOX_SNAPSHOT_WRITER_CONFLICT: (m, o) => new SandboxCheckpointWriterConflictError(m, o),
  SANDBOX_SNAPSHOT_WRITER_LOST: (m, o) => new SandboxCheckpointWriterLostError(m, o),
  SANDBOX_SNAPSHOT_INVALID_ID: (m, o) => new SandboxCheckpointInvalidIdError(m, o),
  SANDBOX_SNAPSHOT_INVALID_ENTRY: (m, o) => new SandboxCheckpointInvalidEntryError(m, o),
  SANDBOX_SNAPSHOT_STORE_FULL: (m, o) => new SandboxCheckpointStoreFullError(m, o),
};

const baseCodes = new Set<string>([
  "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND",
  "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH",
  "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY",
  "SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND",
  "SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED",
]);

/**
 * The checkpoint error for an upstream code string, or undefined when the
 * code is not one of the contract's.
 */
export function checkpointErrorFromCode(
  code: string,
  message: string,
  options?: { cause?: unknown },
): SandboxCheckpointError | undefined {
  const make = byCode[code];
  if (make) return make(message, options);
  if (baseCodes.has(code)) return new SandboxCheckpointError(code as SandboxCheckpointErrorCode, message, options);
  return undefined;
}

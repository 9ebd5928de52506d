// @cairnstore/tanstack: TanStack AI's SandboxCheckpointStore,
// SandboxInstanceStore and the fork transcript store, served by cairnd.

export type * from "./types.js";
export * from "./errors.js";
export {
  createCairnStores,
  createCheckpointStore,
  createInstanceStore,
  createTranscriptStore,
  openTestSession,
  type CairnCheckpointStore,
  type CairnClientOptions,
  type CairnStores,
  type TestSession,
} from "./client.js";
export { claimAll, claimingBlobStore, type BlobClaimer, type BlobStoreLike, type ClaimingBlobStoreOptions } from "./blobs.js";
export { isBlobKey, isWellFormed, MAX_ID_BYTES, MAX_NAME_BYTES, MAX_OWNER_TOKEN_BYTES, MAX_PATH_BYTES, utf8Length } from "./validate.js";

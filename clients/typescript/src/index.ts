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
export { isBlobKey, isWellFormed } from "./validate.js";

// A blob-store wrapper that makes TanStack AI's capture safe beside a running
// sweeper (docs/design.md, "Online sweep and capacity: one design").
//
// Capture uploads put-if-absent: `if (!(await blobs.head(key))) await
// blobs.put(key, bytes)`. Without claims, a sweep that found the key
// unreferenced can delete its bytes between that head and the append that
// references the key, and the new checkpoint then names bytes that are gone.
// The wrapper claims each key under the writer lease before it asks the
// bucket: the claim and the sweeper's delete are compare-and-swaps on the
// same etcd state, so one of them loses. A key the sweeper is already
// deleting is reported busy; the wrapper waits until the delete settled,
// claims again and reports the key absent, so capture uploads it anew.

import type { SandboxCheckpointWriter } from "./types.js";
import { SandboxCheckpointInvalidEntryError } from "./errors.js";
import { isBlobKey } from "./validate.js";

/** Any blob store with upstream's get/head/put shape, e.g. an R2 bucket binding. */
export interface BlobStoreLike {
  get(key: string, ...rest: never[]): Promise<unknown>;
  head(key: string, ...rest: never[]): Promise<unknown>;
  put(key: string, value: never, ...rest: never[]): Promise<unknown>;
}

/** The claim RPCs of a cairn store (ClaimBlobs, WaitBlobs). */
export interface BlobClaimer {
  /**
   * Claims keys for the writer lease; returns the keys a sweep is deleting
   * (busy), which the caller must not rely on. Rejects with
   * SandboxCheckpointWriterLostError when writer is not current, and with
   * SandboxCheckpointInvalidEntryError for a key that is not a blob key.
   */
  claimBlobs(writer: SandboxCheckpointWriter, keys: readonly string[], signal?: AbortSignal): Promise<string[]>;
  /** Resolves once no key is being deleted by a sweep. Claims nothing. */
  waitBlobs(keys: readonly string[], signal?: AbortSignal): Promise<void>;
}

export interface ClaimingBlobStoreOptions {
  /** The store whose claim RPCs protect the keys (createCheckpointStore's result). */
  claimer: BlobClaimer;
  /**
   * The writer lease the capture runs under, or a function that returns it
   * when the capture calls head/put (for a lease the middleware acquires
   * later). Claims last while this lease is current.
   */
  writer: SandboxCheckpointWriter | (() => SandboxCheckpointWriter);
  /** Aborts a claim or wait in flight. */
  signal?: AbortSignal;
}

/**
 * Wraps blobs so that head and put claim their key under the writer lease
 * first. get is passed through. A blob key outside `sandbox-files/` and
 * `sandbox-artifacts/` (e.g. a source artifact read by capture) is passed
 * through unclaimed, since no sweep deletes it.
 *
 * head(key) resolves to the inner head's value when the key was claimed, and
 * to null when a sweep was deleting the key (the wrapper waited for it to
 * settle and claimed the key again, so the put that follows is protected).
 * Both head and put reject with SandboxCheckpointWriterLostError when the
 * lease is no longer current: the capture must stop, since nothing protects
 * its keys any more.
 *
 * Claims end with the lease's next successful append (the checkpoint's
 * references protect its keys from then on), its release, a takeover or
 * its expiry.
 */
export function claimingBlobStore<B extends BlobStoreLike>(blobs: B, options: ClaimingBlobStoreOptions): B {
  const { claimer, signal } = options;
  const writer = (): SandboxCheckpointWriter => (typeof options.writer === "function" ? options.writer() : options.writer);

  // claim claims key and reports whether its bytes may be relied on.
  async function claim(key: string): Promise<boolean> {
    let busy = await claimer.claimBlobs(writer(), [key], signal);
    if (busy.length === 0) return true;
    for (;;) {
      await claimer.waitBlobs(busy, signal);
      busy = await claimer.claimBlobs(writer(), [key], signal);
      if (busy.length === 0) return false;
    }
  }

  const wrapped = {
    get: (key: string, ...rest: never[]) => blobs.get(key, ...rest),
    async head(key: string, ...rest: never[]) {
      if (!isSweptKey(key)) return blobs.head(key, ...rest);
      if (!(await claim(key))) return null;
      return blobs.head(key, ...rest);
    },
    async put(key: string, value: never, ...rest: never[]) {
      if (isSweptKey(key)) await claim(key);
      return blobs.put(key, value, ...rest);
    },
  };
  return new Proxy(blobs, {
    get(target, prop, receiver) {
      if (prop === "get" || prop === "head" || prop === "put") return wrapped[prop];
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

function isSweptKey(key: string): boolean {
  if (key.startsWith("sandbox-files/") || key.startsWith("sandbox-artifacts/")) {
    if (!isBlobKey(key)) throw new SandboxCheckpointInvalidEntryError(`blob key ${JSON.stringify(key)} is not a sha256 blob key`);
    return true;
  }
  return false;
}

/**
 * Claims many keys at once (batched by the service), waiting out keys a sweep
 * is deleting, and returns the keys whose bytes must be uploaded anew because
 * a sweep was deleting them. Use it before a capture that knows its keys, to
 * save one round trip per key.
 */
export async function claimAll(
  claimer: BlobClaimer,
  writer: SandboxCheckpointWriter,
  keys: readonly string[],
  signal?: AbortSignal,
): Promise<string[]> {
  const reupload = new Set<string>();
  let busy = await claimer.claimBlobs(writer, keys, signal);
  while (busy.length > 0) {
    for (const k of busy) reupload.add(k);
    await claimer.waitBlobs(busy, signal);
    busy = await claimer.claimBlobs(writer, busy, signal);
  }
  return [...reupload].sort();
}

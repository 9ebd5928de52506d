// The conformance cases against the in-memory reference: a case that fails
// here is itself wrong. Each deliberately broken store must fail at least
// one case, so no rule the suite claims to check goes unchecked.

import { describe, it } from "node:test";
import assert from "node:assert/strict";

import { allCases, firstFailure } from "./conformance.js";
import { memoryStoreSet, type Fault } from "./memory.js";

describe("conformance cases against the in-memory reference", () => {
  for (const c of allCases) {
    it(`${c.id}: ${c.title}`, () => c.run(async (options) => memoryStoreSet(options)));
  }
});

const faults: Fault[] = [
  "get-shares-memory",
  "list-utf16-order",
  "refs-count-duplicates",
  "no-stale-head-check",
  "parent-before-duplicate",
  "lease-expires-after-now",
  "release-ignores-owner",
  "fence-resets",
  "renew-revives",
  "fork-copies-label",
  "fork-ignores-transcript",
  "instance-merges",
  "prune-by-created-at",
  "writer-after-entries",
  "append-not-atomic",
  "ids-unbounded",
  "instance-unbounded",
];

describe("every broken in-memory store fails the suite", () => {
  for (const fault of faults) {
    it(fault, async () => {
      const failed = await firstFailure(allCases, async (options) => memoryStoreSet(options, fault));
      assert.ok(failed, `no case caught ${fault}`);
    });
  }
});

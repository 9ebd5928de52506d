// What a TanStack app sees when the store's etcd is out of space: a typed,
// coded refusal that says nothing was written, not an unknown outcome.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";

import { createCheckpointStore, SandboxCheckpointError, SandboxCheckpointStoreFullError, type SandboxCheckpoint } from "../src/index.js";
import { startCairnd, type Cairnd } from "./cairnd.js";
import { checkpoint } from "./conformance.js";

let d: Cairnd;

before(async () => {
  // A small quota: inline checkpoints (under 64 KiB) fill it in some 150 appends.
  d = await startCairnd(["--dev-etcd-quota", String(8 << 20)]);
});

after(async () => {
  await d?.stop();
});

describe("etcd out of space", () => {
  it("refuses the append that finds etcd full with SandboxCheckpointStoreFullError, keeping every acknowledged one", async () => {
    const s = createCheckpointStore({ baseUrl: d.baseUrl, token: d.token });
    const lease = await s.acquireWriter("full");
    const content = "x".repeat(50_000);
    let head: string | null = null;
    for (let i = 1; ; i++) {
      const c: SandboxCheckpoint = { ...checkpoint(`c${i}`, head, "full"), conversation: [{ role: "user", content }] };
      try {
        await s.append({ checkpoint: c, expectedHeadId: head, writer: lease });
        head = c.id;
      } catch (e) {
        assert.ok(e instanceof SandboxCheckpointStoreFullError, `append ${i}: ${String(e)}`);
        assert.ok(e instanceof SandboxCheckpointError);
        assert.equal(e.code, "SANDBOX_SNAPSHOT_STORE_FULL");
        assert.equal(e.name, "SandboxCheckpointStoreFullError");
        break;
      }
      assert.ok(i < 2000, "the quota was never reached");
    }
    assert.notEqual(head, null);
    assert.equal(await s.getHead("full"), head, "reads work under the alarm, and the last acknowledged append is the head");
    await assert.rejects(s.acquireWriter("other"), SandboxCheckpointStoreFullError);
  });
});

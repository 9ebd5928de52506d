// The conformance suite, the error mapping, tenancy and the blob claims,
// against a real cairnd (embedded etcd, test clock) that this file starts.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

import {
  CairnRequestError,
  CairnUnknownOutcomeError,
  claimAll,
  claimingBlobStore,
  createCairnStores,
  createCheckpointStore,
  openTestSession,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointWriterLostError,
  type SandboxCheckpoint,
  type SandboxCheckpointStoreOptions,
  type TestSession,
} from "../src/index.js";
import { BlobCollectorService } from "../src/gen/cairn/v1/cairn_pb.js";
import { maxRequestBytes, startCairnd, type Cairnd } from "./cairnd.js";
import { allCases, checkpoint, firstFailure, fileKey, type Factory, type StoreSet } from "./conformance.js";

let d: Cairnd;
const sessions: TestSession[] = [];

before(async () => {
  d = await startCairnd();
});

after(async () => {
  await closeSessions().catch(() => {});
  await d?.stop();
});

async function session(options: SandboxCheckpointStoreOptions): Promise<TestSession> {
  const s = await openTestSession({ baseUrl: d.baseUrl, token: d.token, ...options });
  sessions.push(s);
  return s;
}

const factory: Factory = session;

async function closeSessions(): Promise<void> {
  for (const s of sessions.splice(0)) await s.close();
}

describe("conformance against cairnd", () => {
  for (const c of allCases) {
    it(`${c.id}: ${c.title}`, async () => {
      try {
        await c.run(factory);
      } finally {
        await closeSessions();
      }
    });
  }
});

// Client-side mutants: the same wire, a client that breaks one rule. Each
// must fail at least one case, so the suite checks the client's mapping too.
type Mutant = (s: StoreSet) => StoreSet;
const mutants: Record<string, Mutant> = {
  "errors lose their class": (s) => ({
    ...s,
    checkpoints: {
      ...s.checkpoints,
      append: (i) => s.checkpoints.append(i).catch((e: unknown) => Promise.reject(new Error(String(e)))),
    },
  }),
  "label presence is lost": (s) => ({
    ...s,
    checkpoints: { ...s.checkpoints, get: async (id) => { const c = await s.checkpoints.get(id); return c ? ({ label: undefined, ...c } as unknown as SandboxCheckpoint) : c; } },
  }),
  "renew does not move expiresAt": (s) => ({
    ...s,
    checkpoints: {
      ...s.checkpoints,
      acquireWriter: async (t) => {
        const l = await s.checkpoints.acquireWriter(t);
        const first = l.expiresAt;
        return { threadId: l.threadId, ownerToken: l.ownerToken, fence: l.fence, renewAfterMs: l.renewAfterMs, expiresAt: first, renew: () => l.renew(), release: () => l.release() };
      },
    },
  }),
  "release rejects": (s) => ({
    ...s,
    checkpoints: {
      ...s.checkpoints,
      acquireWriter: async (t) => {
        const l = await s.checkpoints.acquireWriter(t);
        return {
          threadId: l.threadId,
          ownerToken: l.ownerToken,
          fence: l.fence,
          renewAfterMs: l.renewAfterMs,
          get expiresAt() {
            return l.expiresAt;
          },
          renew: () => l.renew(),
          release: async () => {
            await l.release();
            throw new Error("release failed");
          },
        };
      },
    },
  }),
  "an unknown transcript is null": (s) => ({
    ...s,
    transcripts: { ...s.transcripts, loadThread: async (t) => { const m = await s.transcripts.loadThread(t); return (m.length ? m : null) as never; } },
  }),
};

describe("every broken client fails the suite against cairnd", () => {
  for (const [name, mutate] of Object.entries(mutants)) {
    it(name, async () => {
      try {
        const failed = await firstFailure(allCases, async (o) => mutate(await factory(o)));
        assert.ok(failed, `no case caught: ${name}`);
      } finally {
        await closeSessions();
      }
    });
  }
});

describe("tenancy and authentication", () => {
  it("refuses a request without a token or with a wrong one, as unauthenticated, changing nothing", async () => {
    for (const token of ["", "not-a-token"]) {
      const s = createCheckpointStore({ baseUrl: d.baseUrl, token });
      await assert.rejects(s.getHead("t"), (e: unknown) => e instanceof CairnRequestError && e.connectCode === "unauthenticated");
      await assert.rejects(s.acquireWriter("t"), (e: unknown) => e instanceof CairnRequestError && e.connectCode === "unauthenticated");
    }
  });

  it("keeps one tenant's threads, checkpoints, transcripts and instances from another", async () => {
    const a = createCairnStores({ baseUrl: d.baseUrl, token: d.token });
    const b = createCairnStores({ baseUrl: d.baseUrl, token: d.otherToken });
    const thread = `tenancy-${Date.now()}`;
    const lease = await a.checkpoints.acquireWriter(thread);
    try {
      await a.checkpoints.append({ checkpoint: { ...checkpoint(`${thread}-1`), threadId: thread }, expectedHeadId: null, writer: lease });
      await a.transcripts.saveThread(thread, [{ role: "user", content: "secret" }]);
      await a.instances.upsert({ key: thread, provider: "p", providerSandboxId: "s", threadId: thread, updatedAt: 1 });
      assert.equal(await b.checkpoints.getHead(thread), null);
      assert.equal(await b.checkpoints.get(`${thread}-1`), null);
      assert.deepEqual(await b.checkpoints.list(thread), []);
      assert.deepEqual(await b.transcripts.loadThread(thread), []);
      assert.equal(await b.instances.get(thread), null);
      assert.ok(!(await b.checkpoints.listThreads()).includes(thread));
      assert.ok((await a.checkpoints.listThreads()).includes(thread));
      // B's lease on the same thread name is its own, and A's writer means nothing to B.
      const bl = await b.checkpoints.acquireWriter(thread);
      await assert.rejects(
        b.checkpoints.append({ checkpoint: { ...checkpoint(`${thread}-2`), threadId: thread }, expectedHeadId: null, writer: lease }),
        SandboxCheckpointWriterLostError,
      );
      await bl.release();
    } finally {
      await lease.release();
    }
  });

  it("refuses a test session id that was never opened", async () => {
    const s = createCheckpointStore({ baseUrl: d.baseUrl, token: d.token, testSession: { id: "no-such-session", now: () => 1 } });
    await assert.rejects(s.getHead("t"), CairnRequestError);
  });
});

describe("outcomes", () => {
  it("reports a write whose answer was lost as an unknown outcome, not as a failure", async () => {
    const ts = await session({ now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 });
    const lease = await ts.checkpoints.acquireWriter("thread-a");
    const lossy: typeof fetch = async (input, init) => {
      await fetch(input, init);
      throw new TypeError("the connection was reset");
    };
    const s = createCheckpointStore({ baseUrl: d.baseUrl, token: d.token, fetch: lossy, testSession: { id: ts.id, now: () => 1000 } });
    await assert.rejects(s.append({ checkpoint: checkpoint("1"), expectedHeadId: null, writer: lease }), CairnUnknownOutcomeError);
    assert.equal(await ts.checkpoints.getHead("thread-a"), "1", "the write was applied");
    await assert.rejects(s.getHead("thread-a"), CairnRequestError);
  });

  it("refuses a request over the size limit as resource_exhausted, changing nothing", async () => {
    const ts = await session({ now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 });
    const lease = await ts.checkpoints.acquireWriter("thread-a");
    const big = { ...checkpoint("1"), conversation: [{ role: "user", content: "x".repeat(maxRequestBytes + 1) }] };
    await assert.rejects(
      ts.checkpoints.append({ checkpoint: big, expectedHeadId: null, writer: lease }),
      (e: unknown) => e instanceof CairnRequestError && e.connectCode === "resource_exhausted",
    );
    assert.equal(await ts.checkpoints.getHead("thread-a"), null);
  });

  it("speaks JSON as well as binary", async () => {
    const ts = await session({ now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 });
    const s = createCairnStores({ baseUrl: d.baseUrl, token: d.token, json: true, testSession: { id: ts.id, now: () => 1000 } });
    const lease = await s.checkpoints.acquireWriter("thread-a");
    const c = { ...checkpoint("1"), label: "é", conversation: [{ role: "user", content: "\uD800 lone, 😀" }] };
    await s.checkpoints.append({ checkpoint: c, expectedHeadId: null, writer: lease });
    assert.deepEqual(await ts.checkpoints.get("1"), c);
    assert.deepEqual(await s.checkpoints.get("1"), c);
  });
});

describe("blob claims", () => {
  const bucket = () => {
    const m = new Map<string, Uint8Array>();
    return {
      m,
      async get(k: string) { return m.get(k) ?? null; },
      async head(k: string) { return m.has(k) ? { key: k, size: m.get(k)!.length } : null; },
      async put(k: string, v: Uint8Array) { m.set(k, v); return { key: k }; },
    };
  };

  it("claims under a current lease, refuses a released one, and a bad key before any call", async () => {
    const s = await session({ now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 });
    const lease = await s.checkpoints.acquireWriter("thread-a");
    const b = bucket();
    const wrapped = claimingBlobStore(b, { claimer: s.checkpoints, writer: lease });
    assert.equal(await wrapped.head(fileKey("1")), null);
    await wrapped.put(fileKey("1"), new Uint8Array([1]));
    assert.deepEqual(await wrapped.head(fileKey("1")), { key: fileKey("1"), size: 1 });
    await assert.rejects(wrapped.head("sandbox-files/sha256/nothex"), SandboxCheckpointInvalidEntryError);
    assert.deepEqual(await claimAll(s.checkpoints, lease, [fileKey("2"), fileKey("3")]), []);
    await lease.release();
    await assert.rejects(wrapped.head(fileKey("1")), SandboxCheckpointWriterLostError);
    await assert.rejects(wrapped.put(fileKey("4"), new Uint8Array()), SandboxCheckpointWriterLostError);
    assert.ok(!b.m.has(fileKey("4")), "a put went through without a claim");
  });

  it("waits out a sweep's delete, claims again and reports the key absent so capture uploads it", async () => {
    const s = await session({ now: () => 1000, leaseDurationMs: 100_000, renewAfterMs: 25 });
    const collector = createClient(
      BlobCollectorService,
      createConnectTransport({
        baseUrl: d.baseUrl,
        interceptors: [(next) => async (req) => { req.header.set("Authorization", `Bearer ${d.token}`); req.header.set("Cairn-Test-Session", s.id); req.header.set("Cairn-Test-Now", "1000"); return next(req); }],
      }),
    );
    const key = fileKey("5");
    const marked = await collector.markBlobs({ keys: [key], since: 0 });
    const deleting = await collector.beginBlobDeletes({ records: marked.records });
    assert.equal(deleting.records.length, 1, "the key did not reach deleting");
    const lease = await s.checkpoints.acquireWriter("thread-a");
    assert.deepEqual(await s.checkpoints.claimBlobs(lease, [key]), [key], "a deleting key was claimed");
    const b = bucket();
    b.m.set(key, new Uint8Array([9])); // bytes the sweep may be removing right now
    let waiting!: () => void;
    const waited = new Promise<void>((ok) => (waiting = ok));
    const claimer = {
      claimBlobs: s.checkpoints.claimBlobs.bind(s.checkpoints),
      waitBlobs: (keys: readonly string[]) => {
        waiting();
        return s.checkpoints.waitBlobs(keys);
      },
    };
    const wrapped = claimingBlobStore(b, { claimer, writer: lease });
    const head = wrapped.head(key);
    await waited; // the wrapper found the key busy and waits for the sweep
    await collector.endBlobDeletes({ records: deleting.records, deleted: true });
    assert.equal(await head, null, "capture would have reused bytes a sweep deleted");
    assert.deepEqual(await s.checkpoints.claimBlobs(lease, [key]), []);
  });
});

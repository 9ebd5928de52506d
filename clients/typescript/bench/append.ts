// B10, the TypeScript row: append of a 200-entry checkpoint and get of it
// through cairnd from this package, p50 and p90 over ROUNDS appends (default
// 100, after 10 warm-up appends). The checkpoints are B1's: 200 files of
// which 5% have new blob keys in each checkpoint, a 1 KiB conversation.
//
//   npm run bench                    # starts its own cairnd (test/cairnd.ts)
//   ROUNDS=300 ENTRIES=200 npm run bench
//
// Run by cairn-bench's B10 (-b10-cmd, make ts-bench), it uses the cairnd of
// CAIRN_BENCH_URL and CAIRN_BENCH_TOKEN, sizes from CAIRN_BENCH_ENTRIES and
// CAIRN_BENCH_APPENDS, and prints the line "append_p50_ms <ms>" that B10
// reads, so that the TypeScript row stands beside the Go client's.

import { createHash } from "node:crypto";

import { createCheckpointStore, type SandboxCheckpoint } from "../src/index.js";
import { startCairnd, type Cairnd } from "../test/cairnd.js";

const env = process.env;
const rounds = Number(env["CAIRN_BENCH_APPENDS"] ?? env["ROUNDS"] ?? 100);
const entries = Number(env["CAIRN_BENCH_ENTRIES"] ?? env["ENTRIES"] ?? 200);
const warmup = 10;

function key(seed: string): string {
  return "sandbox-files/sha256/" + createHash("sha256").update(seed).digest("hex");
}

function conversation(bytes: number) {
  const line = "edited the parser and ran the tests again; ".repeat(6);
  const out: Array<{ role: string; content: string }> = [];
  for (let n = 2; n < bytes; n += line.length + 32) out.push({ role: out.length % 2 ? "assistant" : "user", content: line });
  return out;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

async function main() {
  let d: Cairnd | undefined;
  let baseUrl = env["CAIRN_BENCH_URL"];
  let token = env["CAIRN_BENCH_TOKEN"] ?? "";
  if (!baseUrl) {
    d = await startCairnd();
    baseUrl = d.baseUrl;
    token = d.token;
  }
  try {
    const store = createCheckpointStore({ baseUrl, token });
    const thread = `b10-ts-${Date.now()}`;
    const lease = await store.acquireWriter(thread);
    const files = Array.from({ length: entries }, (_, i) => ({
      path: `src/pkg${String(Math.floor(i / 100)).padStart(3, "0")}/file${String(i).padStart(5, "0")}.go`,
      kind: "file" as const,
      blobKey: key(`b10-${i}`),
      size: 1000 + i,
    }));
    const conv = conversation(1024);
    const changing = Math.max(1, Math.floor(entries / 20));
    const appendMs: number[] = [];
    const getMs: number[] = [];
    let head: string | null = null;
    for (let r = 0; r < warmup + rounds; r++) {
      const id = `${thread}-${r}`;
      for (let i = entries - changing; i < entries; i++) files[i]!.blobKey = key(`${thread}-${r}-changing-${i}`);
      const c: SandboxCheckpoint = { id, threadId: thread, parentCheckpointId: head, createdAt: r, reason: "automatic", files, conversation: conv, artifacts: [] };
      let t = performance.now();
      await store.append({ checkpoint: c, expectedHeadId: head, writer: lease });
      const a = performance.now() - t;
      t = performance.now();
      await store.get(id);
      const g = performance.now() - t;
      if (r >= warmup) {
        appendMs.push(a);
        getMs.push(g);
      }
      head = id;
      if (r % 50 === 49) await lease.renew();
    }
    await lease.release();
    appendMs.sort((x, y) => x - y);
    getMs.sort((x, y) => x - y);
    const fmt = (v: number) => v.toFixed(2).padStart(8);
    console.log(`B10 ts-client (node ${process.version}, ${entries} entries, ${rounds} rounds, binary Connect over fetch)`);
    console.log(`  append  p50 ${fmt(quantile(appendMs, 0.5))} ms   p90 ${fmt(quantile(appendMs, 0.9))} ms`);
    console.log(`  get     p50 ${fmt(quantile(getMs, 0.5))} ms   p90 ${fmt(quantile(getMs, 0.9))} ms`);
    console.log(`append_p50_ms ${quantile(appendMs, 0.5).toFixed(3)}`);
  } finally {
    await d?.stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});

// Randomized tests of the encoders and the input checks, from a fixed seed
// (FUZZ_SEED and FUZZ_ROUNDS change it): every valid checkpoint survives the
// wire form (binary and JSON) unchanged, and no input, however malformed,
// makes the checks throw anything but a checkpoint error.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { create, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf";

import { checkpointIn, checkpointOut } from "../src/client.js";
import { SandboxCheckpointError } from "../src/errors.js";
import { CheckpointSchema } from "../src/gen/cairn/v1/cairn_pb.js";
import type { SandboxCheckpoint, SandboxSnapshotEntry } from "../src/types.js";
import { checkAppendInput, checkDeleteCheckpointsInput, checkDeleteHeadInput, checkForkInput } from "../src/validate.js";

const seed = Number(process.env["FUZZ_SEED"] ?? 20261202);
const rounds = Number(process.env["FUZZ_ROUNDS"] ?? 400);

/** mulberry32: a small, seedable PRNG. */
function prng(s: number) {
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function gen(seedOffset: number) {
  const r = prng(seed + seedOffset);
  const int = (n: number) => Math.floor(r() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const chars = ["a", "Z", "0", " ", ".", "-", "é", "ß", "😀", "\u{10000}", "\uE000", "\0", "\"", "\\u", "日"];
  const text = (min = 1, max = 8) => Array.from({ length: min + int(max - min + 1) }, () => pick(chars)).join("");
  const id = () => text(1, 6);
  const seg = () => {
    for (;;) {
      const s = text(1, 5).replace(/[\0/\\]/g, "x");
      if (s !== "." && s !== "..") return s;
    }
  };
  const hex = () => Array.from({ length: 64 }, () => "0123456789abcdef"[int(16)]).join("");
  const num = () => pick([0, 1, -2.5, 1e-300, 1.7976931348623157e308, -1e15, Math.PI, r() * 1e13]);
  const size = () => pick([0, 1, 4096, 2 ** 53 - 1, int(1e9)]);
  const json = (depth: number): unknown => {
    switch (int(depth > 2 ? 4 : 6)) {
      case 0:
        return null;
      case 1:
        return pick([true, false]);
      case 2:
        return num();
      case 3:
        return text(0, 6) + pick(["", "\uD800", "\uDFFF"]);
      case 4:
        return Array.from({ length: int(4) }, () => json(depth + 1));
      default:
        return Object.fromEntries(Array.from({ length: int(4) }, () => [text(0, 4), json(depth + 1)]));
    }
  };
  return { r, int, pick, text, id, seg, hex, num, size, json };
}

/** A random checkpoint the contract accepts (well-formed text throughout). */
function validCheckpoint(i: number): SandboxCheckpoint {
  const g = gen(i);
  const files: SandboxSnapshotEntry[] = [];
  const used = new Set<string>();
  for (let n = g.int(6); n > 0; n--) {
    const path = Array.from({ length: 1 + g.int(3) }, g.seg).join("/");
    if ([...used].some((u) => u === path || path.startsWith(u + "/") || u.startsWith(path + "/"))) continue;
    used.add(path);
    files.push(g.int(3) ? { path, kind: "file", blobKey: "sandbox-files/sha256/" + g.hex(), size: g.size() } : { path, kind: "dir" });
  }
  const c: SandboxCheckpoint = {
    id: g.id(),
    threadId: g.id(),
    parentCheckpointId: g.int(2) ? g.id() : null,
    createdAt: g.num(),
    reason: g.pick(["automatic", "named", "fork-root"] as const),
    files,
    conversation: Array.from({ length: g.int(4) }, () => ({ role: g.pick(["user", "assistant", "tool"]), content: g.json(1) })),
    artifacts: Array.from({ length: g.int(3) }, () => ({
      artifactId: g.id(),
      name: g.text(),
      mimeType: g.pick(["text/plain", "image/png", "application/x-é"]),
      size: g.size(),
      blobKey: "sandbox-artifacts/sha256/" + g.hex(),
      createdAt: g.num(),
    })),
  };
  if (g.int(2)) c.label = g.text(0, 6);
  if (g.int(2)) c.sourceRunId = g.text(0, 6);
  return c;
}

/** A random value for any position of an input: often malformed. */
function junk(i: number): unknown {
  const g = gen(1_000_000 + i);
  const atom = (): unknown =>
    g.pick([undefined, null, 0, -0, NaN, Infinity, 1.5, 2 ** 53, "", "\uD800", "x", "a/../b", "sandbox-files/sha256/" + g.hex(), [], {}, true, () => 1, Symbol("s"), 10n]);
  const value = (depth: number): unknown => {
    if (depth > 2 || g.int(3) === 0) return atom();
    if (g.int(2)) return Array.from({ length: g.int(3) }, () => value(depth + 1));
    const keys = ["id", "threadId", "parentCheckpointId", "createdAt", "files", "artifacts", "path", "kind", "blobKey", "size", "artifactId", "name", "mimeType", "ownerToken", "fence", "label", "reason"];
    return Object.fromEntries(Array.from({ length: g.int(6) }, () => [g.pick(keys), value(depth + 1)]));
  };
  const valid = validCheckpoint(i) as unknown as Record<string, unknown>;
  // Half the time a valid checkpoint with one field broken, half the time anything.
  if (g.int(2)) {
    const k = g.pick(Object.keys(valid));
    return { checkpoint: { ...valid, [k]: value(1) }, expectedHeadId: g.pick([null, valid["parentCheckpointId"], value(2)]), writer: { threadId: valid["threadId"], ownerToken: g.pick(["t", value(2)]), fence: g.pick([1, value(2)]) } };
  }
  return { checkpoint: value(0), expectedHeadId: value(1), writer: value(1), threadId: value(1), checkpointId: value(1), keep: value(1), sourceThreadId: value(1), sourceCheckpointId: value(1), destinationThreadId: value(1), destinationCheckpointId: value(1), createdAt: value(1) };
}

describe("fuzz", () => {
  it(`valid checkpoints survive the binary and JSON wire forms unchanged (seed ${seed}, ${rounds} rounds)`, () => {
    for (let i = 0; i < rounds; i++) {
      const c = validCheckpoint(i);
      const checked = checkAppendInput({ checkpoint: c, expectedHeadId: c.parentCheckpointId, writer: { threadId: c.threadId, ownerToken: "t", fence: 1 } });
      const msg = create(CheckpointSchema, checkpointIn(checked.checkpoint, checked.parent));
      const viaBinary = checkpointOut(fromBinary(CheckpointSchema, toBinary(CheckpointSchema, msg)));
      const viaJson = checkpointOut(fromJson(CheckpointSchema, JSON.parse(JSON.stringify(toJson(CheckpointSchema, msg)))));
      assert.deepEqual(viaBinary, c, `round ${i}: binary`);
      assert.deepEqual(viaJson, c, `round ${i}: JSON`);
    }
  });

  it(`malformed input gives a checkpoint error or passes, never another exception (seed ${seed}, ${rounds} rounds)`, () => {
    const checks = [checkAppendInput, checkDeleteHeadInput, checkDeleteCheckpointsInput, checkForkInput];
    for (let i = 0; i < rounds; i++) {
      const input = junk(i);
      for (const check of checks) {
        try {
          check(input);
        } catch (e) {
          assert.ok(e instanceof SandboxCheckpointError, `round ${i}, ${check.name}: ${String(e)}`);
        }
      }
    }
  });
});

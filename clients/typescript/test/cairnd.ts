// Builds cairnd from this repository and starts it on embedded etcd with its
// test clock, on a free loopback port, for the tests and the bench.

import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The repository root: this file runs from clients/typescript/dist/{test,bench}. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** The request-size limit the tests start cairnd with: small, so that a test can pass it cheaply. */
export const maxRequestBytes = 8 << 20;

export interface Cairnd {
  baseUrl: string;
  /** The token of tenant A, and of tenant B, whose data A must never see. */
  token: string;
  otherToken: string;
  /** What cairnd printed so far, for failure messages. */
  log(): string;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? ok(a.port) : fail(new Error("no port"))));
    });
  });
}

/**
 * Builds cmd/cairnd into a temporary directory (or uses $CAIRND_BIN) and
 * starts it with --dev --test-clock --serve-collector and two tenants.
 * Resolves once /readyz answers 200.
 */
export async function startCairnd(extraArgs: string[] = []): Promise<Cairnd> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-ts-"));
  let bin = process.env["CAIRND_BIN"];
  if (!bin) {
    bin = join(dir, "cairnd");
    await run("go", ["build", "-o", bin, "./cmd/cairnd"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  }
  const token = "ts-token-a";
  const otherToken = "ts-token-b";
  const tokens = join(dir, "tokens");
  await writeFile(tokens, `tenant-a ts-a/ ${token}\ntenant-b ts-b/ ${otherToken}\n`, { mode: 0o600 });
  const port = await freePort();
  const args = ["--dev", "--dev-data", join(dir, "data"), "--test-clock", "--serve-collector", "--listen", `127.0.0.1:${port}`, "--tokens-file", tokens, "--max-request-bytes", String(maxRequestBytes), ...extraArgs];
  const child: ChildProcess = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout?.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr?.on("data", (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((ok) => child.once("exit", (code) => ok(code)));
  const baseUrl = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(t);
    }
    await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`cairnd exited with ${child.exitCode} before it was ready:\n${out}`);
    }
    try {
      const r = await fetch(`${baseUrl}/readyz`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`cairnd was not ready within 120 s:\n${out}`);
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  return { baseUrl, token, otherToken, log: () => out, stop };
}

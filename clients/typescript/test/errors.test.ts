// How failures on the wire become the package's errors.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import { mapError } from "../src/client.js";
import {
  CairnRequestError,
  CairnUnknownOutcomeError,
  SandboxCheckpointConflictError,
  SandboxCheckpointDuplicateIdError,
  SandboxCheckpointError,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointInvalidIdError,
  SandboxCheckpointNotHeadError,
  SandboxCheckpointParentMismatchError,
  SandboxCheckpointStoreFullError,
  SandboxCheckpointWriterConflictError,
  SandboxCheckpointWriterLostError,
} from "../src/errors.js";
import { ErrorDetailSchema } from "../src/gen/cairn/v1/cairn_pb.js";

function withDetail(code: Code, detail: { code?: string; message?: string; unknownOutcome?: boolean; operation?: string }): ConnectError {
  return new ConnectError("server message", code, undefined, [{ desc: ErrorDetailSchema, value: create(ErrorDetailSchema, detail) }]);
}

const classes: Array<[string, Code, new (...a: never[]) => SandboxCheckpointError, string]> = [
  ["SANDBOX_SNAPSHOT_STALE_HEAD", Code.Aborted, SandboxCheckpointConflictError, "SandboxCheckpointConflictError"],
  ["SANDBOX_SNAPSHOT_PARENT_MISMATCH", Code.Aborted, SandboxCheckpointParentMismatchError, "SandboxCheckpointParentMismatchError"],
  ["SANDBOX_SNAPSHOT_DUPLICATE_ID", Code.AlreadyExists, SandboxCheckpointDuplicateIdError, "SandboxCheckpointDuplicateIdError"],
  ["SANDBOX_SNAPSHOT_NOT_HEAD", Code.FailedPrecondition, SandboxCheckpointNotHeadError, "SandboxCheckpointNotHeadError"],
  ["SANDBOX_SNAPSHOT_WRITER_CONFLICT", Code.Aborted, SandboxCheckpointWriterConflictError, "SandboxCheckpointWriterConflictError"],
  ["SANDBOX_SNAPSHOT_WRITER_LOST", Code.FailedPrecondition, SandboxCheckpointWriterLostError, "SandboxCheckpointWriterLostError"],
  ["SANDBOX_SNAPSHOT_INVALID_ID", Code.InvalidArgument, SandboxCheckpointInvalidIdError, "SandboxCheckpointInvalidIdError"],
  ["SANDBOX_SNAPSHOT_INVALID_ENTRY", Code.InvalidArgument, SandboxCheckpointInvalidEntryError, "SandboxCheckpointInvalidEntryError"],
  ["SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND", Code.NotFound, SandboxCheckpointError, "SandboxCheckpointError"],
  ["SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH", Code.FailedPrecondition, SandboxCheckpointError, "SandboxCheckpointError"],
  ["SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY", Code.AlreadyExists, SandboxCheckpointError, "SandboxCheckpointError"],
  ["SANDBOX_SNAPSHOT_STORE_FULL", Code.ResourceExhausted, SandboxCheckpointStoreFullError, "SandboxCheckpointStoreFullError"],
];

describe("mapError", () => {
  for (const [code, connectCode, cls, name] of classes) {
    it(`maps ${code} to ${name}`, () => {
      const e = mapError(withDetail(connectCode, { code, message: "why" }), true, "append");
      assert.ok(e instanceof cls);
      assert.ok(e instanceof SandboxCheckpointError);
      assert.equal((e as SandboxCheckpointError).code, code);
      assert.equal(e.name, name);
      assert.equal(e.message, "why");
    });
  }

  it("maps an unknown outcome reported by the server to CairnUnknownOutcomeError, whatever the code field says", () => {
    const e = mapError(withDetail(Code.Unknown, { code: "SANDBOX_SNAPSHOT_STALE_HEAD", unknownOutcome: true, operation: "append" }), true, "append");
    assert.ok(e instanceof CairnUnknownOutcomeError, String(e));
    assert.ok(!(e instanceof SandboxCheckpointError));
    assert.equal(e.code, "CAIRN_UNKNOWN_OUTCOME");
  });

  const lost: Array<[string, unknown]> = [
    ["a network failure", new TypeError("fetch failed")],
    ["an unavailable server", new ConnectError("down", Code.Unavailable)],
    ["a deadline", new ConnectError("late", Code.DeadlineExceeded)],
    ["a cancellation", new ConnectError("stop", Code.Canceled)],
    ["an internal error without detail", new ConnectError("oops", Code.Internal)],
  ];
  for (const [what, err] of lost) {
    it(`maps ${what} during a write to CairnUnknownOutcomeError and during a read to CairnRequestError`, () => {
      assert.ok(mapError(err, true, "append") instanceof CairnUnknownOutcomeError);
      const r = mapError(err, false, "get");
      assert.ok(r instanceof CairnRequestError, String(r));
    });
  }

  const refused: Array<[string, Code, string]> = [
    ["no or a wrong token", Code.Unauthenticated, "unauthenticated"],
    ["another tenant's resource", Code.PermissionDenied, "permission_denied"],
    ["an oversize request", Code.ResourceExhausted, "resource_exhausted"],
    ["a test session on a server without --test-clock", Code.FailedPrecondition, "failed_precondition"],
  ];
  for (const [what, code, name] of refused) {
    it(`maps ${what} to CairnRequestError (${name}), also for a write`, () => {
      const e = mapError(new ConnectError("no", code), true, "append");
      assert.ok(e instanceof CairnRequestError, String(e));
      assert.equal(e.connectCode, name);
    });
  }

  it("keeps an unknown upstream code out of the checkpoint classes", () => {
    const e = mapError(withDetail(Code.FailedPrecondition, { code: "SANDBOX_SNAPSHOT_SOMETHING_NEW" }), false, "get");
    assert.ok(e instanceof CairnRequestError);
  });
});

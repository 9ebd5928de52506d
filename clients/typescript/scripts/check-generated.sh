#!/usr/bin/env bash
# Fails when src/gen is stale against ../../proto: regenerates with the
# pinned local protoc-gen-es into a temporary directory and compares.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npx --no-install buf generate --template buf.gen.yaml -o "$tmp"
if ! diff -ru src/gen "$tmp/src/gen"; then
  echo "clients/typescript/src/gen is stale: run 'npm run generate' in clients/typescript and commit the result" >&2
  exit 1
fi

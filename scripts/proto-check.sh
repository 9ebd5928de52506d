#!/usr/bin/env bash
# Fails when the generated Go code in gen/ is not what buf and the pinned
# plugins in ./bin generate from proto/ now: it lints the module, regenerates
# into a temporary directory and compares the two trees.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN/buf" lint proto
sed -e "s#out: gen#out: $tmp/gen#" -e "s#local: bin/#local: $BIN/#" buf.gen.yaml >"$tmp/buf.gen.yaml"
"$BIN/buf" generate --template "$tmp/buf.gen.yaml"
if ! diff -ru gen "$tmp/gen"; then
  echo "proto-check: the generated code in gen/ is stale; run make proto and commit the result" >&2
  exit 1
fi
echo "proto-check: gen/ matches proto/"

#!/usr/bin/env bash
# Runs a command with CONTENDERS busy-loop processes (default 2) taking CPU
# beside it, and stops them when it ends (make test-contended). Tests that
# pass alone but fail here depend on timing.
set -euo pipefail
n=${CONTENDERS:-2}
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq "$n"); do
  bash -c 'while :; do :; done' &
  pids+=("$!")
done
echo "contended: $n busy-loop processes (pids ${pids[*]}) beside: $*"
"$@"

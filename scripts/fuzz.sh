#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# The go command's fuzzing coordinator sometimes ends a target with "context
# deadline exceeded" when a worker answers late at the end of -fuzztime on a
# loaded machine, without any failing input. Such a run is tried once more;
# a run that found a failing input fails at once.
#
# With TESTSUM set (make fuzz, make test), each run's go test -json events go
# through that filter, and those of each target's last run are appended to
# TESTSUM_LOG for the tally.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
json=() filter=(cat)
if [ -n "${TESTSUM:-}" ]; then
  json=(-json) filter=("$TESTSUM")
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
keep() { if [ -n "${TESTSUM_LOG:-}" ]; then cat "$out" >>"$TESTSUM_LOG"; fi; }
for pkg in $($go list ./...); do
  for f in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    for try in 1 2; do
      echo "fuzz $pkg $f"
      if $go test "${json[@]}" -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" 2>&1 | tee "$out" | "${filter[@]}"; then
        keep
        break
      fi
      if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
        echo "fuzz $pkg $f: the coordinator timed out without a failing input; trying once more"
        continue
      fi
      keep
      exit 1
    done
  done
done

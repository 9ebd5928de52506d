#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# The go command's fuzzing coordinator sometimes ends a target with "context
# deadline exceeded" when a worker answers late at the end of -fuzztime on a
# loaded machine, without any failing input. Such a run is tried once more;
# a run that found a failing input fails at once.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pkg in $($go list ./...); do
  for f in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    for try in 1 2; do
      echo "fuzz $pkg $f"
      if $go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" 2>&1 | tee "$out"; then
        break
      fi
      if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
        echo "fuzz $pkg $f: the coordinator timed out without a failing input; trying once more"
        continue
      fi
      exit 1
    done
  done
done

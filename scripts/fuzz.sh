#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz),
# FUZZJOBS targets at a time (default 2), each with -parallel 1: every target
# keeps its FUZZTIME, and the go command's start-up and link of each run,
# which cost about as much as a short fuzzing budget, overlap.
#
# The go command's fuzzing coordinator sometimes ends a target with "context
# deadline exceeded" when a worker answers late at the end of -fuzztime on a
# loaded machine, without any failing input. Such a run is tried once more;
# a run that found a failing input fails.
#
# With TESTSUM set (make fuzz, make test), each run's go test -json events go
# through that filter, and those of each target's last run are appended to
# TESTSUM_LOG for the tally.
set -euo pipefail
export GO=${GO:-go} FUZZTIME=${FUZZTIME:-10s} TESTSUM=${TESTSUM:-}
jobs=${FUZZJOBS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export WORK=$work

# fuzz_one N DIR NAME runs one target into $WORK/N.out (events or text) and
# prints its output when it ends; it exits non-zero when the target failed.
fuzz_one() {
  local n=$1 dir=$2 f=$3 pkg json=() out=$WORK/$1.out
  pkg=./$dir
  [ "$dir" = . ] && pkg=.
  [ -n "$TESTSUM" ] && json=(-json)
  for try in 1 2; do
    if $GO test "${json[@]}" -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s -parallel 1 "$pkg" >"$out" 2>&1; then
      report "$n" "$pkg" "$f"
      return 0
    fi
    if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
      echo "fuzz $pkg $f: the coordinator timed out without a failing input; trying once more"
      continue
    fi
    report "$n" "$pkg" "$f"
    touch "$WORK/failed"
    return 1
  done
}

# report prints a finished target's output, through TESTSUM when set, under
# a lock so that two targets' lines never interleave.
report() {
  (
    flock 9
    echo "fuzz $2 $3"
    if [ -n "$TESTSUM" ]; then "$TESTSUM" <"$WORK/$1.out" || true; else cat "$WORK/$1.out"; fi
  ) 9>"$WORK/lock"
}
export -f fuzz_one report

# The targets, found in the tracked test files rather than with go test
# -list, which would compile every package's tests once more just to list
# them: "N dir Name" lines, in path order.
git ls-files '*_test.go' | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*(' |
  sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
  sort -u | awk '{print NR, $1, $2}' >"$work/targets"
echo "fuzzing $(wc -l <"$work/targets") targets for $FUZZTIME each, $jobs at a time"
xargs -a "$work/targets" -n 3 -P "$jobs" bash -c 'fuzz_one "$@"' _ || true
if [ -n "${TESTSUM_LOG:-}" ]; then
  while read -r n _; do cat "$work/$n.out" >>"$TESTSUM_LOG"; done <"$work/targets"
fi
[ ! -e "$work/failed" ]

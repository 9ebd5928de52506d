#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz),
# FUZZJOBS targets at a time (default 2), each with -parallel 1: one worker
# process per target, so that on two cores each target fuzzes on a core of
# its own for its whole FUZZTIME.
#
# Each package's test binary is built once, with the go command's fuzzing
# instrumentation (go test -c -fuzz=.), and every target of the package runs
# from it with the flags go test -fuzz gives a test binary, in the package's
# directory as go test runs it (testdata/fuzz there is the seed corpus and
# gets any failing input). -test.fuzzcachedir is the go command's own cache
# directory of the package ($GOCACHE/fuzz/<import path>), so the corpus that
# fuzzing generates accumulates across runs as with go test -fuzz. Running
# `go test -fuzz` once per target instead would link the package's test binary
# again for every target: seconds of CPU each, as much as a short FUZZTIME. A
# binary that lacks the instrumentation would fuzz without coverage guidance;
# a run that says so fails.
#
# The go command's fuzzing coordinator sometimes ends a target with "context
# deadline exceeded" when a worker answers late at the end of -fuzztime on a
# loaded machine, without any failing input. Such a run is tried once more;
# a run that found a failing input fails.
#
# With TESTSUM set (make fuzz, make test), each run's output goes through
# go tool test2json (the events go test -json gives) and then that filter,
# and the events of each target's last run are appended to TESTSUM_LOG for
# the tally; a package whose test binary does not build counts as a failure.
#
# The binaries can be built ahead: `scripts/fuzz.sh build` with FUZZWORK set
# only builds them into that directory (make test does so at the lowest CPU
# priority while the unit tests run, whose waits leave CPU idle), and a later
# `scripts/fuzz.sh` with the same FUZZWORK fuzzes with them, building only
# what is missing. Without FUZZWORK both happen in a temporary directory.
set -euo pipefail
export GO=${GO:-go} FUZZTIME=${FUZZTIME:-10s} TESTSUM=${TESTSUM:-}
jobs=${FUZZJOBS:-2}
mode=${1:-run}
case $mode in
build | run) ;;
*)
  echo "usage: scripts/fuzz.sh [build|run]" >&2
  exit 2
  ;;
esac
if [ -n "${FUZZWORK:-}" ]; then
  mkdir -p "$FUZZWORK"
  work=$(cd "$FUZZWORK" && pwd)
  # Outputs of an earlier run are not this run's; built binaries are kept.
  rm -rf "$work/failed" "$work"/[0-9]*.out "$work/targets" "$work/dirs"
  [ "$mode" = build ] && rm -rf "$work/bin" "$work/broken" "$work"/build-*.log
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
export WORK=$work
root=$(pwd)
module=$($GO list -m)
FUZZCACHE=$($GO env GOCACHE)/fuzz
export ROOT=$root MODULE=$module FUZZCACHE

# import_path DIR prints the import path of the package in DIR.
import_path() {
  if [ "$1" = . ]; then echo "$MODULE"; else echo "$MODULE/$1"; fi
}

# binary DIR prints the path of DIR's fuzzing test binary.
binary() {
  echo "$WORK/bin/${1//\//_}.test"
}

# build DIR builds the fuzzing test binary of the package in DIR unless it is
# there from a build ahead; when it fails, it prints why and leaves
# $WORK/broken/<binary name>.
build() {
  local dir=$1 bin pkg=./$1 log
  bin=$(binary "$dir")
  [ -x "$bin" ] && return 0
  [ "$dir" = . ] && pkg=.
  log=$WORK/build-${bin##*/}.log
  if ! $GO test -c -fuzz=. -o "$bin" "$pkg" >"$log" 2>&1; then
    mkdir -p "$WORK/broken"
    (
      flock 9
      echo "fuzz $pkg: the test binary does not build:"
      cat "$log"
    ) 9>"$WORK/lock"
    touch "$WORK/broken/${bin##*/}" "$WORK/failed"
  fi
}

# run_target DIR NAME OUT runs one target from its package's binary into OUT.
run_target() {
  local dir=$1 f=$2 out=$3 bin imp conv=() v=()
  bin=$(binary "$dir")
  imp=$(import_path "$dir")
  if [ -n "$TESTSUM" ]; then
    conv=("$GO" tool test2json -t -p "$imp")
    v=(-test.v=test2json)
  fi
  (
    cd "$ROOT/$dir"
    "${conv[@]}" "$bin" -test.paniconexit0 "${v[@]}" -test.run='^$' -test.fuzz="^$f\$" \
      -test.fuzztime="$FUZZTIME" -test.fuzzminimizetime=2s -test.parallel=1 \
      -test.fuzzcachedir="$FUZZCACHE/$imp"
  ) >"$out" 2>&1
}

# fuzz_one N DIR NAME runs one target into $WORK/N.out (events or text) and
# prints its output when it ends; it exits non-zero when the target failed.
fuzz_one() {
  local n=$1 dir=$2 f=$3 pkg bin out=$WORK/$1.out
  pkg=./$dir
  [ "$dir" = . ] && pkg=.
  bin=$(binary "$dir")
  if [ -e "$WORK/broken/${bin##*/}" ]; then
    : >"$out" # the build failure is reported once, for the package
    return 1
  fi
  for try in 1 2; do
    if run_target "$dir" "$f" "$out"; then
      if grep -q 'not built with coverage instrumentation' "$out"; then
        echo "fuzz $pkg $f: the test binary lacks the fuzzing instrumentation"
        break
      fi
      report "$n" "$pkg" "$f" ok
      return 0
    fi
    if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
      echo "fuzz $pkg $f: the coordinator timed out without a failing input; trying once more"
      continue
    fi
    break
  done
  report "$n" "$pkg" "$f" FAIL
  touch "$WORK/failed"
  return 1
}

# report N PKG NAME RESULT prints a finished target's output, through
# TESTSUM when set, under a lock so that two targets' lines never interleave.
report() {
  (
    flock 9
    echo "fuzz $2 $3: $4"
    if [ -n "$TESTSUM" ]; then "$TESTSUM" <"$WORK/$1.out" || true; else cat "$WORK/$1.out"; fi
  ) 9>"$WORK/lock"
}
export -f import_path binary build run_target fuzz_one report

# The targets, found in the tracked test files rather than with go test
# -list, which would compile every package's tests once more just to list
# them: "N dir Name" lines, in path order.
git ls-files '*_test.go' | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*(' |
  sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
  sort -u | awk '{print NR, $1, $2}' >"$work/targets"
mkdir -p "$work/bin"
awk '{print $2}' "$work/targets" | uniq >"$work/dirs"
echo "building the fuzzing test binaries of $(wc -l <"$work/dirs") packages, $jobs at a time"
xargs -a "$work/dirs" -n 1 -P "$jobs" bash -c 'build "$1"' _ || true
if [ "$mode" = build ]; then
  # A failed build is reported again, and counted, by the run that follows.
  rm -rf "$work/broken" "$work/failed"
  exit 0
fi
echo "fuzzing $(wc -l <"$work/targets") targets for $FUZZTIME each, $jobs at a time"
xargs -a "$work/targets" -n 3 -P "$jobs" bash -c 'fuzz_one "$@"' _ || true
if [ -n "${TESTSUM_LOG:-}" ]; then
  while read -r n _; do cat "$work/$n.out" >>"$TESTSUM_LOG"; done <"$work/targets"
  for b in "$work"/broken/*; do
    [ -e "$b" ] || continue
    while read -r dir; do
      if [ "$(binary "$dir")" = "$work/bin/${b##*/}" ]; then
        printf '{"Action":"fail","Package":"%s"}\n' "$(import_path "$dir")" >>"$TESTSUM_LOG"
      fi
    done <"$work/dirs"
  done
fi
[ ! -e "$work/failed" ]

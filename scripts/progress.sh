#!/usr/bin/env bash
# progress.sh "what and why" go-subcommand args...
#
# Runs a go command that can take minutes on a first run (downloading
# modules, compiling a few hundred packages) without staying silent for more
# than about ten seconds: it says what it is doing and why, prints a line per
# module it downloads, and every ten seconds how far it got. The command runs
# with -x, whose trace is summarised, not shown; if it fails, it runs again
# without -x (everything done is cached) so that its errors show as usual.
set -euo pipefail
what=$1
shift
go=${GO:-go}
sub=$1
shift
start=$SECONDS
echo "$what"
trace=$(mktemp) # the whole -x trace, should it be needed
count=$(mktemp)
hb=
cleanup() {
  if [ -n "$hb" ]; then kill "$hb" 2>/dev/null || true; wait "$hb" 2>/dev/null || true; fi
  rm -f "$trace" "$count"
}
trap cleanup EXIT
# Every ten seconds: how long, how many modules fetched and packages
# compiled so far, and the package being compiled.
(
  while sleep 10; do
    read -r mods pkgs last <"$count" 2>/dev/null || true
    echo "  ... $((SECONDS - start))s: ${mods:-0} modules downloaded, ${pkgs:-0} packages compiled${last:+ (now $last)}"
  done
) &
hb=$!
# The summary of -x: a line per module download; counts for the heartbeat.
summarise() {
  awk -v count="$count" '
    function save() { printf "%d %d %s\n", mods, pkgs, last > count; close(count) }
    /^# get https?:\/\/.*\/@v\/.*\.zip$/ {
      url = $3; sub(/^https?:\/\/[^\/]+\//, "", url)
      mod = url; sub(/\/@v\/.*/, "", mod); ver = url; sub(/.*\/@v\//, "", ver); sub(/\.zip$/, "", ver)
      # The proxy spells an upper-case letter as ! and the letter (in a
      # URL, %21 and the letter).
      gsub(/%21/, "!", mod)
      out = ""
      while ((i = index(mod, "!")) > 0) { out = out substr(mod, 1, i - 1) toupper(substr(mod, i + 1, 1)); mod = substr(mod, i + 2) }
      mod = out mod
      printf "  downloading %s %s\n", mod, ver; fflush()
      mods++; save(); next
    }
    /\/compile / {
      for (i = 1; i < NF; i++) if ($i == "-p") { last = $(i + 1) }
      pkgs++; save(); next
    }
    /\/link / { printf "  linking\n"; fflush(); next }
  '
}
status=0
exec 3> >(tee "$trace" | summarise)
summary=$!
"$go" "$sub" -x "$@" 2>&3 || status=$?
exec 3>&-
wait "$summary" || true # the summary's last lines
if [ "$status" != 0 ]; then
  echo "  $go $sub failed after $((SECONDS - start))s; again without -x, to show why:"
  "$go" "$sub" "$@"
  exit 1
fi
echo "  done in $((SECONDS - start))s"

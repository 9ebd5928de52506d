#!/usr/bin/env bash
# make release: builds cairn, cairnd and sweeper for each platform of
# PLATFORMS with -trimpath and the version and revision stamped into
# internal/buildinfo (what --version and cairn_build_info report), packs each
# platform's binaries with LICENSE, README.md and CHANGELOG.md into
# cairn_<version>_<os>_<arch>.tar.gz, and writes SHA256SUMS, all under
# DIST (dist/<version>, which git ignores). Then, when a docker daemon
# answers, it builds the container images of the Dockerfile's targets as
# IMAGE_REPO/<target>:<version>; otherwise it says so and skips them.
#
# Variables: VERSION (default: git describe), REVISION (default: the commit,
# with -dirty for uncommitted changes), PLATFORMS, IMAGE_REPO, GO.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
if [ -z "${REVISION:-}" ]; then
  REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain 2>/dev/null)" ]; then REVISION=$REVISION-dirty; fi
fi
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64}
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/cairnstore}
DIST=${DIST:-dist/$VERSION}
COMMANDS=(cairn cairnd sweeper)
TARGETS=(cairnd sweeper)
pkg=github.com/cairnstore/cairn/internal/buildinfo
ldflags="-s -w -X $pkg.stamped=$VERSION -X $pkg.stampedRevision=$REVISION"
# Archive entries carry the commit's time, so that the same commit packs the
# same bytes.
mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)

rm -rf "$DIST"
mkdir -p "$DIST"
echo "release $VERSION (revision $REVISION) into $DIST"
for platform in $PLATFORMS; do
  os=${platform%/*} arch=${platform#*/}
  name=cairn_${VERSION}_${os}_${arch}
  dir=$DIST/$name
  mkdir -p "$dir"
  for cmd in "${COMMANDS[@]}"; do
    echo "  building $name/$cmd"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS=-buildvcs=false \
      "$GO" build -trimpath -ldflags="$ldflags" -o "$dir/$cmd" "./cmd/$cmd"
  done
  cp LICENSE README.md CHANGELOG.md "$dir/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
    -C "$DIST" -cf - "$name" | gzip -n >"$DIST/$name.tar.gz"
  rm -rf "$dir"
done
(cd "$DIST" && sha256sum -- *.tar.gz >SHA256SUMS)
echo "checksums: $DIST/SHA256SUMS"
cat "$DIST/SHA256SUMS"

# The binaries for this machine's platform answer --version with the stamp.
host=$("$GO" env GOOS)_$("$GO" env GOARCH)
if [ -f "$DIST/cairn_${VERSION}_${host}.tar.gz" ]; then
  check=$(mktemp -d)
  trap 'rm -rf "$check"' EXIT
  tar -xzf "$DIST/cairn_${VERSION}_${host}.tar.gz" -C "$check"
  for cmd in "${COMMANDS[@]}"; do
    out=$("$check/cairn_${VERSION}_${host}/$cmd" --version)
    case "$out" in
      "$cmd $VERSION, revision ${REVISION%-dirty}"*) echo "  $out" ;;
      *) echo "release: $cmd --version printed \"$out\", want $VERSION at $REVISION" >&2; exit 1 ;;
    esac
  done
fi

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  for target in "${TARGETS[@]}"; do
    echo "building the image $IMAGE_REPO/$target:$VERSION (Dockerfile target $target)"
    docker build --target "$target" --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
      -t "$IMAGE_REPO/$target:$VERSION" .
  done
else
  echo "release: no docker daemon answers here: the images (${TARGETS[*]} from the Dockerfile) were not built." >&2
  images=()
  for target in "${TARGETS[@]}"; do images+=("$IMAGE_REPO/$target:$VERSION"); done
  echo "  Run make release where 'docker info' works to build ${images[*]}." >&2
fi

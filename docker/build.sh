#!/usr/bin/env bash
# Builds the flowerbox runner image (docker/Dockerfile): the flowerbox binary on top of the
# agent image, which flowerbox's own machinery makes sure exists (built offline on first use).
# Prints the image's tag on stdout (progress goes to stderr); docker/flowerbox runs it.
#
#   docker/build.sh [--release] [--bin PATH] [--base IMAGE] [--tag NAME] [--prune]
#
#   --bin PATH    use this flowerbox binary instead of building one (`cargo build --bin
#                 flowerbox`, debug unless --release)
#   --base IMAGE  base image; default: the agent image, ensured through flowerbox's image code
#                 (`cargo run --example sandbox_bench -- --ensure-image`)
#   --tag NAME    extra tag; the image is always tagged flowerbox-runner:<12 hex content hash>,
#                 and flowerbox-runner:latest unless --tag is given
#   --prune       remove older flowerbox-runner:<hash> images that no container uses (never
#                 by default: the engine may hold other checkouts' or test runs' images)
#
# The binary is built with the host's toolchain and copied in. That works when the image's
# glibc is at least the newest GLIBC_x.y symbol version the binary needs: this script measures
# both and refuses otherwise (then build inside a bookworm container or link statically). On
# this machine kind host and image are both Debian bookworm (glibc 2.36; the binary needs
# GLIBC_2.34). The script finally runs `flowerbox --help` in the image before tagging latest.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
REPO=flowerbox-runner

bin="" base="" tag="" release="" prune="" profile=debug
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --release) release=--release profile=release; shift ;;
    --prune) prune=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

command -v docker >/dev/null || die "the docker CLI is not on PATH"

if [ -z "$bin" ]; then
  say "building flowerbox ($profile)"
  (cd "$root" && cargo build --quiet --bin flowerbox $release) >&2
  bin=${CARGO_TARGET_DIR:-$root/target}/$profile/flowerbox
fi
[ -x "$bin" ] || die "no flowerbox binary at $bin"

if [ -z "$base" ]; then
  say "making sure the agent image exists (flowerbox's image code; builds it offline if missing)"
  base=$(cd "$root" && cargo run --quiet --example sandbox_bench -- --ensure-image)
fi
docker image inspect "$base" >/dev/null 2>&1 || die "base image $base is not on the engine"

# glibc: the newest symbol version the binary needs vs the image's glibc.
need=$(grep -aoE 'GLIBC_[0-9]+\.[0-9]+' "$bin" | sed 's/GLIBC_//' | sort -uV | tail -n1)
have=$(docker run --rm --entrypoint ldd "$base" --version 2>/dev/null | head -n1 | grep -oE '[0-9]+\.[0-9]+$' || true)
if [ -n "$need" ]; then
  [ -n "$have" ] || die "cannot tell the glibc version of $base (no ldd in it)"
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -n1)" != "$have" ]; then
    die "$bin needs glibc $need but $base has $have: build flowerbox inside a container of \
that image (or statically, e.g. for x86_64-unknown-linux-musl) and pass it with --bin"
  fi
  say "glibc: binary needs $need, image has $have"
fi

# Content tag: the Dockerfile, the binary and the base image's id.
base_id=$(docker image inspect --format '{{.Id}}' "$base")
hash=$( { sha256sum "$here/Dockerfile" "$bin" | cut -d' ' -f1; echo "$base_id"; } | sha256sum | cut -c1-12)
image=$REPO:$hash

if docker image inspect "$image" >/dev/null 2>&1; then
  say "$image is up to date"
else
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/flowerbox-runner.XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
  cp "$here/Dockerfile" "$ctx/Dockerfile"
  cp "$bin" "$ctx/flowerbox"
  say "building $image from $base"
  # The classic builder talks to any engine (no BuildKit/buildx needed); its deprecation
  # notice goes to stderr with the rest of the progress.
  DOCKER_BUILDKIT=0 docker build --quiet --build-arg "BASE=$base" \
    --label "flowerbox.runner.base=$base" -t "$image" "$ctx" >&2
fi

# The binary must start in the image (catches a libc or loader mismatch the check missed).
docker run --rm "$image" --help >/dev/null || die "flowerbox does not start in $image"

if [ -n "$tag" ]; then
  docker tag "$image" "$tag"
else
  docker tag "$image" "$REPO:latest"
fi
if [ -n "$prune" ]; then
  # Older content tags of this repository (named tags stay); an image in use stays.
  old=$(docker image ls --format '{{.Repository}}:{{.Tag}}' "$REPO" \
    | grep -xE "$REPO:[0-9a-f]{12}" | grep -vxF "$image" || true)
  for o in $old; do docker rmi "$o" >/dev/null 2>&1 || true; done
fi
echo "$image"

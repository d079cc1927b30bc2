#!/usr/bin/env bash
# Builds the root filesystem of flowerbox's agent base image offline-capable: Debian bookworm
# via `debootstrap --variant=minbase` from the Debian mirror apt already uses, with every tool
# the agent image needs, so the Dockerfile on top never needs the network.
#
#   build-base.sh OUT.tar        write the rootfs tarball (the runner imports it through the API)
#   build-base.sh --import TAG   pipe the rootfs straight into `docker import`
#
# Needs root and debootstrap (`apt-get install debootstrap`). FLOWERBOX_DEBIAN_MIRROR overrides
# the mirror. No host file other than the mirror's packages ends up in the image.
set -euo pipefail

SUITE=bookworm
here=$(cd "$(dirname "$0")" && pwd)
# packages.txt is the single list shared with the Dockerfile.
PACKAGES=$(grep -vE '^[[:space:]]*(#|$)' "$here/packages.txt" | paste -sd, -)

usage() { echo "usage: $0 OUT.tar | --import TAG" >&2; exit 2; }
[ $# -ge 1 ] || usage
mode=tar; out=$1
if [ "$1" = "--import" ]; then
  [ $# -eq 2 ] || usage
  mode=import; out=$2
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "build-base.sh: debootstrap needs root; run: sudo $0 $*" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  echo "build-base.sh: debootstrap is not installed; run: apt-get install -y debootstrap" >&2
  exit 1
fi

# The mirror apt already uses (deb822 `URIs:` or one-line `deb URL`), else Debian's CDN.
detect_mirror() {
  local f url
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    url=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' "$f" \
      | grep -oE '[a-z]+://[^[:space:]]+' | head -n1 || true)
    if [ -n "$url" ]; then echo "${url%/}"; return; fi
  done
  echo http://deb.debian.org/debian
}
MIRROR=${FLOWERBOX_DEBIAN_MIRROR:-$(detect_mirror)}

work=$(mktemp -d "${TMPDIR:-/var/tmp}/flowerbox-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs

echo "debootstrap $SUITE from $MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR"

# Keep the image small and free of anything host-specific.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
  "$root"/tmp/* "$root"/root/.bash_history
: >"$root/etc/hostname"
: >"$root/etc/resolv.conf"

echo "packing rootfs"
if [ "$mode" = import ]; then
  tar --numeric-owner -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$out"
else
  tar --numeric-owner -C "$root" -cf "$out" .
fi
echo "done"

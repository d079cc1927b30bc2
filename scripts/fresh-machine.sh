#!/usr/bin/env bash
# The README's two commands on a truly fresh machine (issue 18 "A truly fresh machine"; not run
# by CI): a Debian bookworm root filesystem from debootstrap with nothing added but git and the
# Docker CLI (Debian's docker.io), imported as a throwaway image; in a container of it, with the
# host's Docker socket mounted, a clone of this repository runs README command 1
# (scripts/demo.sh, to the demo's ACHIEVED) and then command 2 (cargo test --all-targets).
#
#   sudo scripts/fresh-machine.sh [--no-tests] [--first-image-build] [--keep-logs DIR]
#
#   --no-tests        command 1 only
#   --first-image-build
#                     an engine without flowerbox's images, as on a fresh machine: removes the
#                     engine's flowerbox-agent:* and flowerbox-base:* images first (flowerbox's
#                     own; an image a container still uses stays, and is said), and gives the
#                     machine's container what root on a real machine has and debootstrap uses
#                     for the base image: mount (/proc) and mknod (device nodes), no seccomp or
#                     AppArmor profile (`--privileged` is refused by some hosts, this one included),
#                     and /var/tmp on a tmpfs that allows device nodes
#   --keep-logs DIR   where the logs go (default: target/fresh-machine/ of this checkout)
#
# The container shares the host's PID and network namespaces and keeps the workspace at the
# same absolute path inside and outside (the engine resolves bind-mount paths on the host, and
# a run's owner pid must mean the same process to every flowerbox on this engine). TMPDIR points
# into the workspace, so the demo and the tests' temporary directories are under it too.
# Removes what it creates: the container, the image (its own tag), /var/tmp/flowerbox-fresh.*
# (its own), and any flowerbox container or network left with a workspace under it.
# Needs root (debootstrap), debootstrap, docker; the commit tested is this checkout's HEAD.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tests=1 logs=$root/target/fresh-machine first_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) tests=0; shift ;;
    --first-image-build) first_build=1; shift ;;
    --keep-logs) logs=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "fresh-machine: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine: debootstrap needs root: sudo $0" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "fresh-machine: apt-get install debootstrap" >&2; exit 1; }

say() { printf '== [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
id=$(date -u +%Y%m%d-%H%M%S)-$$
tag=flowerbox-fresh:$id
name=flowerbox-fresh-$id
work=$(mktemp -d /var/tmp/flowerbox-fresh.XXXXXX)
mkdir -p "$logs"
cleanup() {
  set +e
  docker rm -f "$name" >/dev/null 2>&1
  # What runs inside left on the engine: only containers/networks of workspaces under $work.
  for c in $(docker ps -aq --filter label=flowerbox.run); do
    ws=$(docker inspect --format '{{index .Config.Labels "flowerbox.workspace"}}' "$c" 2>/dev/null)
    case "$ws" in "$work"/*) echo "fresh-machine: removing left container $c ($ws)"; docker rm -f "$c" >/dev/null ;; esac
  done
  for n in $(docker network ls -q --filter label=flowerbox.run); do
    ws=$(docker network inspect --format '{{index .Labels "flowerbox.workspace"}}' "$n" 2>/dev/null)
    case "$ws" in "$work"/*) docker network rm "$n" >/dev/null ;; esac
  done
  docker rmi "$tag" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# -- 1. the machine: Debian bookworm + git + docker.io, sources as a Debian install has them.
t0=$(date +%s)
say "debootstrap bookworm (+ git, docker.io) into $work/rootfs"
debootstrap --variant=minbase --include=git,docker.io bookworm "$work/rootfs" \
  http://deb.debian.org/debian >"$logs/debootstrap.log" 2>&1 ||
  { tail -n 20 "$logs/debootstrap.log" >&2; exit 1; }
cat >"$work/rootfs/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
# The site's own CA certificates (a TLS-inspecting egress proxy, a company CA) belong to the
# machine, not to flowerbox: the ca-certificates package install-deps.sh adds picks them up.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$work/rootfs/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$work/rootfs/usr/local/share/ca-certificates/"
fi
tar --numeric-owner -C "$work/rootfs" -c . | docker import - "$tag" >/dev/null
rm -rf "$work/rootfs"
t1=$(date +%s)
say "image $tag ready ($((t1 - t0)) s)"

# -- 2. the repository, as a clone would get it (this checkout's HEAD).
rev=$(git -C "$root" rev-parse HEAD)
git clone -q --bare --no-local "$root" "$work/origin.git"
mkdir -p "$work/tmp"
# mktemp -d made $work 0700; a real machine's /tmp lets every user through, and two tests run a
# process as another uid (nobody, the wrapper's non-root caller) in a directory under TMPDIR.
chmod 0711 "$work"

# -- 3. inside: clone, command 1, command 2 (times to $work/times).
inner=$(cat <<EOF
set -euo pipefail
export TMPDIR=$work/tmp HOME=$work/home
mkdir -p "\$HOME"
cd $work
git clone -q origin.git flowerbox
cd flowerbox
git checkout -q $rev
echo "dpkg: \$(dpkg-query -W -f='\${Package} ' git docker.io)"
echo "on PATH: \$(for c in git docker cargo rustc cc jq sqlite3 curl tmux; do command -v \$c >/dev/null && printf '%s ' \$c; done)"
s=\$(date +%s)
scripts/demo.sh
e=\$(date +%s)
echo "command1 \$((e - s))" >>$work/times
export PATH="\$HOME/.local/bin:\$PATH"
echo "flowerbox on PATH: \$(command -v flowerbox)"
flowerbox --help | head -n 1
if [ $tests = 1 ]; then
  s=\$(date +%s)
  rc=0
  cargo test --all-targets || rc=\$?
  e=\$(date +%s)
  echo "command2 \$((e - s)) rc=\$rc" >>$work/times
  exit \$rc
fi
EOF
)
privileged=()
if [ $first_build = 1 ]; then
  for img in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^flowerbox-(agent|base):' || true); do
    if docker rmi "$img" >/dev/null 2>&1; then say "removed image $img (built again inside)"
    else say "image $img is in use: kept"; fi
  done
  # /var/tmp (where the rootfs is built) on a file system that allows device nodes: the
  # engine's own root file system may not (fuse-overlayfs here is mounted nodev).
  privileged=(--cap-add SYS_ADMIN --cap-add MKNOD --security-opt seccomp=unconfined
    --security-opt apparmor=unconfined --tmpfs /var/tmp:rw,exec,dev,suid,size=4g)
fi
say "container $name: clone, scripts/demo.sh$([ $tests = 1 ] && echo ', cargo test --all-targets')"
rc=0
docker run --name "$name" --label flowerbox.fresh="$id" "${privileged[@]}" \
  --pid host --network host \
  -v /var/run/docker.sock:/var/run/docker.sock \
  -v "$work:$work" -w "$work" \
  "$tag" bash -c "$inner" >"$logs/inside.log" 2>&1 || rc=$?
t2=$(date +%s)
cp "$work/times" "$logs/times" 2>/dev/null || true
say "inside exited $rc after $((t2 - t1)) s; logs in $logs"
grep -E '演示完成|demo 失败|^test result|FAILED|failed' "$logs/inside.log" | tail -n 40 || true
cat "$logs/times" 2>/dev/null || true
say "machine image $((t1 - t0)) s; total $((t2 - t0)) s"
exit "$rc"

#!/usr/bin/env bash
# A second Docker engine on this machine whose filesystem is NOT the caller's: `dockerd` inside a
# privileged container (docker-in-docker) of the local engine, reached over TCP on 127.0.0.1.
# A bind mount on it resolves inside that container, never on this machine's disk: what a CI
# `dind` service or a remote build box looks like to flowerbox.
#
#   scripts/second-engine.sh start [--no-images]
#                     build the engine image if missing, start the engine, hand the agent images
#                     over (`docker save | docker load`), print `DOCKER_HOST=tcp://127.0.0.1:PORT`
#   scripts/second-engine.sh env      print `DOCKER_HOST=…` of the running engine
#   scripts/second-engine.sh load IMAGE…  hand more images over
#   scripts/second-engine.sh stop [--keep-image]
#                     remove the container, its data volume, its network and (unless
#                     --keep-image) the engine image
#
# Typical use:   eval "export $(scripts/second-engine.sh start)"; …; scripts/second-engine.sh stop
#
# Built offline from the local registry-free base: the engine image is the project's debootstrap
# base (`flowerbox-base:*`, built with image/build-base.sh when absent) plus Debian's docker.io
# from the Debian mirror, installed by apt in a throw-away container and committed. No registry.
# Idempotent: `start` on a running engine only prints its DOCKER_HOST. Everything it creates is
# named `flowerbox-second-engine*` and labelled `flowerbox.second-engine` (never `flowerbox.run`,
# never `fbx-*`, which flowerbox's own sweeps and CI's leftover check own). The engine listens
# without TLS, so it is published on 127.0.0.1 only. SECOND_ENGINE_STORAGE picks the inner storage
# driver (default overlay2; fuse-overlayfs and vfs are installed too).
set -euo pipefail

NAME=flowerbox-second-engine
LABEL=flowerbox.second-engine
REPO=flowerbox-second-engine
PACKAGES="docker.io fuse-overlayfs iptables ca-certificates procps"
here=$(cd "$(dirname "$0")/.." && pwd)

usage() { echo "usage: $0 start [--no-images] | env | load IMAGE... | stop [--keep-image]" >&2; exit 2; }
die() { echo "second-engine.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || usage
# The outer engine is whatever DOCKER_HOST says for the caller; the inner one is never the target.
command -v docker >/dev/null || die "the docker CLI is not installed"

host_port() { docker port "$NAME" 2375/tcp 2>/dev/null | grep -oE '127\.0\.0\.1:[0-9]+' | head -n1; }
running() { [ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ]; }
inner() { DOCKER_HOST="tcp://$(host_port)" docker "$@"; }

# The newest flowerbox-base image, or build one with debootstrap (needs root).
base_image() {
  local base
  base=$(docker images --format '{{.Repository}}:{{.Tag}}' flowerbox-base | head -n1)
  if [ -z "$base" ]; then
    base=$REPO-base:local
    if ! docker image inspect "$base" >/dev/null 2>&1; then
      echo "second-engine.sh: no flowerbox-base image; building $base with debootstrap" >&2
      local sudo=()
      [ "$(id -u)" -eq 0 ] || sudo=(sudo)
      "${sudo[@]}" bash "$here/image/build-base.sh" --import "$base" >&2
    fi
  fi
  echo "$base"
}

engine_image() {
  local base id tag image
  base=$(base_image)
  id=$(docker image inspect -f '{{.Id}}' "$base")
  tag=$(printf '%s\n%s\n' "$id" "$PACKAGES" | sha256sum | cut -c1-12)
  image=$REPO:$tag
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    echo "second-engine.sh: building $image on $base (apt: $PACKAGES)" >&2
    docker rm -f "$NAME-build" >/dev/null 2>&1 || true
    docker run --name "$NAME-build" --label "$LABEL=build" "$base" sh -ec "
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q >/dev/null
      apt-get install -y -q --no-install-recommends $PACKAGES >/dev/null
      rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb" >&2 \
      || { docker rm -f "$NAME-build" >/dev/null 2>&1; die "installing $PACKAGES into $base failed"; }
    docker commit --change 'ENTRYPOINT []' --change 'CMD ["dockerd"]' \
      --change "LABEL $LABEL=image" "$NAME-build" "$image" >/dev/null
    docker rm -f "$NAME-build" >/dev/null
  fi
  echo "$image"
}

# The agent images this checkout's flowerbox would run: every flowerbox-agent/-base tag present
# (one `docker save` so shared layers travel once). SECOND_ENGINE_IMAGES overrides.
default_images() {
  if [ -n "${SECOND_ENGINE_IMAGES:-}" ]; then echo "$SECOND_ENGINE_IMAGES"; return; fi
  docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^flowerbox-(agent|base):' | paste -sd' ' -
}

load() {
  [ $# -gt 0 ] || return 0
  local started=$SECONDS
  # shellcheck disable=SC2068
  docker save "$@" | inner load -q >&2
  echo "second-engine.sh: loaded $* in $((SECONDS - started)) s" >&2
}

case $1 in
  start)
    images=yes
    [ "${2:-}" = --no-images ] && images=no
    if running && [ -n "$(host_port)" ]; then
      echo "DOCKER_HOST=tcp://$(host_port)"
      exit 0
    fi
    t0=$SECONDS
    image=$(engine_image)
    t_image=$((SECONDS - t0))
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    docker network inspect "$NAME-net" >/dev/null 2>&1 \
      || docker network create --label "$LABEL=net" "$NAME-net" >/dev/null
    docker volume inspect "$NAME-data" >/dev/null 2>&1 \
      || docker volume create --label "$LABEL=data" "$NAME-data" >/dev/null
    # The outer bridge's MTU (1400 on some VMs), so the inner containers' packets fit.
    mtu=$(docker network inspect bridge -f '{{index .Options "com.docker.network.driver.mtu"}}' 2>/dev/null || true)
    # Privileged, except where the machine's capability bounding set lacks a capability (on this
    # kind of VM: CAP_SYS_RESOURCE) and runc refuses every privileged container. The equivalent
    # then: every capability the machine has, no seccomp/AppArmor, /proc/sys writable, /dev/fuse,
    # and the host's cgroup tree (cgroup v1 mounts stay read-only otherwise), the inner
    # containers under a cgroup parent of their own. No file of the caller's disk is mounted.
    if docker run --rm --privileged "$image" true >/dev/null 2>&1; then
      confine=(--privileged)
    else
      confine=(--cap-add ALL --security-opt seccomp=unconfined --security-opt apparmor=unconfined
        --security-opt systempaths=unconfined --device /dev/fuse -v /sys/fs/cgroup:/sys/fs/cgroup)
      # Drop what this machine's bounding set lacks (CAP_* numbers 0..40).
      names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
        LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
        SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
        SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
        MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
        CHECKPOINT_RESTORE)
      bnd=$((16#$(awk '/^CapBnd/ {print $2}' /proc/self/status)))
      for i in "${!names[@]}"; do
        (( (bnd >> i) & 1 )) || confine+=(--cap-drop "${names[$i]}")
      done
    fi
    docker run -d --name "$NAME" --label "$LABEL=engine" "${confine[@]}" \
      --network "$NAME-net" -p 127.0.0.1::2375 \
      -v "$NAME-data:/var/lib/docker" --tmpfs /run --tmpfs /tmp \
      "$image" dockerd --host tcp://0.0.0.0:2375 --host unix:///run/docker.sock --tls=false \
      --cgroup-parent "$NAME" \
      --storage-driver "${SECOND_ENGINE_STORAGE:-overlay2}" \
      ${mtu:+--mtu "$mtu"} >/dev/null
    port=
    for _ in $(seq 1 150); do
      port=$(host_port || true)
      if [ -n "$port" ] && curl -fsS "http://$port/_ping" >/dev/null 2>&1; then break; fi
      running || break
      port=
      sleep 0.2
    done
    if [ -z "$port" ]; then
      echo "second-engine.sh: the engine did not answer; its log:" >&2
      docker logs --tail 40 "$NAME" >&2 || true
      exit 1
    fi
    t_engine=$((SECONDS - t0 - t_image))
    if [ "$images" = yes ]; then
      # shellcheck disable=SC2046
      load $(default_images)
    fi
    echo "second-engine.sh: image ${t_image} s, engine up ${t_engine} s, total $((SECONDS - t0)) s" >&2
    echo "DOCKER_HOST=tcp://$port"
    ;;
  env)
    running && [ -n "$(host_port)" ] || die "not running (start it: $0 start)"
    echo "DOCKER_HOST=tcp://$(host_port)"
    ;;
  load)
    shift
    running || die "not running (start it: $0 start)"
    load "$@"
    ;;
  stop)
    keep=no
    [ "${2:-}" = --keep-image ] && keep=yes
    # A graceful stop lets the inner dockerd stop its containers (their cgroups go with them).
    docker stop -t 20 "$NAME" >/dev/null 2>&1 || true
    docker rm -f -v "$NAME" "$NAME-build" >/dev/null 2>&1 || true
    # Without --privileged the inner containers' cgroup parent was made in the host's tree;
    # the empty directories left are removed where this user may (root).
    for d in /sys/fs/cgroup/*/"$NAME"; do
      [ -d "$d" ] && rmdir "$d" 2>/dev/null || true
    done
    docker volume rm "$NAME-data" >/dev/null 2>&1 || true
    docker network rm "$NAME-net" >/dev/null 2>&1 || true
    if [ "$keep" = no ]; then
      docker images -q --filter "label=$LABEL=image" | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true
      docker rmi "$REPO-base:local" >/dev/null 2>&1 || true
    fi
    left=$(docker ps -aq --filter "label=$LABEL"; docker volume ls -q --filter "label=$LABEL"; docker network ls -q --filter "label=$LABEL")
    [ -z "$left" ] || die "left behind: $left"
    ;;
  *) usage ;;
esac

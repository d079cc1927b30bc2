#!/usr/bin/env bash
# Starts and stops a Podman API service (`podman system service`) on a private socket, so
# flowerbox (and its Docker tests) can run against Podman with DOCKER_HOST.
#
#   scripts/podman-service.sh start    start the service; prints `DOCKER_HOST=unix://…/podman.sock`
#                                      (the socket lives in a fresh mktemp directory, mode 0700)
#   scripts/podman-service.sh stop DOCKER_HOST_OR_DIR
#                                      stop the service started there and remove its directory
#
# Typical use:   eval "export $(scripts/podman-service.sh start)"; …; scripts/podman-service.sh stop "$DOCKER_HOST"
#
# The service gets a containers.conf of its own (via CONTAINERS_CONF) with
# `default_ulimits = []`: on this machine kind `podman run` otherwise fails with
# `error setting rlimit type 6/7: operation not permitted`; and runc as the runtime where crun
# refuses the host's cgroup layout (below). Works as root (rootful Podman) and
# as an ordinary user (rootless Podman: needs uidmap, slirp4netns or passt, and subuid/subgid
# ranges for the user). The service stops only when asked: `--time=0` (no idle exit).
set -euo pipefail

usage() { echo "usage: $0 start | stop DOCKER_HOST_OR_DIR" >&2; exit 2; }
[ $# -ge 1 ] || usage

case $1 in
  start)
    [ $# -eq 1 ] || usage
    command -v podman >/dev/null || { echo "podman-service.sh: podman is not installed (apt-get install podman)" >&2; exit 1; }
    dir=$(mktemp -d "${TMPDIR:-/tmp}/flowerbox-podman.XXXXXX")
    chmod 0700 "$dir"
    printf '[containers]\ndefault_ulimits = []\n' >"$dir/containers.conf"

    # crun (Debian's default for Podman) refuses hosts whose cgroup v2 hierarchy has controllers
    # next to v1 ("cgroups in hybrid mode not supported"), as on this machine kind; runc
    # (installed with Docker) runs them. PODMAN_RUNTIME overrides.
    runtime=${PODMAN_RUNTIME:-}
    if [ -z "$runtime" ] && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ] && command -v runc >/dev/null; then
      runtime=runc
    fi
    if [ -n "$runtime" ]; then printf '[engine]\nruntime = "%s"\n' "$runtime" >>"$dir/containers.conf"; fi
    sock=$dir/podman.sock
    launch=(podman system service --time=0 "unix://$sock")
    # PODMAN_HIDE_INIT=1 (root only): the service runs in a mount namespace of its own where
    # Podman's init (catatonit, in /usr/libexec/podman) is hidden by an empty directory: a Podman
    # without catatonit, for the test that doctor fails there.
    if [ -n "${PODMAN_HIDE_INIT:-}" ]; then
      mkdir "$dir/empty"
      launch=(unshare -m --propagation private sh -c 'mount --bind "$1" /usr/libexec/podman && shift && exec "$@"' sh "$dir/empty" "${launch[@]}")
    fi
    # setsid: the service outlives this script and is not hit by the caller's Ctrl-C; its pid
    # is recorded for `stop`.
    CONTAINERS_CONF=$dir/containers.conf setsid "${launch[@]}" \
      </dev/null >"$dir/service.log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 100); do
      if [ -S "$sock" ] && curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
        echo "DOCKER_HOST=unix://$sock"
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then break; fi
      sleep 0.1
    done
    echo "podman-service.sh: the service did not answer on $sock; its log:" >&2
    cat "$dir/service.log" >&2 || true
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    rm -rf "$dir"
    exit 1
    ;;
  stop)
    [ $# -eq 2 ] || usage
    target=${2#unix://}
    target=${target%/podman.sock}
    # Only a directory this script made (its name, its pid file) is touched.
    case $(basename "$target") in flowerbox-podman.*) ;; *) echo "podman-service.sh: $2 is not a service this script started" >&2; exit 1 ;; esac
    [ -d "$target" ] || { echo "podman-service.sh: $target does not exist (stopped already?)" >&2; exit 1; }
    # Whoever started it stops it: another user can neither read its pid nor signal it, and
    # removing the directory alone would leave the service running.
    if [ ! -O "$target" ]; then
      owner=$(stat -c %U "$target" 2>/dev/null || echo "another user")
      echo "podman-service.sh: $target was started by $owner; stop it as $owner (e.g. sudo $0 stop $2), it is still running" >&2
      exit 1
    fi
    [ -f "$target/pid" ] || { echo "podman-service.sh: no pid file in $target" >&2; exit 1; }
    pid=$(cat "$target/pid")
    # The service leads its own process group (setsid): rootless Podman runs the real service in
    # a child inside its user namespace, so the whole group is stopped, not only the pid.
    alive() { kill -0 -- "-$pid" 2>/dev/null || kill -0 "$pid" 2>/dev/null; }
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive || break; sleep 0.1; done
    if alive; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
    for _ in $(seq 1 50); do alive || break; sleep 0.1; done
    if alive; then echo "podman-service.sh: the service (process group $pid) did not stop" >&2; exit 1; fi
    rm -rf "$target"
    ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# What building flowerbox, its demo and its tests need, installed or checked in one place
# (README "On a fresh machine"; used by scripts/demo.sh and .ci/run, so the package list has one
# source):
#
# 1. Debian packages (below, each with its reason), installed with apt-get when missing;
# 2. a Rust toolchain at least Cargo.toml's rust-version: the one on PATH or in ~/.cargo, else
#    Debian's rustc-web/cargo-web (bookworm-security carries a current one);
# 3. the Docker CLI and an engine this user may talk to (the socket's group, or root).
#
# It says what it installs and why, uses sudo when not root, and stops with one line starting
# with `install-deps:` when it cannot. Idempotent: a second run installs nothing.
#
# Usage: scripts/install-deps.sh [--no-rust] [--no-docker]
#   --no-rust     skip step 2 (nothing is built: the binaries are given)
#   --no-docker   skip step 3 (for builds only)
# Source it (`. scripts/install-deps.sh --`; the `--` keeps the caller's own arguments out) to
# get the toolchain on PATH in the calling shell.
set -euo pipefail

_fbx_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_fbx_docker=1 _fbx_rust=1
for _a in "$@"; do
  case "$_a" in
    --no-docker) _fbx_docker=0 ;;
    --no-rust) _fbx_rust=0 ;;
    --) break ;;
    *) echo "install-deps: 不认识的参数 $_a(只有 --no-rust、--no-docker)" >&2; exit 2 ;;
  esac
done

# Debian packages by name, each with the reason it is here.
FLOWERBOX_PACKAGES=(
  build-essential   # cc/ar for the C parts: bundled SQLite (rusqlite), libgit2 (git2), ring (rustls)
  pkg-config        # build scripts probe for system libraries with it
  git               # workspace/worktree tests, the --isolate checks, the demo's repository
  ca-certificates   # TLS roots: crates.io, HTTPS model endpoints
  debootstrap       # image/: the agent base image is built offline from Debian's mirror
  tmux              # terminal-level end-to-end checks drive the UI through tmux
  jq                # scripts/demo: reads the manifest
  sqlite3           # scripts/demo: reads the judges' evidence from runs/sessions.db
  curl              # scripts/demo and tests: probe the scripted model server
  procps            # tests: pgrep finds what a killed run left running (not in a minimal Debian)
  python3           # tests: the MCP fixture server as a host process (--sandbox host)
)

_fbx_die() { echo "install-deps: $*" >&2; exit 1; }
_fbx_say() { echo "install-deps: $*" >&2; }

_FBX_SUDO=()
if [ "$(id -u)" -ne 0 ]; then _FBX_SUDO=(sudo); fi
_fbx_apt_updated=0
_fbx_apt_install() {
  command -v apt-get >/dev/null 2>&1 ||
    _fbx_die "缺 $*,可这台机器没有 apt-get(不是 Debian/Ubuntu?):请自己装上再来"
  if [ "${#_FBX_SUDO[@]}" -gt 0 ] && ! command -v sudo >/dev/null 2>&1; then
    _fbx_die "缺 $*,要装得是 root,可这里没有 sudo:请用 root 跑 apt-get install $*"
  fi
  if [ "$_fbx_apt_updated" -eq 0 ]; then
    "${_FBX_SUDO[@]}" apt-get update -qq || _fbx_die "apt-get update 失败(见上)"
    _fbx_apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive "${_FBX_SUDO[@]}" apt-get install -y -qq --no-install-recommends "$@" ||
    _fbx_die "apt-get install $* 失败(见上)"
}

# -- 1. Debian packages -----------------------------------------------------------------------
_fbx_missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for _p in "${FLOWERBOX_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$_p" 2>/dev/null | grep -q "install ok installed" || _fbx_missing+=("$_p")
  done
else
  # Not Debian: check the commands these packages provide instead.
  for _c in cc pkg-config git debootstrap tmux jq sqlite3 curl; do
    command -v "$_c" >/dev/null 2>&1 || _fbx_missing+=("$_c")
  done
fi
if [ "${#_fbx_missing[@]}" -gt 0 ]; then
  _fbx_say "要装 Debian 包:${_fbx_missing[*]}(C 编译器给 SQLite/libgit2/ring,debootstrap 建 agent 镜像,tmux/jq/sqlite3/curl/procps/python3 给测试和演示)${_FBX_SUDO:+,用 sudo}"
  _fbx_apt_install "${_fbx_missing[@]}"
fi

# -- 2. Rust ------------------------------------------------------------------------------------
if [ "$_fbx_rust" -eq 1 ]; then
_fbx_need=$(sed -nE 's/^rust-version *= *"([0-9.]+)".*/\1/p' "$_fbx_root/Cargo.toml" | head -n1)
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
_fbx_rust_version() { rustc --version 2>/dev/null | awk '{print $2}' | sed 's/-.*//'; }
_fbx_new_enough() { [ "$(printf '%s\n%s\n' "$_fbx_need" "$1" | sort -V | head -n1)" = "$_fbx_need" ]; }
_fbx_have=
if command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1; then _fbx_have=$(_fbx_rust_version); fi
if [ -z "$_fbx_have" ] || ! _fbx_new_enough "$_fbx_have"; then
  if [ -n "$_fbx_have" ] && [ -x "$HOME/.cargo/bin/rustup" ]; then
    _fbx_die "Rust $_fbx_have 太旧(flowerbox 要 ≥ $_fbx_need):跑 rustup update"
  fi
  _fbx_say "要装 Debian 的 Rust 工具链 rustc-web cargo-web(flowerbox 要 Rust ≥ $_fbx_need${_fbx_have:+,现在是 $_fbx_have})"
  _fbx_apt_install rustc-web cargo-web
  hash -r
  _fbx_have=$(_fbx_rust_version)
  _fbx_new_enough "${_fbx_have:-0}" ||
    _fbx_die "Debian 给的 Rust 是 ${_fbx_have:-没有},flowerbox 要 ≥ $_fbx_need:打开 bookworm-security 源(它带新版 rustc-web)或用 rustup"
fi
_fbx_say "Rust $_fbx_have(要 ≥ $_fbx_need)"
fi

# -- 3. Docker ----------------------------------------------------------------------------------
if [ "$_fbx_docker" -eq 1 ]; then
  command -v docker >/dev/null 2>&1 ||
    _fbx_die "没有 docker 命令:装上 Docker(Debian 的 docker.io 包,或 docker-ce),每个 agent 都在自己的容器里跑"
  _fbx_sock=${DOCKER_HOST:-unix:///var/run/docker.sock}
  case "$_fbx_sock" in
    unix://*)
      _fbx_sock=${_fbx_sock#unix://}
      [ -S "$_fbx_sock" ] ||
        _fbx_die "没有 Docker 的 socket $_fbx_sock:引擎没装或没起来(sudo systemctl start docker)"
      if [ ! -r "$_fbx_sock" ] || [ ! -w "$_fbx_sock" ]; then
        _fbx_die "$(id -un) 没有权限用 $_fbx_sock:sudo usermod -aG $(stat -c %G "$_fbx_sock") $(id -un),重新登录后再来(或用 root)"
      fi
      ;;
  esac
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    _fbx_die "Docker 引擎不应答(docker version 失败,DOCKER_HOST=${DOCKER_HOST:-未设}):sudo systemctl start docker"
  _fbx_say "Docker 引擎 $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
fi

#!/usr/bin/env bash
# flowerbox's whole job, end to end, offline: README command 1.
#
# 1. builds flowerbox and scripted-model (debug, like the test suite: nothing is compiled twice);
# 2. checks the Docker engine and the agent image (`flowerbox doctor`; a missing image is built
#    by the run itself on first use, offline base included, with progress on stderr);
# 3. starts scripted-model with scripts/demo/scenario.json: the model's words are scripted,
#    nothing else is — every command the agents run really runs in their containers;
# 4. lays out a small C HTTP server that does not build (scripts/demo/project: two source files,
#    each with its own defect, plus one that only shows at run time) in a fresh git repository;
# 5. runs `flowerbox --isolate --probe-checks --judge-can-run --timeout 0 "…"` in it: clarify
#    (nobody answers, so the assumption lands in 未知与假设) → goal (5 items, 4 with a check,
#    one of them the project's own test of http_serve) → the coordinator dispatches two
#    workers in parallel, one file each, each in its own container and worktree → both branches
#    are integrated → a worker builds httpd and starts it in the background → flowerbox runs
#    the checks (two red) → the judge, in its own read-only container in the run's pod, runs
#    file, lsof and curl → NOT_YET (the response body really is cut short) → round 2 fixes it →
#    the checks are green, and a defect planted in a copy of a line the run wrote is caught by
#    the self-test (the probe) → ACHIEVED;
# 6. prints what the judge saw (its tool results, read back from runs/sessions.db; also written
#    to notes/判定证据.md), the manifest summary, where the notes and artifacts are, and checks
#    that no flowerbox container is left. Exit 0 only when all of that holds.
#
# Usage: scripts/demo.sh [DIR]
#   DIR                      where the demo project goes (created; default: a new
#                            ${TMPDIR:-/tmp}/flowerbox-demo.*)
#   FLOWERBOX_DEMO_BIN       the flowerbox command to run (default: the one built here)
#   FLOWERBOX_DEMO_MODEL_BIN the scripted-model binary (with FLOWERBOX_DEMO_BIN: nothing is built)
#   FLOWERBOX_DEMO_ISOLATE   1 (default) runs with --isolate; 0 lets the workers share the workspace
#   FLOWERBOX_DEMO_SANDBOX   --sandbox for doctor and the run (default: flowerbox's, docker);
#                            docker-remote for an engine that does not share this disk (with
#                            DOCKER_HOST naming it: a CI dind service, scripts/second-engine.sh)
#   FLOWERBOX_DEMO_RELEASE   1 builds and runs the release binaries instead
#   FLOWERBOX_DEMO_SCENARIO  another scenario for scripted-model (default scripts/demo/scenario.json;
#                            the run's milliseconds are written to DIR/took.ms for comparisons)
#   FLOWERBOX_DEMO_PROBE     1 (default) adds --probe-checks: after the green round flowerbox
#                            plants a defect in a copy and the goal's self-test must catch it;
#                            0 leaves it out
#   FLOWERBOX_DEMO_PROBE_EXPECT caught (default) or missed: what that probe must report (missed:
#                            a scenario whose checks are weak on purpose)
# Needs: Docker (an engine this user may use) and git; scripts/install-deps.sh installs or checks
# the rest first (Debian packages, Rust), with sudo when not root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

say() { printf '\n== %s\n' "$*"; }
fail() { printf '\ndemo 失败:%s\n' "$*" >&2; exit 1; }

# -- 0. what it needs: Debian packages, Rust, the Docker engine (installed or checked; one line
# and exit 1 when that cannot be done).
# With both binaries given nothing is built, so no Rust is needed.
deps_args=()
if [ -n "${FLOWERBOX_DEMO_BIN:-}" ] && [ -n "${FLOWERBOX_DEMO_MODEL_BIN:-}" ]; then deps_args=(--no-rust); fi
# shellcheck source=scripts/install-deps.sh
. "$root/scripts/install-deps.sh" "${deps_args[@]}" --

# The README's Usage runs `flowerbox`: a link in ~/.local/bin to the binary just built (a file
# there that is not such a link is left alone).
link_on_path() {
  local bin=$1 dir=$HOME/.local/bin
  mkdir -p "$dir"
  if [ -e "$dir/flowerbox" ] && [ ! -L "$dir/flowerbox" ]; then
    echo "  $dir/flowerbox 已经有了(不是链接),不动它"
    return
  fi
  ln -sfn "$bin" "$dir/flowerbox"
  echo "  $dir/flowerbox → $bin"
  case ":$PATH:" in
    *":$dir:"*) ;;
    *) echo "  注意:$dir 不在 PATH 里;加上它:export PATH=\"$dir:\$PATH\"(写进 ~/.profile)" ;;
  esac
}

isolate=${FLOWERBOX_DEMO_ISOLATE:-1}
sandbox_flag=()
if [ -n "${FLOWERBOX_DEMO_SANDBOX:-}" ]; then sandbox_flag=(--sandbox "$FLOWERBOX_DEMO_SANDBOX"); fi
profile=debug cargo_profile=()
if [ "${FLOWERBOX_DEMO_RELEASE:-0}" = 1 ]; then profile=release cargo_profile=(--release); fi

# -- 1. build ---------------------------------------------------------------------------------
target=${CARGO_TARGET_DIR:-$root/target}
fbx=${FLOWERBOX_DEMO_BIN:-$target/$profile/flowerbox}
model_bin=${FLOWERBOX_DEMO_MODEL_BIN:-$target/$profile/scripted-model}
if [ -n "${FLOWERBOX_DEMO_BIN:-}" ] && [ -n "${FLOWERBOX_DEMO_MODEL_BIN:-}" ]; then
  say "用现成的 $fbx 和 $model_bin(不构建)"
else
  say "构建 flowerbox 和 scripted-model ($profile;第一次要编译好几分钟)"
  cargo build --bins "${cargo_profile[@]}"
  link_on_path "$fbx"
fi

# -- 2. the project -----------------------------------------------------------------------------
if [ $# -ge 1 ]; then
  base=$1
  mkdir -p "$base"
  [ -z "$(ls -A "$base")" ] || fail "$base 不是空目录"
else
  base=$(mktemp -d "${TMPDIR:-/tmp}/flowerbox-demo.XXXXXX")
fi
base=$(cd "$base" && pwd -P)
ws=$base/httpd
home=$base/home
mkdir -p "$home" "$ws"
cp -R "$root/scripts/demo/project/." "$ws/"
git -C "$ws" init -q -b main
git -C "$ws" -c user.name=demo -c user.email=demo@flowerbox.invalid add -A
git -C "$ws" -c user.name=demo -c user.email=demo@flowerbox.invalid commit -q -m "httpd: 还编译不过"
if [ "$isolate" = 1 ]; then
  wb=$base/.flower-httpd
  iso_flag=(--isolate)
else
  wb=$ws/.flower
  iso_flag=()
fi

# The run's environment: only what it needs. A temporary HOME keeps the user's own credentials
# and config out; the key is fake, the model a priced one (so the cost is real arithmetic).
run_env=(env -i "PATH=$PATH" "HOME=$home" "LANG=C.UTF-8" "FLOWER_NO_PROBE=1"
  "ANTHROPIC_API_KEY=sk-ant-demo-not-a-real-key" "ANTHROPIC_MODEL=claude-sonnet-4-5")
for v in DOCKER_HOST DOCKER_CONTEXT DOCKER_CONFIG FLOWERBOX_IMAGE RUST_LOG; do
  if [ -n "${!v:-}" ]; then run_env+=("$v=${!v}"); fi
done

# -- 3. engine and image ------------------------------------------------------------------------
say "Docker 引擎和 agent 镜像 (flowerbox doctor)"
doctor_out=$(cd "$ws" && "${run_env[@]}" ANTHROPIC_BASE_URL=http://127.0.0.1:9 "$fbx" "${sandbox_flag[@]}" doctor 2>&1) ||
  { echo "$doctor_out"; fail "flowerbox doctor 有检查没通过(见上);演示需要能用的 Docker 引擎"; }
echo "$doctor_out"
# No agent image and no base to build it from (no registry's debian:bookworm-slim): the run
# builds the base with debootstrap, as root, through `sudo -n`. Ask for the password now.
if [ "$(id -u)" -ne 0 ] && grep -q debootstrap <<<"$doctor_out" && ! sudo -n true 2>/dev/null; then
  echo "  第一次建 agent 镜像:引擎上没有底子镜像,要用 debootstrap 从 Debian 镜像站建,得有 root(sudo)"
  sudo -v || fail "拿不到 sudo:先用 root 跑一次 sudo bash image/build-base.sh --import <doctor 说的底子镜像名>"
fi

# -- 4. the scripted model ----------------------------------------------------------------------
say "scripted-model(模型的话是写好的,命令都真的跑)"
sed "s|@WB@|$wb|g" "${FLOWERBOX_DEMO_SCENARIO:-$root/scripts/demo/scenario.json}" >"$base/scenario.json"
"$model_bin" --scenario "$base/scenario.json" --record "$base/requests.jsonl" >"$base/model.out" 2>"$base/model.err" &
model_pid=$!
watch_pid=
cleanup() {
  kill "$model_pid" 2>/dev/null || true
  if [ -n "$watch_pid" ]; then kill "$watch_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
url=
for _ in $(seq 100); do
  url=$(head -n 1 "$base/model.out" 2>/dev/null || true)
  [ -n "$url" ] && break
  kill -0 "$model_pid" 2>/dev/null || fail "scripted-model 没起来:$(cat "$base/model.err")"
  sleep 0.1
done
[ -n "$url" ] || fail "scripted-model 10 秒内没报地址"
echo "$url"

# Every container the run creates and removes, as the engine reports it (shown afterwards).
# (Podman reports a container's removal as `remove`, Docker as `destroy`.)
docker events --filter type=container --filter event=create --filter event=destroy --filter event=remove \
  --filter "label=flowerbox.workspace=$ws" \
  --format '{{.Action}}	{{index .Actor.Attributes "flowerbox.agent"}}	{{.Actor.Attributes.name}}' \
  >"$base/containers.events" 2>/dev/null &
watch_pid=$!
sleep 0.5

probe_flag=()
if [ "${FLOWERBOX_DEMO_PROBE:-1}" = 1 ]; then probe_flag=(--probe-checks); fi

# -- 5. the run ---------------------------------------------------------------------------------
ask="把这个 C 写的 HTTP 服务器修到能编译、能跑:make 出 httpd,后台起在 8080 端口,访问它返回 hello from flowerbox。"
say "flowerbox ${sandbox_flag[*]} ${iso_flag[*]} ${probe_flag[*]} --judge-can-run --timeout 0 \"$ask\""
echo "(在 $ws)"
started=$(date +%s%N)
set +e
(cd "$ws" && "${run_env[@]}" "ANTHROPIC_BASE_URL=$url" \
  "$fbx" "${sandbox_flag[@]}" "${iso_flag[@]}" "${probe_flag[@]}" --judge-can-run --timeout 0 "$ask" </dev/null)
rc=$?
set -e
took_ms=$((($(date +%s%N) - started) / 1000000))
took=$((took_ms / 1000)).$((took_ms % 1000 / 100))
# The run's wall clock alone (what scripts/bench.sh-style comparisons read).
echo "$took_ms" >"$base/took.ms"
# The engine's last events (Podman's come later than Docker's): until every create has its
# removal, at most 5 s.
for _ in $(seq 50); do
  sleep 0.1
  [ "$(grep -c '^create' "$base/containers.events" || true)" = "$(grep -cE '^(destroy|remove)' "$base/containers.events" || true)" ] && break
done
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
watch_pid=
[ "$rc" -eq 0 ] || fail "flowerbox 退出码 $rc(运行记录在 $ws/runs/)"

# -- 6. what happened ---------------------------------------------------------------------------
expect_probe=
if [ ${#probe_flag[@]} -gt 0 ]; then expect_probe=${FLOWERBOX_DEMO_PROBE_EXPECT:-caught}; fi
"$root/scripts/demo/report.sh" "$base" "$ws" "$wb" "$took" "$expect_probe"

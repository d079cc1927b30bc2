#!/usr/bin/env bash
# Kill/signal soak (issue 26 §1): random kill -9, SIGTERM and SIGHUP moments over an `--isolate`
# job whose two workers commit as they go (scripted model, real engine, real git), then a second
# start over what each stop left. Per trial and in total it reports:
#
#   made       commits the workers made (each logged in the workbench right after it succeeded)
#   lost       logged commits no branch of the repository holds after the second start
#   inflight   workers the stop caught with work not in main (worktree kept with uncommitted
#              files, commits on its branch or in its own store not merged)
#   handed     of those, the ones the second start named ("上次被打断的 worker-N …")
#   silent     in-flight workers the second start never named
#   left       files still uncommitted in kept worktrees after the second start
#   exit       the first run's exit status (137 kill -9, 143 SIGTERM, 129 SIGHUP) and the
#              second's (0)
#
# Exit 0 when no commit was lost, no worker was silent, every second start exited 0, every
# repository passed `git fsck` and no container was left; else 1.
#
# Usage: scripts/soak-signals.sh [TRIALS]     (default 50; or SOAK_TRIALS)
#   SOAK_SEED   seed of $RANDOM (default: the time), printed so a run can be repeated
#   SOAK_DIR    where the trials go (default: a new ${TMPDIR:-/tmp}/flowerbox-soak.*; removed at
#               the end unless SOAK_KEEP=1 or a trial failed)
#   FLOWERBOX_BIN / SCRIPTED_MODEL_BIN   binaries (default: target/debug, built when missing)
# Needs: Docker (an engine this user may use, with the agent image or the means to build it), git.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trials=${1:-${SOAK_TRIALS:-50}}
seed=${SOAK_SEED:-$(date +%s)}
RANDOM=$seed
target=${CARGO_TARGET_DIR:-$root/target}
fbx=${FLOWERBOX_BIN:-$target/debug/flowerbox}
model_bin=${SCRIPTED_MODEL_BIN:-$target/debug/scripted-model}
if [ ! -x "$fbx" ] || [ ! -x "$model_bin" ]; then
  (cd "$root" && cargo build --bins)
fi
base=${SOAK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flowerbox-soak.XXXXXX")}
mkdir -p "$base"
base=$(cd "$base" && pwd -P)
home=$base/home
mkdir -p "$home"
echo "soak: $trials trials, seed $seed, in $base"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo "soak: stopped by a failing command at line $LINENO" >&2' ERR

# One scripted model per start, shared by every trial (it answers by turn, not by history).
brief='## 目标\n每个执行者提交 6 个文件\n\n## 验收标准\n- 文件都在\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n'
report='## 结论\n做完了\n## 依据\ngit log\n## 产出\n见分支\n## 未验证\n无'
worker_cmd() { # $1 worker name: six files, one commit each, logged; one file left uncommitted
  printf 'for i in 1 2 3 4 5 6; do echo $i > %s-$i.txt && git add %s-$i.txt && git commit -qm \\"soak %s-$i $SOAK_TRIAL\\" && echo %s-$i >> \\"$SOAK_LOG\\"; sleep 0.3; done; echo tail > %s-left.txt' "$1" "$1" "$1" "$1" "$1"
}
# $SOAK_TRIAL / $SOAK_LOG are spelled out per trial: the command is literal in the scenario, so
# the trial's own values go in through a file the worker sources from the workbench.
w1=$(worker_cmd w1 | sed 's/\$SOAK_TRIAL/$(cat ..\/..\/..\/.flower-proj\/trial)/; s/\$SOAK_LOG/..\/..\/..\/.flower-proj\/commits.log/')
w2=$(worker_cmd w2 | sed 's/\$SOAK_TRIAL/$(cat ..\/..\/..\/.flower-proj\/trial)/; s/\$SOAK_LOG/..\/..\/..\/.flower-proj\/commits.log/')
cat >"$base/run1.json" <<EOF
{"agents": [
 {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": "$brief"}]}]},
 {"role": "coordinator", "turns": [
   {"content": [
     {"type": "tool_use", "name": "Agent", "input": {"description": "w1", "prompt": "提交 w1 文件", "subagent_type": "coder"}},
     {"type": "tool_use", "name": "Agent", "input": {"description": "w2", "prompt": "提交 w2 文件", "subagent_type": "coder"}}]},
   {"content": [{"type": "text", "text": "两个执行者都做完了。"}]},
   {"content": [{"type": "text", "text": "两个执行者都做完了。"}]}]},
 {"role": "worker", "agent": "worker-1", "turns": [
   {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "$w1"}}]},
   {"content": [{"type": "text", "text": "$report"}]}]},
 {"role": "worker", "agent": "worker-2", "turns": [
   {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "$w2"}}]},
   {"content": [{"type": "text", "text": "$report"}]}]}]}
EOF
cat >"$base/run2.json" <<EOF
{"agents": [
 {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": "$brief"}]}]},
 {"role": "coordinator", "turns": [
   {"content": [{"type": "text", "text": "看到了。"}]},
   {"content": [{"type": "text", "text": "看到了。"}]},
   {"content": [{"type": "text", "text": "看到了。"}]},
   {"content": [{"type": "text", "text": "看到了。"}]}]}]}
EOF
model_url() { # $1 scenario → prints the URL its model announced
  for _ in $(seq 100); do
    if [ -s "$1.out" ]; then head -n 1 "$1.out"; return; fi
    sleep 0.1
  done
  echo "scripted-model did not start: $(cat "$1.err")" >&2
  exit 1
}
for s in run1 run2; do
  "$model_bin" --scenario "$base/$s.json" >"$base/$s.json.out" 2>"$base/$s.json.err" &
  pids+=($!)
done
url1=$(model_url "$base/run1.json")
url2=$(model_url "$base/run2.json")

run_env=(env -i "PATH=$PATH" "HOME=$home" "LANG=C.UTF-8" "FLOWER_NO_PROBE=1"
  "ANTHROPIC_API_KEY=sk-ant-soak" "ANTHROPIC_MODEL=claude-sonnet-4-5")
for v in DOCKER_HOST DOCKER_CONTEXT DOCKER_CONFIG FLOWERBOX_IMAGE; do
  if [ -n "${!v:-}" ]; then run_env+=("$v=${!v}"); fi
done
go() { # $1 workspace, $2 url; run in a subshell or in the background (it execs flowerbox)
  cd "$1" && exec "${run_env[@]}" "ANTHROPIC_BASE_URL=$2" "$fbx" --sandbox docker go --isolate \
    --no-goal --timeout 0 "每个执行者提交 6 个文件" </dev/null
}

# Workers with work that is not in main: a kept worktree with uncommitted files or unmerged
# commits (on its branch or in its own store). Prints their names (worker-N).
in_flight() { # $1 workspace
  local ws=$1 common wt name br tip state
  common=$(git -C "$ws" rev-parse --git-common-dir)
  case $common in /*) ;; *) common=$ws/$common ;; esac
  git -C "$ws" worktree list --porcelain | sed -n 's/^worktree //p' | while read -r wt; do
    [ "$wt" = "$ws" ] && continue
    name=$(basename "$(git -C "$wt" rev-parse --git-dir 2>/dev/null)" 2>/dev/null) || continue
    case $name in flower-*) ;; *) continue ;; esac
    br=$(git -C "$wt" symbolic-ref -q --short HEAD 2>/dev/null || true)
    local busy=0
    [ -n "$(git -C "$wt" status --porcelain 2>/dev/null)" ] && busy=1
    if [ -n "$br" ] && ! git -C "$ws" merge-base --is-ancestor "$br" main 2>/dev/null; then busy=1; fi
    state=$common/flowerbox/worktrees/$name/refs/${br##*/}
    if [ -f "$state" ]; then
      tip=$(cat "$state")
      git -C "$ws" merge-base --is-ancestor "$tip" main 2>/dev/null || busy=1
    fi
    if [ "$busy" = 1 ]; then echo "${br##*/}"; fi
  done
  return 0
}

tot_made=0 tot_lost=0 tot_inflight=0 tot_handed=0 tot_silent=0 tot_left=0 bad=0
declare -A by_sig=()
printf '%-5s %-5s %6s %5s %5s %5s %9s %7s %7s %5s %s\n' trial sig at_s exit1 exit2 made lost inflight handed silent left
for t in $(seq "$trials"); do
  dir=$base/t$t
  ws=$dir/proj
  mkdir -p "$ws" "$dir/.flower-proj"
  git -C "$ws" init -q -b main
  git -C "$ws" config user.name Soak
  git -C "$ws" config user.email soak@flowerbox.invalid
  echo proj >"$ws/README.md"
  echo 'runs/' >"$ws/.gitignore"
  git -C "$ws" add -A
  git -C "$ws" commit -qm init
  echo "t$t" >"$dir/.flower-proj/trial"
  : >"$dir/.flower-proj/commits.log"
  case $((RANDOM % 3)) in 0) sig=KILL ;; 1) sig=TERM ;; *) sig=HUP ;; esac
  # A third of the moments anywhere in the first 6 s (pod, clarify, dispatch, worktrees), the
  # rest within 2.5 s of the first commit (the workers mid-commit).
  if [ $((RANDOM % 3)) = 0 ]; then anchor=start; delay_ms=$((RANDOM % 6000)); else anchor=commit; delay_ms=$((RANDOM % 2500)); fi
  go "$ws" "$url1" >"$dir/run1.out" 2>"$dir/run1.err" &
  pid=$!
  begun=$(date +%s%N)
  if [ "$anchor" = commit ]; then
    for _ in $(seq 1200); do
      [ -s "$dir/.flower-proj/commits.log" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  at_ms=$((($(date +%s%N) - begun) / 1000000))
  kill -s "$sig" "$pid" 2>/dev/null || true
  exit1=0
  wait "$pid" || exit1=$?
  inflight=$(in_flight "$ws" | sort -u | tr '\n' ' ')
  (go "$ws" "$url2") >"$dir/run2.out" 2>"$dir/run2.err" && exit2=0 || exit2=$?
  made=$(wc -l <"$dir/.flower-proj/commits.log")
  all=$(git -C "$ws" log --all --format=%s)
  lost=0
  while read -r c; do
    [ -z "$c" ] && continue
    grep -qxF "soak $c t$t" <<<"$all" || lost=$((lost + 1))
  done <"$dir/.flower-proj/commits.log"
  handed=0 silent=0 n_inflight=0
  for w in $inflight; do
    n_inflight=$((n_inflight + 1))
    if grep -q "上次被打断的 $w" "$dir/run2.out"; then handed=$((handed + 1)); else silent=$((silent + 1)); fi
  done
  left=0
  while read -r wt; do
    [ "$wt" = "$ws" ] && continue
    left=$((left + $(git -C "$wt" status --porcelain 2>/dev/null | wc -l)))
  done < <(git -C "$ws" worktree list --porcelain | sed -n 's/^worktree //p')
  fsck=ok
  git -C "$ws" fsck --strict >/dev/null 2>&1 || fsck=BAD
  containers=$(docker ps -aq --filter "label=flowerbox.workspace=$ws" | wc -l)
  printf '%-5s %-5s %6s %5s %5s %5s %9s %7s %7s %5s %s\n' "$t" "$sig" "$(printf '%d.%d' $((at_ms / 1000)) $((at_ms % 1000 / 100)))" \
    "$exit1" "$exit2" "$made" "$lost" "$n_inflight" "$handed" "$silent" "$left${fsck/ok/}$([ "$containers" = 0 ] || echo " containers=$containers")"
  tot_made=$((tot_made + made)) tot_lost=$((tot_lost + lost)) tot_inflight=$((tot_inflight + n_inflight))
  tot_handed=$((tot_handed + handed)) tot_silent=$((tot_silent + silent)) tot_left=$((tot_left + left))
  by_sig[$sig]="${by_sig[$sig]:-} $exit1"
  if [ "$lost" != 0 ] || [ "$silent" != 0 ] || [ "$exit2" != 0 ] || [ "$fsck" != ok ] || [ "$containers" != 0 ]; then
    bad=$((bad + 1))
    echo "  trial $t: see $dir"
  else
    rm -rf "$dir"
  fi
done
echo
echo "soak: $trials trials (seed $seed): commits made $tot_made, lost $tot_lost; workers in flight $tot_inflight, handed back $tot_handed, silent $tot_silent; files left uncommitted $tot_left; failed trials $bad"
for s in "${!by_sig[@]}"; do
  echo "  SIG$s first-run exit statuses:$(tr ' ' '\n' <<<"${by_sig[$s]}" | grep -v '^$' | sort | uniq -c | awk '{printf " %s×%s", $2, $1}')"
done
if [ "$bad" = 0 ] && [ "${SOAK_KEEP:-0}" != 1 ]; then rm -rf "$base"; fi
[ "$bad" = 0 ]

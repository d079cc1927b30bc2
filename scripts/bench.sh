#!/usr/bin/env bash
# flowerbox benchmarks (issue 10): every figure is a median over repeated runs with its spread
# (p25–p75 in the table; min/max too in the JSON) and, where it compares, a baseline measured
# in the same run and the ratio of the medians. Prints one table; --json FILE writes it all.
#
#   1  container cold start → first exec result       vs docker run --rm IMAGE true
#   1d container cold start, --egress open             vs --egress none; --egress proxy (1e)
#   2  Bash round trip `true` in a warm container     vs sh -c true on the host; vs a Docker exec (2a);
#      vs bash -c true on the host (2c: the same shell on both sides)
#   3  8 scripted workers in parallel (wall clock)    vs 1 worker (ratio; ideal 1.0)
#   4  resume 10,000 messages from sessions.db        vs the raw load; RSS (4b), warm (4c)
#   5  runner peak RSS during scripts/demo.sh         vs flowerbox --help; per extra worker (5b)
#   6  spill (6) and manifest write (6b) per call     vs plain writes; sessions.db append (6c)
#   7  Read (7) / Write (7b) file tool per call        vs fs::read / fs::write; Grep (7c)
#   8  MCP stdio server start in the agent's container vs a Bash round trip; MCP call (8b)
#   9  once, one Bash call, model thinking 1.5 s a turn: --sandbox docker vs --sandbox host;
#      9c: the same docker run until its last container and network are gone (the run's end
#      leaves their removal to a detached cleanup: 9 is what the user waits for). Every run of
#      9-13 starts once the previous run's containers and networks are gone (untimed)
#  10  whole go run, 8 workers `sleep 2` at once     vs 1 worker (ratio; ideal 1.0; --max-workers 8);
#      10e: the engine alone, 8 agent-shaped containers vs 1 (create, start, one exec, kill),
#      interleaved with 10: the floor under 10's ratio;
#      10s: the coordinator's dispatching message streamed at 60 ms an event, on both sides;
#      10d: as 10 under the machine's default limit (2 × cores: waves on a small machine)
#  11  first once --resume of 10,000 messages, -T     vs a fresh once; 11: refused as too long
#      (a handoff at once), 11f: lighter results, accepted (every spill file written)
#  12  scale curve: go with N = 1, cores, 8, 16, 32 workers `sleep 2` at once: wall clock (12) and
#      runner peak RSS (12b) at 32 vs 1; per-worker overhead, ms (12c) and MiB (12d)
#  13  once, text only (default tools): --sandbox docker vs --sandbox host (no container at all)
#  14  Read/Write/Grep/identity on an engine without the caller's disk (14-14d) vs the same on
#      this machine's disk; the repository into a volume (14e); the demo's run with
#      --sandbox docker-remote vs the local engine (14f). Only with FLOWERBOX_TEST_SECOND_ENGINE
#      set (`scripts/second-engine.sh start` prints the engine)
#
# Usage: scripts/bench.sh [--release] [--base BIN] [--json FILE] [--repeat N] [--roundtrips N]
#                         [--quick]
#   --release       release builds of the examples and binaries (issue 17's figures are
#                   release figures); default: debug builds (dependencies at opt-level 1)
#   --base BIN      also measure figures 2 and 9-13 with another flowerbox binary (the build
#                   before a change; figure 2: its exec service), interleaved in the same run:
#                   rows `2 base`, `9 base`, `10 base`, ...
#   --repeat N      repeats of the Docker and agent-run figures (default 5; RSS runs: N/2;
#                   figures 9-13 and 14f: at least 3)
#   --roundtrips N  Bash round trips of figure 2 (default 50)
#   --quick         --repeat 2 --roundtrips 20, fewer microbenchmark calls (about a minute)
# Needs the Docker engine (builds the agent image on first use), and jq + sqlite3 for the demo
# of figure 5. About ten minutes with the defaults (figures 9-13 are whole runs).
set -euo pipefail
cd "$(dirname "$0")/.."

json="" repeat=5 roundtrips=50 calls=300 profile=() base=()
while [ $# -gt 0 ]; do
  case "$1" in
    --release) profile=(--release); shift ;;
    --base) base=(--base "$(realpath "$2")"); shift 2 ;;
    --json) json=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --roundtrips) roundtrips=$2; shift 2 ;;
    --quick) repeat=2 roundtrips=20 calls=100; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
rss_repeat=$(( repeat / 2 > 0 ? repeat / 2 : 1 ))
cli_repeat=$(( repeat > 3 ? repeat : 3 ))

parts=$(mktemp -d "${TMPDIR:-/tmp}/flowerbox-bench.XXXXXX")
trap 'rm -rf "$parts"' EXIT

echo "== building (${profile[*]:-debug})" >&2
cargo build --quiet "${profile[@]}" --bins --example sandbox_bench --example runtime_bench \
  --example store_bench --example tools_bench --example mcp_bench --example cli_bench \
  --example bench_report --example remote_bench --example remote_demo_bench
run() { cargo run --quiet "${profile[@]}" --example "$@"; }

start=$(date +%s)
echo "== 1, 2: sandbox (Docker engine)" >&2
run sandbox_bench -- --repeat "$repeat" --roundtrips "$roundtrips" "${base[@]}" \
  --json "$parts/1-sandbox.json" >&2
echo "== 3, 5: agent runs (Runtime, Docker, scripted model)" >&2
run runtime_bench -- --repeat "$repeat" --rss-repeat "$rss_repeat" \
  --json "$parts/2-runtime.json" >&2
echo "== 4, 6: sessions.db, spill, manifest" >&2
run store_bench -- --repeat "$repeat" --calls "$calls" \
  --json "$parts/3-store.json" >&2

echo
echo "flowerbox benchmarks: medians of $repeat runs ($rss_repeat for 5), $(nproc) CPUs, $(( $(date +%s) - start )) s"
echo "== 7: file tools (race-free resolution)" >&2
run tools_bench -- --calls "$calls" --json "$parts/4-tools.json" >&2
echo "== 8: project MCP servers (Docker engine)" >&2
run mcp_bench -- --repeat "$repeat" --json "$parts/5-mcp.json" >&2
echo "== 9-13: whole runs of the flowerbox binary (issues 17, 32)" >&2
run cli_bench -- --repeat "$cli_repeat" "${base[@]}" --json "$parts/6-cli.json" >&2
report=("$parts"/1-sandbox.json "$parts"/2-runtime.json "$parts"/3-store.json "$parts"/4-tools.json
  "$parts"/5-mcp.json "$parts"/6-cli.json)
if [ -n "${FLOWERBOX_TEST_SECOND_ENGINE:-}" ]; then
  echo "== 14: an engine without the caller's disk ($FLOWERBOX_TEST_SECOND_ENGINE)" >&2
  run remote_bench -- --engine "$FLOWERBOX_TEST_SECOND_ENGINE" --calls "$calls" \
    --json "$parts/7-remote.json" >&2
  run remote_demo_bench -- --engine "$FLOWERBOX_TEST_SECOND_ENGINE" --repeat "$cli_repeat" \
    --json "$parts/8-remote-demo.json" >&2
  report+=("$parts/7-remote.json" "$parts/8-remote-demo.json")
fi
if [ -n "$json" ]; then
  case "$json" in /*) ;; *) json="$PWD/$json" ;; esac
  run bench_report -- --json "$json" "${report[@]}"
else
  run bench_report -- "${report[@]}"
fi

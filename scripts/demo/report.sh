#!/usr/bin/env bash
# What the demo run did, read back from what it left on disk — never from the scenario:
# the judges' commands and the outputs they really got (runs/sessions.db), the verdicts and the
# books (runs/manifest.json), the workers' overlap in time, the git history of the integrations,
# the notes and artifacts, and whether any flowerbox container is left. Writes the judges'
# evidence to notes/判定证据.md. Exits non-zero, saying why, when anything the demo promises
# does not hold.
#
# Usage: scripts/demo/report.sh BASE WORKSPACE WORKBENCH SECONDS [PROBE]   (called by scripts/demo.sh)
#   PROBE caught or missed: the run had --probe-checks, and what the probe of the ACHIEVED
#   round must report (caught: the goal's self-test runs the code the run wrote).
set -euo pipefail
base=$1 ws=$2 wb=$3 took=$4 expect_probe=${5:-}
db=$ws/runs/sessions.db
manifest=$ws/runs/manifest.json
problems=()
problem() { problems+=("$*"); }
say() { printf '\n== %s\n' "$*"; }
sql() { sqlite3 -batch -noheader "$db" "$@"; }
q() { printf "'%s'" "${1//\'/\'\'}"; }

[ -f "$db" ] && [ -f "$manifest" ] || { echo "demo 失败:$ws/runs/ 里没有 sessions.db 或 manifest.json" >&2; exit 1; }

# flowerbox's sanitiser (runner/shown/clean.rs) in jq, for what this script prints and writes
# to notes/: an escape sequence becomes one ␛ (a colour code nothing), other controls their
# control picture, C1/bidi/invisible characters <U+XXXX>; \r\n a newline.
clean_jq='
def hex4: [(. / 4096 | floor) % 16, (. / 256 | floor) % 16, (. / 16 | floor) % 16, . % 16]
  | map("0123456789ABCDEF"[.:.+1]) | add;
def clean:
  gsub("\r\n"; "\n")
  | gsub("\u001b\\[[0-9;:]*m"; "")
  | gsub("\u001b(\\[[0-?]*[ -/]*[@-~]|[\\]PX^_][^\u0007\u001b\n]*(\u0007|\u001b\\\\)|[ -/]+[0-~]|[0-~])"; "␛")
  | gsub("(?<c>[\u0000-\u0008\u000b-\u001f\u007f])";
      [(.c | explode[0]) + (if .c == "\u007f" then 9122 else 9216 end)] | implode)
  | gsub("(?<c>[\u0080-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb])";
      "<U+" + (.c | explode[0] | hex4) + ">");
'

# The Bash calls of one session with the output each got: "$ command" then the output, indented.
evidence() {
  sql "SELECT payload FROM entries WHERE session_id = $(q "$1") AND kind = 'message' ORDER BY seq" |
    jq -rs "$clean_jq"'
      (map(select(.role == "user") | .content[] | select(.type == "tool_result")
           | {key: .tool_use_id, value: .content}) | from_entries) as $out
      | .[] | select(.role == "assistant") | .content[]
      | select(.type == "tool_use" and .name == "Bash")
      | "$ \(.input.command | clean)\n\(($out[.id] // "(没有结果)") | clean | split("\n") | map("    " + .) | join("\n"))"'
}

# The conclusion line of a verdict text.
conclusion() { awk '/^#+ *结论/{f=1; next} f && NF {print $1; exit}'; }

run_id=$(jq -r 'map(select(.step == "干活")) | last | .run // empty' "$manifest")
[ -n "$run_id" ] || { echo "demo 失败:清单里没有「干活」这一步" >&2; exit 1; }
rows=$(jq --arg r "$run_id" 'map(select(.run == $r))' "$manifest")
judge_steps=$(jq -r 'map(select(.step | startswith("干活·判定#"))) | .[].step' <<<"$rows")

# -- the judges' evidence -----------------------------------------------------------------------
say "判定者看到的(它在自己的只读容器里跑的命令和真实输出,取自 runs/sessions.db)"
evidence_md="# 判定证据

flowerbox 演示(scripts/demo.sh)从 runs/sessions.db 里取出的判定会话:判定者在自己的只读容器里
跑的每条命令,和它真正拿到的输出。运行 $run_id。
"
last_verdict=
n=0
# The checks the goal gives its items (`检查: `…``): flowerbox must run every one each round.
want_checks=$(grep -c '检查: `' "$wb/notes/目标.md" 2>/dev/null || true)
for step in $judge_steps; do
  n=$((n + 1))
  sid=$(sql "SELECT id FROM sessions WHERE step = $(q "$step") AND run = $(q "$run_id") ORDER BY created_at DESC LIMIT 1")
  verdict=$(jq -r --arg s "$step" "$clean_jq"'map(select(.step == $s)) | last | .text // "" | clean' <<<"$rows" | conclusion)
  seen=$(evidence "$sid")
  # The checks flowerbox ran itself before this judge (issue 27), from the judge's row.
  gates=$(jq -r --arg s "$step" 'map(select(.step == $s)) | last | .checks // empty
    | "检查 \(.passed)/\(.total) 通过,现场 \((.identity // "读不全")[:12])"
      + (if (.failed | length) > 0 then ",没过:\(.failed | join("、"))" else "" end)
      + (if .overruled then ",判定者原话 \(.overruled) 被否决" else "" end)' <<<"$rows")
  # The probe of a green round (--probe-checks): the defect planted in a copy, and who caught it.
  probe=$(jq -r --arg s "$step" 'map(select(.step == $s)) | last | .checks.probe // empty
    | "探针 \(.outcome):\(.mutation // "没下手")"
      + (if (.caught_by | length) > 0 then ",被 \(.caught_by | join("、")) 抓到" else "" end)
      + "(\(.millis) ms)"' <<<"$rows")
  [ -n "$probe" ] && gates+=" · $probe"
  printf '\n[%s] 结论 %s · %s\n%s\n' "$step" "${verdict:-?}" "${gates:-没有检查}" "$seen"
  evidence_md+="
## $step:$verdict

${gates:-没有检查}

\`\`\`text
$seen
\`\`\`
"
  passed=$(jq -r --arg s "$step" 'map(select(.step == $s)) | last | .checks | "\(.passed // 0) \(.total // 0)"' <<<"$rows")
  read -r ok total <<<"$passed"
  [ "$total" -ge "${want_checks:-0}" ] || problem "$step:flowerbox 只跑了 $total 条检查(目标里有 $want_checks 条)"
  case "$verdict" in
    NOT_YET) [ "$total" -eq 0 ] || [ "$ok" -lt "$total" ] || problem "$step 判 NOT_YET,可检查全过了($ok/$total)" ;;
    ACHIEVED) [ "$ok" -eq "$total" ] || problem "$step 判 ACHIEVED,可检查只过了 $ok/$total" ;;
  esac
  # Probed: what the green round's probe must say (caught with the demo's goal).
  if [ -n "$expect_probe" ] && [ "$verdict" = ACHIEVED ]; then
    grep -q "^探针 $expect_probe:" <<<"${probe:-}" || problem "$step:加了 --probe-checks,探针应当是 $expect_probe,实际:${probe:-没有探针}"
  fi
  # What the verdict says must be what the commands showed (the model's words are scripted;
  # this checks them against the real outputs).
  grep -q 'ELF 64-bit' <<<"$seen" || problem "$step:file 没看到 ELF 64-bit 可执行文件"
  grep -Eq 'httpd .*TCP \*:8080 \(LISTEN\)' <<<"$seen" || problem "$step:lsof 没看到 httpd 在 *:8080 LISTEN"
  case "$verdict" in
    NOT_YET)
      grep -q 'Content-Length: 8' <<<"$seen" && ! grep -q 'hello from flowerbox' <<<"$seen" ||
        problem "$step 判 NOT_YET 说正文被截断,可 curl 的输出不是截断的样子" ;;
    ACHIEVED)
      grep -q 'Content-Length: 21' <<<"$seen" && grep -q '^    hello from flowerbox' <<<"$seen" ||
        problem "$step 判 ACHIEVED,可 curl 没拿到完整的 hello from flowerbox" ;;
  esac
  last_verdict=$verdict
done
[ "$n" -ge 2 ] || problem "只判定了 $n 轮(应当先 NOT_YET 再 ACHIEVED)"
[ "$last_verdict" = ACHIEVED ] || problem "最后的结论是 ${last_verdict:-无},不是 ACHIEVED"
printf '%s' "$evidence_md" >"$wb/notes/判定证据.md"

# -- parallel workers, containers, worktrees ----------------------------------------------------
say "两个执行者同时跑,各在自己的 worktree 里"
work_sid=$(jq -r 'map(select(.step == "干活")) | last | .session_id' <<<"$rows")
workers=$(sql "SELECT s.id, s.agent, MIN(e.created_at), MAX(e.created_at) FROM sessions s JOIN entries e ON e.session_id = s.id
               WHERE s.parent = $(q "$work_sid") AND s.role = 'worker' GROUP BY s.id ORDER BY s.created_at")
places=()
while IFS='|' read -r sid agent from to; do
  # Where it worked: the fixing workers' first command starts with `pwd`.
  where=$(evidence "$sid" | awk 'NR==1 && /^\$ pwd/ {getline; sub(/^ +/, ""); print}')
  printf '  %-9s %s → %s  %s\n' "$agent" "${from#*T}" "${to#*T}" "$where"
  [ -n "$where" ] && places+=("$where")
done <<<"$workers"
first_two=$(head -n 2 <<<"$workers")
overlap=$(awk -F'|' 'NR==1{s1=$3; e1=$4} NR==2{s2=$3; e2=$4} END{print ((s2 < e1 && s1 < e2) ? "yes" : "no")}' <<<"$first_two")
if [ "$overlap" = yes ]; then
  echo "  $(cut -d'|' -f2 <<<"$first_two" | paste -sd' ' | sed 's/ / 和 /') 的会话时间重叠:它们是同时跑的"
else
  problem "头两个执行者的会话时间不重叠:没有并行"
fi
case "$wb" in
  "$ws"/*) ;;
  *) [ ${#places[@]} -ge 2 ] && [ "${places[0]}" != "${places[1]}" ] && [ "${places[0]}" != "$ws" ] ||
       problem "--isolate 下两个执行者应当各在自己的 worktree 里,看到的是:${places[*]:-无}" ;;
esac
say "容器:每个 agent 一个,都在这次运行的 pod 里(docker events)"
if [ -s "$base/containers.events" ]; then
  awk -F'\t' '{printf "  %s %-12s %s\n", ($1 == "create" ? "+ 创建" : "- 删除"), $2, $3}' "$base/containers.events"
  # By name, each once: Podman's event stream may deliver a create twice (seen in CI: three
  # members' creates replayed ahead of their pod's).
  created=$(awk -F'\t' '$1 == "create" {print $3}' "$base/containers.events" | sort -u)
  removed=$(awk -F'\t' '$1 == "destroy" || $1 == "remove" {print $3}' "$base/containers.events" | sort -u)
  [ "$created" = "$removed" ] || problem "有容器建了没删:$(comm -23 <(echo "$created") <(echo "$removed") | paste -sd' ')"
  for a in pod coordinator worker-1 worker-2 judge-2; do
    grep -q "^create	$a	" "$base/containers.events" || problem "没见到 $a 的容器"
  done
else
  problem "docker events 没记下任何容器"
fi

say "git:每个执行者一个分支,做完就合进来"
git -C "$ws" log --graph --oneline --all -n 20 | sed 's/^/  /'
if [ -d "$base/.flower-httpd-worktrees" ]; then
  left=$(find "$base/.flower-httpd-worktrees" -mindepth 2 -maxdepth 2 -type d | wc -l)
  echo "  留下的 worktree:$left 个(合进来的会在运行结束时清理,没合进来的永远保留)"
fi

# -- the books ----------------------------------------------------------------------------------
say "清单 $manifest(这次运行 $run_id)"
jq -r '.[] | [.step, (if .ok then "ok" else "失败" end), (.num_turns | tostring), (.cost_usd // "")] | @tsv' <<<"$rows" |
  awk -F'\t' '{printf "  %-4s %3s 轮对话  %s  %s\n", $2, $3, ($4 == "" ? "   未知" : sprintf("$%.4f", $4)), $1}'
steps=$(jq 'length' <<<"$rows")
rounds=$(jq 'map(select(.step | startswith("干活·判定#"))) | length' <<<"$rows")
cost=$(jq -r '(if any(.[]; .cost_usd == null) then "≥ " else "" end) + "\(map(.cost_usd // 0) | add)"' <<<"$rows" |
  awk '{n = $NF; $NF = sprintf("$%.4f", n); print}')
echo "  共 $steps 步 · 干活 $rounds 轮 · 总花费 $cost(claude-sonnet-4-5 的价格 × scripted-model 报的用量)"
jq -e 'all(.ok)' <<<"$rows" >/dev/null || problem "清单里有没成功的步骤"

say "需求、目标和产出物"
brief=$wb/notes/需求.md goal=$wb/notes/目标.md
assumed=$(awk '/^#+ *未知与假设/{f=1; next} /^#+ /{f=0} f && NF' "$brief" 2>/dev/null || true)
checks=$({ awk '/^#+ *判定清单/{f=1; next} /^#+ /{f=0} f && /^ *([-*]|[0-9]+\.) /' "$goal" 2>/dev/null || true; } | wc -l)
echo "  需求确认书 $brief,没人应答,假设写进了「未知与假设」:"
sed 's/^/    /' <<<"$assumed"
echo "  目标 $goal:判定清单 $checks 条"
echo "  判定证据 $wb/notes/判定证据.md"
echo "  笔记 $wb/notes/:$(ls "$wb/notes" | paste -sd' ')"
echo "  产出物 $wb/artifacts/:$(ls "$wb/artifacts" | paste -sd' ')"
echo "  会话、清单、血缘、日志 $ws/runs/:$(ls "$ws/runs" | paste -sd' ')"
grep -q '无人应答' <<<"$assumed" || problem "「未知与假设」里没有无人应答时的假设"
[ "$checks" -ge 3 ] && [ "$checks" -le 5 ] || problem "判定清单有 $checks 条(应当 3 到 5 条)"

say "容器都收拾干净了吗"
left=$(docker ps -a --filter label=flowerbox.run --filter "label=flowerbox.workspace=$ws" --format '{{.Names}}')
if [ -n "$left" ]; then
  problem "还有 flowerbox 容器没删:$(paste -sd' ' <<<"$left")"
else
  echo "  docker ps -a --filter label=flowerbox.run:这次运行的容器一个不剩"
fi
others=$(docker ps -a --filter label=flowerbox.run --format '{{.Names}}')
if [ -n "$others" ]; then
  echo "  (引擎上还有别的运行留下的 flowerbox 容器:$(paste -sd' ' <<<"$others");flowerbox gc 能收拾)"
fi

if [ ${#problems[@]} -gt 0 ]; then
  printf '\ndemo 失败:\n' >&2
  printf '  - %s\n' "${problems[@]}" >&2
  exit 1
fi
say "演示完成:ACHIEVED,用时 ${took} 秒"
iso=
case "$wb" in "$ws"/*) ;; *) iso="--isolate " ;; esac
echo "  用真模型:flowerbox setup(问 token、网关和模型,写 ~/.config/flower/.env),然后在你自己的仓库里 flowerbox \"…\""
echo "  接着干(唤醒,也要真模型:演示的模型是写好的,已经停了):cd $ws && flowerbox ${iso}\"再加一个 /health\"  —— 需求、目标和会话都在,从上次停下的地方接着做"

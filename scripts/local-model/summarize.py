#!/usr/bin/env python3
"""One run of scripts/local-model.sh, summarised from what flowerbox left.

summarize.py calls RUNS_DIR   model calls (the manifest's turns, plus failed attempts)
summarize.py tools RUNS_DIR   tool calls the sessions hold (sessions.db), by name:
                              "3 tool calls (Bash 2, Read 1)"
summarize.py problems WS      "ok", or the first error the run recorded (manifest, stderr), or
                              "no tool called" when the sessions hold no tool call
                              (what flowerbox printed on stderr counts: it prints only errors there)
summarize.py check WS FILE CONTENT
                              the --check round trip: the `once` session holds a Bash call whose
                              result is not an error, and WS/FILE holds exactly CONTENT plus one
                              newline; prints "ok" or what is missing (exit 1)
"""
import json
import os
import sqlite3
import sys


def manifest(runs):
    path = os.path.join(runs, "manifest.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def messages(runs, role=None):
    """(role, message) for every message of every session in RUNS_DIR/sessions.db."""
    path = os.path.join(runs, "sessions.db")
    if not os.path.exists(path):
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT s.role, e.payload FROM entries e JOIN sessions s ON s.id = e.session_id"
            " WHERE e.kind = 'message' ORDER BY e.session_id, e.seq"
        ).fetchall()
    finally:
        db.close()
    return [(r, json.loads(p)) for r, p in rows if role is None or r == role]


def blocks(msgs, kind):
    for _, m in msgs:
        content = m.get("content")
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == kind:
                    yield b


def tool_uses(runs, role=None):
    return list(blocks(messages(runs, role), "tool_use"))


def calls(runs):
    rows = manifest(runs)
    turns = sum(r.get("num_turns") or 0 for r in rows)
    failed = sum(len(r.get("errors") or []) for r in rows)
    return f"{turns}" + (f" (+{failed} failed attempts)" if failed else "")


def tools(runs):
    uses = tool_uses(runs)
    names = {}
    for u in uses:
        names[u.get("name")] = names.get(u.get("name"), 0) + 1
    by_name = ", ".join(f"{n} {c}" for n, c in sorted(names.items()))
    return f"{len(uses)} tool call{'' if len(uses) == 1 else 's'}" + (f" ({by_name})" if uses else "")


def problems(ws):
    runs = os.path.join(ws, "runs")
    found = []
    for r in manifest(runs):
        if not r.get("ok") and r.get("error"):
            found.append(f"{r.get('step')}: {r['error']}")
        for e in r.get("errors") or []:
            found.append(f"{r.get('step')} attempt: {e}")
    err = os.path.join(ws, "stderr.log")
    if os.path.exists(err):
        with open(err, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
        # The exit message (`x ...`, or the step a workflow stopped in) when nothing else says.
        found += [l for l in lines if l.startswith("x ")] or lines[:1]
    if not found:
        # A run that ended well without calling a tool did no work: not "ok".
        return "ok" if tool_uses(runs) else "no tool called"
    first = " ".join(found[0].split())
    return (first[:160] + "…") if len(first) > 160 else first


def check(ws, file, content):
    """What the --check round trip lacks, or None."""
    msgs = messages(os.path.join(ws, "runs"), "once")
    results = {b.get("tool_use_id"): b for b in blocks(msgs, "tool_result")}
    bash = [u for u in blocks(msgs, "tool_use") if u.get("name") == "Bash"]
    if not bash:
        named = sorted({u.get("name") for u in blocks(msgs, "tool_use")})
        return "no Bash call in the once session" + (f" (calls: {', '.join(named)})" if named else "")
    answered = [results[u.get("id")] for u in bash if u.get("id") in results]
    if not answered:
        return f"{len(bash)} Bash call(s), none answered"
    if all(r.get("is_error") for r in answered):
        return f"every Bash call failed: {' '.join(str(answered[-1].get('content')).split())[:120]}"
    path = os.path.join(ws, file)
    if not os.path.isfile(path):
        return f"{len(bash)} Bash call(s), but {file} was not written"
    with open(path, errors="replace") as f:
        got = f.read()
    if got != content + "\n":
        return f"{file} holds {got[:60]!r}, expected {content + chr(10)!r}"
    return None


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd in ("calls", "tools", "problems") and len(sys.argv) == 3:
        print({"calls": calls, "tools": tools, "problems": problems}[cmd](sys.argv[2]))
    elif cmd == "check" and len(sys.argv) == 5:
        missing = check(*sys.argv[2:])
        print(missing or "ok")
        sys.exit(1 if missing else 0)
    else:
        sys.exit(__doc__)

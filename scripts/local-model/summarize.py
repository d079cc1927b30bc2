#!/usr/bin/env python3
"""One run of scripts/local-model.sh, summarised from what flowerbox left.

summarize.py calls RUNS_DIR   model calls (the manifest's turns, plus failed attempts)
summarize.py problems WS      "ok", or the first error the run recorded (manifest, stderr)
                              (what flowerbox printed on stderr counts: it prints only errors there)
"""
import json
import os
import sys


def manifest(runs):
    path = os.path.join(runs, "manifest.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def calls(runs):
    rows = manifest(runs)
    turns = sum(r.get("num_turns") or 0 for r in rows)
    failed = sum(len(r.get("errors") or []) for r in rows)
    return f"{turns}" + (f" (+{failed} failed attempts)" if failed else "")


def problems(ws):
    found = []
    for r in manifest(os.path.join(ws, "runs")):
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
        return "ok"
    first = " ".join(found[0].split())
    return (first[:160] + "…") if len(first) > 160 else first


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("calls", "problems"):
        sys.exit(__doc__)
    print(calls(sys.argv[2]) if sys.argv[1] == "calls" else problems(sys.argv[2]))

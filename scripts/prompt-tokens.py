#!/usr/bin/env python3
"""Token counts of recorded Messages API requests (not in CI): per role, the system prompt plus
tools (the prefix prompt caching can store), the first request of a session, and the share of
all input tokens a prompt cache would serve.

Usage: scripts/prompt-tokens.py REQUESTS.jsonl [...]
  REQUESTS.jsonl  request bodies as `scripted-model --record` writes them (scripts/demo.sh keeps
                  them in <demo dir>/requests.jsonl)

Counting: Anthropic's legacy Claude tokenizer (the `tokenizer.json` shipped in the `anthropic`
0.34 wheel on PyPI, read with the `tokenizers` package); without it, UTF-8 bytes / 4 (the
scripted server's own estimate). Today's Claude models use a newer tokenizer that counts more
tokens for the same text, so both methods err low: a prefix of >= 1024 counted tokens holds at
least 1024 real ones. The result line says which method counted.

Cache simulation: the request is the sequence tools -> system -> messages, cut into blocks (one
tool definition, one system text, one content block). A block with `cache_control` is a
breakpoint; after each request, every breakpoint prefix of at least 1024 tokens is written to
the cache. A later request reads the longest cached prefix it starts with (the API looks back up
to 20 blocks from a breakpoint for an earlier write). Cacheable share = tokens read from the
cache / all input tokens. The 5-minute lifetime never expires during the demo.
"""
import hashlib
import json
import os
import sys

MIN_CACHEABLE = 1024
ROLE_MARKS = [
    ("coordinator", "你是协调者"),
    ("clarifier", "你是确认者"),
    ("judge", "你是判定者"),
    ("oracle", "你是旁路顾问"),
    ("worker", "回话格式固定四段"),
]


def tokenizer():
    """The legacy Claude tokenizer, fetched once from PyPI into ~/.cache; None when unavailable."""
    cache = os.path.expanduser("~/.cache/flowerbox/claude-tokenizer.json")
    if not os.path.exists(cache):
        import subprocess
        import tempfile
        import zipfile
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                "anthropic==0.34.2", "-d", d], capture_output=True)
            wheels = [f for f in os.listdir(d) if f.endswith(".whl")]
            if r.returncode != 0 or not wheels:
                return None
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            with zipfile.ZipFile(os.path.join(d, wheels[0])) as z:
                with open(cache, "wb") as f:
                    f.write(z.read("anthropic/tokenizer.json"))
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_file(cache)


TOK = tokenizer()
METHOD = ("legacy Claude tokenizer (anthropic 0.34.2 tokenizer.json)" if TOK
          else "UTF-8 bytes / 4")


def count(text):
    if TOK:
        return len(TOK.encode(text).ids)
    return max(1, len(text.encode()) // 4)


def block_text(b):
    """What a block costs: its text, or its JSON."""
    t = b.get("type")
    if t == "text":
        return b.get("text", "")
    if t == "thinking":
        return b.get("thinking", "")
    if t == "tool_result":
        c = b.get("content", "")
        return c if isinstance(c, str) else json.dumps(c, ensure_ascii=False)
    clean = {k: v for k, v in b.items() if k != "cache_control"}
    return json.dumps(clean, ensure_ascii=False)


def blocks(req):
    """(key, tokens, breakpoint) for every block, in the order the cache sees them."""
    out = []
    for t in req.get("tools", []):
        out.append((t, t.get("cache_control") is not None))
    system = req.get("system", [])
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for s in system:
        out.append((s, s.get("cache_control") is not None))
    for m in req.get("messages", []):
        content = m["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for b in content:
            out.append(({"role": m["role"], **b}, b.get("cache_control") is not None))
    res = []
    for b, bp in out:
        clean = {k: v for k, v in b.items() if k != "cache_control"}
        key = json.dumps(clean, ensure_ascii=False, sort_keys=True)
        res.append((key, count(block_text(b)), bp))
    return res


def role_of(req):
    system = req.get("system", [])
    text = " ".join(s.get("text", "") for s in system) if isinstance(system, list) else system
    for role, mark in ROLE_MARKS:
        if mark in text:
            return role
    return "once"


def main(paths):
    reqs = []
    for p in paths:
        with open(p) as f:
            reqs += [json.loads(line) for line in f if line.strip()]
    cache = set()
    total = cached = 0
    per_role = {}
    for req in reqs:
        bl = blocks(req)
        h = hashlib.sha256()
        prefix = []  # (hash, tokens so far, breakpoint)
        n = 0
        for key, tok, bp in bl:
            h.update(key.encode())
            n += tok
            prefix.append((h.copy().hexdigest(), n, bp))
        hit = 0
        for digest, upto, _ in prefix:
            if digest in cache:
                hit = upto
        total += n
        cached += hit
        for digest, upto, bp in prefix:
            if bp and upto >= MIN_CACHEABLE:
                cache.add(digest)
        role = role_of(req)
        n_tools = sum(t for _, t, _ in bl[:len(req.get("tools", []))])
        sys_blocks = req.get("system", [])
        n_sys = sum(count(block_text(s)) for s in sys_blocks) if isinstance(sys_blocks, list) else count(sys_blocks)
        first = sum(1 for m in req["messages"] if m["role"] == "assistant") == 0
        r = per_role.setdefault(role, {"prefix": set(), "first": [], "requests": 0})
        r["requests"] += 1
        r["prefix"].add(n_tools + n_sys)
        if first:
            r["first"].append(n)
    print(f"counted with: {METHOD}")
    print(f"{'role':<12} {'requests':>8} {'system+tools':>14} {'first request':>16}")
    for role, r in sorted(per_role.items()):
        pre = "/".join(str(x) for x in sorted(r["prefix"]))
        first = "/".join(str(x) for x in sorted(set(r["first"]))) or "-"
        print(f"{role:<12} {r['requests']:>8} {pre:>14} {first:>16}")
    share = 100.0 * cached / total if total else 0.0
    print(f"input tokens {total}, served from a simulated prompt cache {cached}: {share:.1f} %")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

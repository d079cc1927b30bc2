#!/usr/bin/env python3
"""Craft metrics over the shipped crate (runner/), for issue 31.

  errors     share of error-enum variants (thiserror `#[derive(Error)]`) that are a bare
             `V(String)`, that carry any `String` field, and that keep a source (`#[source]`, `#[from]` or a field
             named `source`). `--area DIR` limits it to runner/DIR (repeatable).
  long-fns   shipped functions (outside `#[cfg(test)]` modules and `*_tests.rs`/`tests.rs`
             files) longer than N lines (default 120), longest first.

Text-level scanning (comments and string literals blanked, braces matched), not a parser:
good enough to count, not to decide anything in the build.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner")


def blank(src):
    """Comments and string/char literal contents replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('"' + re.sub(r"[^\n]", " ", src[i + 1:j - 1]) + '"')
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", src[i + 1:j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(text, open_idx):
    depth = 0
    for k in range(open_idx, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def files(areas=None):
    for dirpath, _, names in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        if areas and not any(rel == a or rel.startswith(a + os.sep) for a in areas):
            continue
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(dirpath, name)


def split_top(body):
    """Splits an enum body at top-level commas."""
    parts, depth, cur = [], 0, []
    for c in body:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def errors(areas):
    total = strings = bare = sourced = 0
    rows = []
    for path in files(areas):
        text = blank(open(path, encoding="utf-8").read())
        for m in re.finditer(r"#\[derive\(([^)]*)\)\]\s*(?:#\[[^\]]*\]\s*)*pub(?:\([^)]*\))?\s+enum\s+(\w+)[^{]*\{", text):
            if not re.search(r"\bError\b", m.group(1)):
                continue
            body = text[m.end():match_brace(text, m.end() - 1)]
            for v in split_top(body):
                attrs = " ".join(re.findall(r"#\[[^\]]*\]", v))
                code = re.sub(r"#\[[^\]]*\]", " ", v)
                name = re.search(r"\w+", code)
                if not name:
                    continue
                total += 1
                is_string = bool(re.search(r"(?<![\w:])String\b", code))
                bare += bool(re.fullmatch(r"\s*\w+\s*\(\s*String\s*\)\s*", code))
                has_source = ("#[source]" in attrs or "#[from]" in attrs
                              or bool(re.search(r"\bsource\s*:", code)))
                strings += is_string
                sourced += has_source
                if is_string:
                    rows.append(f"{os.path.relpath(path, ROOT)} {m.group(2)}::{name.group(0)}")
    return total, strings, bare, sourced, rows


def test_spans(text):
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        spans.append((m.start(), match_brace(text, m.end() - 1)))
    return spans


def long_fns(limit):
    out = []
    for path in files():
        base = os.path.basename(path)
        if base == "tests.rs" or base.endswith("_tests.rs"):
            continue
        text = blank(open(path, encoding="utf-8").read())
        spans = test_spans(text)
        for m in re.finditer(r"\bfn\s+(\w+)\s*(?:<[^{;]*?>)?\s*\(", text):
            if any(a <= m.start() <= b for a, b in spans):
                continue
            # The body's brace: the first `{` after the signature at paren depth 0 (no `;` before).
            k, depth = m.end() - 1, 0
            while k < len(text):
                c = text[k]
                if c in "([":
                    depth += 1
                elif c in ")]":
                    depth -= 1
                elif c == ";" and depth == 0:
                    k = -1
                    break
                elif c == "{" and depth == 0:
                    break
                k += 1
            if k < 0 or k >= len(text):
                continue
            end = match_brace(text, k)
            start_line = text.count("\n", 0, m.start()) + 1
            lines = text.count("\n", m.start(), end) + 1
            if lines > limit:
                out.append((lines, f"{os.path.relpath(path, ROOT)}:{start_line} {m.group(1)}"))
    return sorted(out, reverse=True)


def main(argv):
    if not argv or argv[0] not in ("errors", "long-fns"):
        print(__doc__)
        return 2
    if argv[0] == "errors":
        areas = [argv[i + 1] for i, a in enumerate(argv) if a == "--area"]
        total, strings, bare, sourced, rows = errors(areas)
        if "-v" in argv:
            print("\n".join(rows))
        pct = lambda k: f"{100.0 * k / total:.1f}%" if total else "-"
        print(f"variants {total}  only a String `V(String)` {bare} ({pct(bare)})  any String field {strings} ({pct(strings)})  with source {sourced} ({pct(sourced)})")
    else:
        limit = int(argv[1]) if len(argv) > 1 else 120
        rows = long_fns(limit)
        for lines, where in rows:
            print(f"{lines:5} {where}")
        print(f"{len(rows)} shipped functions over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

//! The module graph of `runner/` (DESIGN.md "Module graph"): reads every `use crate::…` and
//! `crate::x::…` path, every path written `flowerbox::x::…` (the crate's own name, which
//! reaches the same modules when the crate names itself), and `super::` paths that climb to
//! the crate root, of the shipped code — test code (`#[cfg(test)]` items and the files they
//! declare) left out — and fails when the top-level modules form a cycle, printing it, or when
//! a module uses one the DESIGN.md table does not allow, naming the file and line. The table
//! itself must name every module and be free of cycles, so it stays a layering; `lib.rs`'s
//! module map and DESIGN.md's layout name every module too.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/runner");
const DESIGN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/DESIGN.md");
/// The heading of the table in DESIGN.md.
const HEADING: &str = "## Module graph";

/// One use of another top-level module.
#[derive(Debug, Clone)]
struct Use {
    from: String,
    to: String,
    at: String,
}

/// Source text with comments, string and character literals blanked (newlines kept, so line
/// numbers stay right).
fn blank(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let keep = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(keep(b[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !prev_is_ident(&b, i)
            && raw_start(&b, i + usize::from(c == 'b') + 1).is_some()
        {
            let start = i + usize::from(c == 'b') + 1;
            let hashes = raw_start(&b, start).unwrap_or(0);
            let mut j = start + hashes + 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(keep(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(keep(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let is_char = match next {
                Some('\\') => true,
                Some(_) => b.get(i + 2) == Some(&'\''),
                None => false,
            };
            if is_char {
                out.push(' ');
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    if b[i] == '\\' {
                        out.push(' ');
                        i += 1;
                    }
                    if i < b.len() {
                        out.push(keep(b[i]));
                        i += 1;
                    }
                }
                out.push(' ');
                i += 1;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// At `b[at]`: `#…#"` opens a raw string; the number of `#`.
fn raw_start(b: &[char], at: usize) -> Option<usize> {
    let mut n = 0;
    while b.get(at + n) == Some(&'#') {
        n += 1;
    }
    (b.get(at + n) == Some(&'"')).then_some(n)
}

/// The end (exclusive) of the item starting at `from`: its `;` at depth 0, or the `}` that
/// closes its first `{`.
fn item_end(text: &[char], from: usize) -> usize {
    let mut depth = 0i32;
    let mut i = from;
    while i < text.len() {
        match text[i] {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth -= 1;
                if depth == 0 && text[i] == '}' {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// Removes every `#[cfg(test)]` item from blanked text; returns the text and the names of the
/// out-of-line test modules it declares (`#[cfg(test)] mod x;`, with their `#[path]`).
fn strip_tests(text: &str, raw: &str) -> (String, Vec<(String, Option<String>)>) {
    let chars: Vec<char> = text.chars().collect();
    let raw_chars: Vec<char> = raw.chars().collect();
    let mut keep = chars.clone();
    let mut declared = Vec::new();
    let pat: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pat.len() <= chars.len() {
        if chars[i..i + pat.len()] != pat[..] {
            i += 1;
            continue;
        }
        let end = item_end(&chars, i + pat.len());
        let item: String = chars[i + pat.len()..end].iter().collect();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        if item.trim_end().ends_with(';') {
            if let Some(pos) = words.iter().position(|w| *w == "mod") {
                if let Some(name) = words.get(pos + 1) {
                    // `#[path = "…"]` is a string: read it from the raw text.
                    let raw_item: String = raw_chars[i..end.min(raw_chars.len())].iter().collect();
                    let path = raw_item.split("#[path").nth(1).and_then(|rest| {
                        let start = rest.find('"')? + 1;
                        let len = rest[start..].find('"')?;
                        Some(rest[start..start + len].to_string())
                    });
                    declared.push((name.to_string(), path));
                }
            }
        }
        for c in keep.iter_mut().take(end).skip(i) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    (keep.into_iter().collect(), declared)
}

/// The module path of a source file below `runner/` (`agent/tools/mod.rs` → agent, tools).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// The file of out-of-line module `name` declared in `file`.
fn child_file(file: &Path, name: &str, path: Option<&str>) -> Vec<PathBuf> {
    let dir = file.parent().unwrap_or(Path::new(""));
    if let Some(p) = path {
        return vec![dir.join(p)];
    }
    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
    let base = if stem == "mod" || stem == "lib" {
        dir.to_path_buf()
    } else {
        dir.join(stem.as_ref())
    };
    vec![
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The identifiers at the top level of a `{…}` group (`{a::{b, c}, d as e}` → a, d).
fn group_heads(text: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    let mut at_start = true;
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                at_start = true;
                current.clear();
                continue;
            }
            _ => {}
        }
        if depth == 0 && at_start {
            if c.is_alphanumeric() || c == '_' {
                current.push(c);
            } else if !current.is_empty() {
                heads.push(std::mem::take(&mut current));
                at_start = false;
            }
        }
    }
    if at_start && !current.is_empty() {
        heads.push(current);
    }
    heads
}

/// The `{…}` group starting at `text[0] == '{'`.
fn group(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[1..i];
                }
            }
            _ => {}
        }
    }
    &text[1..]
}

fn ident_at(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The roots a path can start from to name a top-level module: `crate::` and the crate's own
/// name (`flowerbox::`, also as `::flowerbox::`).
const ROOTS: [&str; 2] = ["crate::", "flowerbox::"];

/// The top-level modules named by paths from [`ROOTS`] in blanked text, each with its offset
/// (`crate::{a::b, c}` names a and c).
fn rooted(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for root in ROOTS {
        for (at, _) in text.match_indices(root) {
            if at > 0 && text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[at + root.len()..];
            if rest.starts_with('{') {
                for head in group_heads(group(rest)) {
                    found.push((head, at));
                }
            } else {
                found.push((ident_at(rest), at));
            }
        }
    }
    found.sort_by_key(|(_, at)| *at);
    found
}

/// Every use of another top-level module in the shipped code.
fn uses(modules: &BTreeSet<String>) -> Vec<Use> {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut texts = BTreeMap::new();
    let mut test_only: HashSet<PathBuf> = HashSet::new();
    for f in &files {
        let raw = std::fs::read_to_string(f).unwrap();
        let (text, declared) = strip_tests(&blank(&raw), &raw);
        for (name, path) in declared {
            for c in child_file(f, &name, path.as_deref()) {
                test_only.insert(c);
            }
        }
        texts.insert(f.clone(), text);
    }
    // A file below a test-only module directory is test-only too.
    let is_test_only = |f: &Path| {
        test_only.iter().any(|t| {
            f == t
                || (t.file_name().is_some_and(|n| n == "mod.rs")
                    && t.parent().is_some_and(|d| f.starts_with(d)))
        })
    };
    let mut found = Vec::new();
    for (f, text) in &texts {
        let rel = f.strip_prefix(root).unwrap();
        let path = module_path(rel);
        let Some(top) = path.first().cloned() else {
            continue;
        };
        if !modules.contains(&top) || is_test_only(f) {
            continue;
        }
        let line_of = |at: usize| text[..at].matches('\n').count() + 1;
        let mut record = |to: String, at: usize| {
            if to != top && modules.contains(&to) {
                found.push(Use {
                    from: top.clone(),
                    to,
                    at: format!("runner/{}:{}", rel.display(), line_of(at)),
                });
            }
        };
        for (head, at) in rooted(text) {
            record(head, at);
        }
        // `super::super::x` that climbs to the crate root names top-level module `x`.
        for (at, _) in text.match_indices("super::") {
            if at > 0 && text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let mut rest = &text[at..];
            let mut ups = 0;
            while let Some(r) = rest.strip_prefix("super::") {
                ups += 1;
                rest = r;
            }
            if ups >= path.len() {
                if rest.starts_with('{') {
                    for head in group_heads(group(rest)) {
                        record(head, at);
                    }
                } else {
                    record(ident_at(rest), at);
                }
            }
        }
    }
    found
}

/// The top-level modules: the directories and files of `runner/` (not `lib.rs`, `main.rs`,
/// `bin/`), minus those `lib.rs` declares for tests only.
fn modules() -> BTreeSet<String> {
    let root = Path::new(ROOT);
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let (_, test_only) = strip_tests(&blank(&lib), &lib);
    let test_only: HashSet<String> = test_only.into_iter().map(|(n, _)| n).collect();
    std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            let keep = if p.is_dir() {
                name != "bin"
            } else {
                p.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main"
            };
            (keep && !test_only.contains(&name)).then_some(name)
        })
        .collect()
}

/// DESIGN.md's table: module → the modules it may use.
fn table() -> BTreeMap<String, BTreeSet<String>> {
    let design = std::fs::read_to_string(DESIGN).unwrap();
    let section = design
        .split(HEADING)
        .nth(1)
        .unwrap_or_else(|| panic!("DESIGN.md has no {HEADING:?} section"));
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut rows = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() < 3 || cells[1].contains("---") {
            continue;
        }
        let Some(module) = names(cells[1]).into_iter().next() else {
            continue; // the header
        };
        rows.insert(module, names(cells[2]));
    }
    rows
}

/// A cycle of `graph`, as `a → b → … → a`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[from..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_top_level_modules_form_no_cycle_and_keep_to_the_design_table() {
    let modules = modules();
    let found = uses(&modules);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in &found {
        graph
            .entry(u.from.clone())
            .or_default()
            .insert(u.to.clone());
    }
    if let Some(c) = cycle(&graph) {
        let evidence: Vec<String> = c
            .windows(2)
            .map(|w| {
                let first = found
                    .iter()
                    .find(|u| u.from == w[0] && u.to == w[1])
                    .map_or(String::new(), |u| u.at.clone());
                format!("  {} → {}  ({first})", w[0], w[1])
            })
            .collect();
        panic!(
            "the modules of runner/ form a cycle: {}\n{}",
            c.join(" → "),
            evidence.join("\n")
        );
    }

    let table = table();
    let listed: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        listed, modules,
        "DESIGN.md's {HEADING:?} table must have one row per top-level module of runner/"
    );
    for (m, allowed) in &table {
        for a in allowed {
            assert!(
                modules.contains(a),
                "DESIGN.md: `{m}` may use `{a}`, which is not a module"
            );
        }
    }
    if let Some(c) = cycle(&table) {
        panic!("DESIGN.md's table is not a layering: {}", c.join(" → "));
    }
    let refused: Vec<String> = found
        .iter()
        .filter(|u| !table[&u.from].contains(&u.to))
        .map(|u| format!("  {} uses {} at {}", u.from, u.to, u.at))
        .collect();
    assert!(
        refused.is_empty(),
        "uses the DESIGN.md {HEADING:?} table does not allow (change the code, or the table \
         if the layering really changes):\n{}",
        refused.join("\n")
    );
}

/// The names `text` marks as intra-doc links or code (`[`x`]`, `` `x/` ``, `` `x` ``).
fn named_in(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|w| w.trim_end_matches('/').to_string())
        .collect()
}

#[test]
fn the_module_map_of_lib_rs_and_the_layout_of_design_md_name_every_module() {
    let modules = modules();
    let lib = std::fs::read_to_string(Path::new(ROOT).join("lib.rs")).unwrap();
    let map: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let named = named_in(&map);
    let missing: Vec<&String> = modules.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "runner/lib.rs's module map does not name {missing:?}"
    );
    let design = std::fs::read_to_string(DESIGN).unwrap();
    let layout = design
        .split("## Layout")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("DESIGN.md has a \"## Layout\" section with a code block");
    let runner: String = layout
        .lines()
        .skip_while(|l| !l.starts_with("runner/"))
        .take_while(|l| l.starts_with("runner/") || l.starts_with(' '))
        .collect::<Vec<_>>()
        .join(" ");
    let listed: BTreeSet<String> = runner
        .split(|c: char| c.is_whitespace() || c == ':' || c == ',')
        .map(|w| w.trim_end_matches('/').to_string())
        .collect();
    let missing: Vec<&String> = modules.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "DESIGN.md's layout (the runner/ line) does not name {missing:?}"
    );
}

#[test]
fn the_reader_sees_uses_and_skips_tests_comments_and_strings() {
    let src = r##"
use crate::agent::{Event, EventKind};
use crate::{model::Role, session::{SessionMeta, TrimPolicy}};
// use crate::term::nothing;
/// [`crate::term::also_nothing`]
const S: &str = "crate::cli::inside_a_string";
const R: &str = r#"crate::cli::raw"#;
fn f<'a>(x: &'a str) -> char { let _ = crate::record::cost::Cost::default(); 'x' }
#[cfg(test)]
use crate::testkit::MemStore;
#[cfg(test)]
mod tests {
    use crate::flow::Ctx;
    fn g() { let _ = '}'; }
}
#[cfg(test)]
mod more_tests;
pub fn after() { crate::fsroot::own::exists(p); }
fn named() { let _ = flowerbox::term::Console::new(); ::flowerbox::cli::{args, run}(); }
fn not_a_root() { my_flowerbox::shown::x(); }
"##;
    let (text, declared) = strip_tests(&blank(src), src);
    let heads: Vec<String> = rooted(&text).into_iter().map(|(h, _)| h).collect();
    assert_eq!(
        heads,
        ["agent", "model", "session", "record", "fsroot", "term", "cli"]
    );
    assert_eq!(declared, [("more_tests".to_string(), None)]);
    let table: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(cycle(&table).unwrap(), ["a", "b", "c", "a"]);
}

/// The files of `runner/` that may name the Docker backend (`docker::…` paths, `bollard`):
/// the backend itself and the command line's backend selection (issue 30 §1).
const DOCKER_ALLOWED: [&str; 2] = ["sandbox/docker/", "cli/services.rs"];

/// The shipped source files of `runner/` with their text blanked (comments, strings) and
/// their test items removed; files declared only for tests left out.
fn shipped_texts() -> Vec<(PathBuf, String)> {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut texts = Vec::new();
    let mut test_only: HashSet<PathBuf> = HashSet::new();
    for f in &files {
        let raw = std::fs::read_to_string(f).unwrap();
        let (text, declared) = strip_tests(&blank(&raw), &raw);
        for (name, path) in declared {
            for c in child_file(f, &name, path.as_deref()) {
                test_only.insert(c);
            }
        }
        texts.push((f.clone(), text));
    }
    texts.retain(|(f, _)| {
        !test_only.iter().any(|t| {
            f == t
                || (t.file_name().is_some_and(|n| n == "mod.rs")
                    && t.parent().is_some_and(|d| f.starts_with(d)))
        })
    });
    texts
}

/// Where `text` names the Docker backend: a `docker::` path segment or the `bollard` crate
/// (line numbers).
fn names_docker(text: &str) -> Vec<usize> {
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let word_start = |at: usize| !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
    let mut lines: Vec<usize> = text
        .match_indices("docker::")
        .filter(|(at, _)| word_start(*at))
        .map(|(at, _)| line_of(at))
        .chain(
            text.match_indices("bollard")
                .filter(|(at, _)| {
                    word_start(*at)
                        && !text[at + "bollard".len()..]
                            .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
                .map(|(at, _)| line_of(at)),
        )
        .collect();
    lines.sort_unstable();
    lines.dedup();
    lines
}

#[test]
fn no_module_but_the_docker_backend_and_the_backend_selection_names_docker() {
    let root = Path::new(ROOT);
    let mut found = Vec::new();
    for (f, text) in shipped_texts() {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if DOCKER_ALLOWED.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        for line in names_docker(&text) {
            found.push(format!("  runner/{rel}:{line}"));
        }
    }
    assert!(
        found.is_empty(),
        "only runner/sandbox/docker/ and the command line's backend selection \
         (runner/cli/services.rs) may name the Docker backend (`docker::…`, `bollard`); the \
         rest goes through the seam (sandbox::SandboxBackend, SandboxFactory, Sandbox):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_docker_reader_sees_paths_and_the_crate_but_not_words() {
    let src = r#"
use crate::sandbox::docker::DockerBackend;
use bollard::Docker;
let d = super::docker::x();
// crate::sandbox::docker::in_a_comment
let s = "bollard::in_a_string";
fn dockerish() { my_docker::f(); bollard_like(); }
pub mod docker;
"#;
    let text = blank(src);
    assert_eq!(names_docker(&text), [2, 3, 4]);
}

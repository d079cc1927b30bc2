//! One home per fact (issue 31 §3): the names flowerbox keeps on disk, the configuration
//! variables a provider reads, the verdict names and the default output cap are each defined
//! once, and the rest of the shipped code uses the definition. This test reads the shipped code
//! of `runner/` (test modules and test files left out) and fails on a literal written anywhere
//! but its home, naming the file and line.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};

/// (home, literals only it may write).
const FACTS: &[(&str, &[&str])] = &[
    (
        "record/layout.rs",
        &[
            "\"sessions.db\"",
            "\"manifest.json\"",
            "\"lineage.json\"",
            "\".flower\"",
            "\"runs\"",
        ],
    ),
    (
        "model/config.rs",
        &[
            "\"ANTHROPIC_API_KEY\"",
            "\"ANTHROPIC_AUTH_TOKEN\"",
            "\"ANTHROPIC_BASE_URL\"",
            "\"ANTHROPIC_MODEL\"",
            "\"ANTHROPIC_DEFAULT_OPUS_MODEL\"",
            "\"ANTHROPIC_DEFAULT_SONNET_MODEL\"",
            "\"ANTHROPIC_DEFAULT_HAIKU_MODEL\"",
            "\"CLAUDE_CODE_SUBAGENT_MODEL\"",
            "\"CLAUDE_CODE_EFFORT_LEVEL\"",
            "\"FLOWERBOX_PROVIDER\"",
            "\"OPENAI_BASE_URL\"",
            "\"OPENAI_API_KEY\"",
            "\"OPENAI_MODEL\"",
            "\"FLOWERBOX_OPENAI_STREAM\"",
            "\"FLOWERBOX_MAX_TOKENS\"",
        ],
    ),
    (
        "flow/verdict.rs",
        &["\"ACHIEVED\"", "\"NOT_YET\"", "\"UNREACHABLE\""],
    ),
];

/// The default `max_tokens` is `model::config::DEFAULT_MAX_TOKENS`: no other shipped file sets
/// a `max_tokens` field to a number.
const MAX_TOKENS_HOME: &str = "model/config.rs";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("runner/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Test files, the test doubles and the scripted model are not shipped behaviour.
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs"
        || name == "testing.rs"
        || name == "testkit.rs"
        || name.ends_with("_tests.rs")
        || rel.starts_with("model/scripted/")
        || rel.starts_with("bin/")
}

/// The file up to its first `#[cfg(test)] mod` (test modules come last in this code base).
fn shipped_part(text: &str) -> &str {
    let mut at = 0;
    while let Some(i) = text[at..].find("#[cfg(test)]") {
        let start = at + i;
        let rest = text[start + "#[cfg(test)]".len()..].trim_start();
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub "))
            .unwrap_or(rest);
        if rest.starts_with("mod ") {
            return &text[..start];
        }
        at = start + 1;
    }
    text
}

/// The code of a line: nothing for a comment line (doc comments may name the files).
fn code(line: &str) -> &str {
    if line.trim_start().starts_with("//") {
        ""
    } else {
        line
    }
}

fn sets_max_tokens_to_a_number(code: &str) -> bool {
    let Some(i) = code.find("max_tokens:") else {
        return false;
    };
    code[i + "max_tokens:".len()..]
        .trim_start()
        .starts_with(|c: char| c.is_ascii_digit())
}

#[test]
fn each_fact_is_written_in_its_home_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("runner");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut found = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .expect("beneath runner/")
            .to_string_lossy()
            .replace('\\', "/");
        if is_test_file(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("source is UTF-8");
        for (n, line) in shipped_part(&text).lines().enumerate() {
            let code = code(line);
            for (home, literals) in FACTS {
                if rel == *home {
                    continue;
                }
                for lit in literals.iter().filter(|l| code.contains(**l)) {
                    found.push(format!(
                        "runner/{rel}:{}: {lit} (its home is {home})",
                        n + 1
                    ));
                }
            }
            if rel != MAX_TOKENS_HOME && sets_max_tokens_to_a_number(code) {
                found.push(format!(
                    "runner/{rel}:{}: a max_tokens literal (its home is {MAX_TOKENS_HOME})",
                    n + 1
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "literals outside their home:\n{}",
        found.join("\n")
    );
    // The scan sees the homes themselves (a moved home must move this test with it).
    for (home, literals) in FACTS {
        let text = std::fs::read_to_string(root.join(home)).expect("the home exists");
        for lit in literals.iter() {
            assert!(text.contains(lit), "{home} no longer defines {lit}");
        }
    }
}

#[test]
fn the_scan_finds_what_it_looks_for() {
    let text =
        "fn a() { p.join(\"sessions.db\") }\n#[cfg(test)]\nmod tests {\n \"manifest.json\"\n}\n";
    let shipped = shipped_part(text);
    assert!(shipped.contains("\"sessions.db\""));
    assert!(!shipped.contains("\"manifest.json\""));
    assert!(!code("    // \"lineage.json\"").contains("lineage"));
    assert!(sets_max_tokens_to_a_number("max_tokens: 16_384,"));
    assert!(!sets_max_tokens_to_a_number(
        "max_tokens: DEFAULT_MAX_TOKENS,"
    ));
}

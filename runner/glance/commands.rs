//! Which simple commands are glances: the table of read-only commands and the options that
//! make them write, execute or never end.

use super::git::check_git;
use super::lex::{is_name_char, is_name_start, Word};
use super::sed::check_sed;
use super::{refuse, Refusal};

/// Where unquoted globs and `$VAR` expansions may appear in a command's arguments. A file named
/// `--pre=rm` matched by `*` becomes an option; for commands with dangerous options such words
/// are allowed only after `--`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Globs {
    Anywhere,
    AfterDashDash,
}

/// A table-driven rule for commands that are read-only except for some options.
struct Spec {
    globs: Globs,
    /// Short option letters that write, execute or never end (checked in every `-xyz` cluster).
    bad_short: &'static str,
    /// Long options (and `--opt=` prefixes) that write, execute or never end.
    bad_long: &'static [&'static str],
    /// Exact arguments that are refused anywhere (find's actions).
    bad_exact: &'static [&'static str],
    /// Most positional arguments allowed (`uniq in out` writes `out`).
    max_positional: Option<usize>,
    /// Argument prefixes that are refused before `--` (`lsof +r` repeats forever).
    bad_prefix: &'static [&'static str],
    /// Options that take the next word as their value (so it is not counted as positional).
    value_short: &'static str,
}

const ANY: Spec = Spec {
    globs: Globs::Anywhere,
    bad_short: "",
    bad_long: &[],
    bad_exact: &[],
    max_positional: None,
    bad_prefix: &[],
    value_short: "",
};

fn simple_spec(name: &str) -> Option<Spec> {
    Some(match name {
        "ls" | "pwd" | "cat" | "tac" | "head" | "wc" | "stat" | "du" | "df" | "echo" | "which"
        | "type" | "whoami" | "id" | "uname" | "nproc" | "uptime" | "free" | "ps" | "pgrep"
        | "basename" | "dirname" | "realpath" | "readlink" | "grep" | "egrep" | "fgrep" | "cut"
        | "tr" | "nl" | "rev" | "comm" | "diff" | "cmp" | "md5sum" | "sha1sum" | "sha256sum"
        | "sha512sum" | "strings" | "hexdump" | "od" | "column" | "jq" | "printenv" | "true"
        | "file" => match name {
            // `file -C` compiles a magic database into the current directory.
            "file" => Spec {
                globs: Globs::AfterDashDash,
                bad_short: "C",
                bad_long: &["--compile"],
                ..ANY
            },
            _ => ANY,
        },
        // `tail -f` never ends.
        "tail" => Spec {
            bad_short: "fF",
            bad_long: &["--follow", "--retry"],
            value_short: "nc",
            ..ANY
        },
        // `sort -o` writes; `--compress-program` runs a program.
        "sort" => Spec {
            globs: Globs::AfterDashDash,
            bad_short: "o",
            bad_long: &["--output", "--compress-program"],
            value_short: "ktST",
            ..ANY
        },
        // `uniq in out` writes `out`.
        "uniq" => Spec {
            globs: Globs::AfterDashDash,
            max_positional: Some(1),
            value_short: "fsw",
            ..ANY
        },
        // `tree -o` writes; `-R` writes HTML files.
        "tree" => Spec {
            globs: Globs::AfterDashDash,
            bad_short: "oR",
            bad_long: &["--output"],
            ..ANY
        },
        // `date -s` sets the clock.
        "date" => Spec {
            globs: Globs::AfterDashDash,
            bad_short: "s",
            bad_long: &["--set"],
            ..ANY
        },
        // `rg --pre cmd` runs `cmd` on every file searched.
        "rg" => Spec {
            globs: Globs::AfterDashDash,
            bad_long: &["--pre"],
            ..ANY
        },
        // `find -delete`, `-exec` and friends write or execute.
        "find" => Spec {
            globs: Globs::AfterDashDash,
            bad_exact: &[
                "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf",
                "-fls",
            ],
            ..ANY
        },
        // `lsof -r` / `+r` repeat forever.
        "lsof" => Spec {
            bad_short: "r",
            bad_prefix: &["+r"],
            ..ANY
        },
        "cd" => Spec {
            max_positional: Some(1),
            ..ANY
        },
        _ => return None,
    })
}

pub(super) fn check_segment(words: &[Word]) -> Result<(), Refusal> {
    let Some(first) = words.first() else {
        return refuse("empty command");
    };
    let name = first.text.as_str();
    if first.dynamic {
        return refuse("the command name must be literal");
    }
    if first
        .bare
        .split_once('=')
        .is_some_and(|(lhs, _)| lhs.starts_with(is_name_start) && lhs.chars().all(is_name_char))
    {
        return refuse("variable assignments are not a glance");
    }
    if name.contains('/') {
        return refuse(format!("`{name}`: use the bare command name"));
    }
    let args = &words[1..];
    for w in args {
        if is_brace_expansion(&w.bare) {
            return refuse("brace expansion is not a glance");
        }
    }
    if matches!(first.bare.as_str(), "{" | "}") {
        return refuse("grouping is not a glance");
    }
    match name {
        "git" => check_git(args),
        "sed" => check_sed(args),
        "env" => {
            if args.is_empty() {
                Ok(())
            } else {
                refuse("`env` with arguments runs or changes something: not a glance")
            }
        }
        "hostname" => {
            const OK: &[&str] = &[
                "-f",
                "-s",
                "-i",
                "-I",
                "-d",
                "-a",
                "-A",
                "--fqdn",
                "--long",
                "--short",
                "--ip-address",
                "--all-ip-addresses",
                "--domain",
                "--alias",
                "--all-fqdns",
            ];
            match args
                .iter()
                .find(|a| !OK.contains(&a.text.as_str()) || a.dynamic)
            {
                None => Ok(()),
                Some(a) => refuse(format!(
                    "`hostname {}` may change the host name: not a glance",
                    a.text
                )),
            }
        }
        _ => match simple_spec(name) {
            Some(spec) => check_spec(name, &spec, args),
            None => refuse(format!(
                "`{name}` is not an ephemeral read-only command; delegate it"
            )),
        },
    }
}

/// `{a,b}` or `{1..3}` outside quotes (the shell would expand it into several words).
fn is_brace_expansion(bare: &str) -> bool {
    let mut rest = bare;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return false;
        };
        let inner = &after[..close];
        if inner.contains(',') || inner.contains("..") {
            return true;
        }
        rest = &after[close + 1..];
    }
    false
}

/// Walks `args` against `spec`.
fn check_spec(name: &str, spec: &Spec, args: &[Word]) -> Result<(), Refusal> {
    let mut positional = 0usize;
    let mut after_dd = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        i += 1;
        if a.dynamic && !after_dd && spec.globs == Globs::AfterDashDash {
            return refuse(format!(
                "`{name}`: put patterns and variables after `--` (or quote them)"
            ));
        }
        if !after_dd && spec.bad_prefix.iter().any(|p| t.starts_with(p)) {
            return refuse(format!("`{name} {t}` never ends: not a glance"));
        }
        if after_dd || t == "-" || !t.starts_with('-') {
            positional += 1;
            continue;
        }
        if t == "--" {
            after_dd = true;
            continue;
        }
        if spec.bad_exact.contains(&t) {
            return refuse(format!("`{name} {t}` writes or executes: not a glance"));
        }
        if let Some(long) = t.strip_prefix("--") {
            let key = long.split('=').next().unwrap_or(long);
            if spec
                .bad_long
                .iter()
                .any(|b| b.trim_start_matches("--") == key)
            {
                return refuse(format!(
                    "`{name} --{key}` writes, executes or never ends: not a glance"
                ));
            }
            continue;
        }
        // A short-option cluster: `-rn`, `-n5`, `-k 2`.
        let cluster = &t[1..];
        for (k, ch) in cluster.char_indices() {
            if spec.bad_short.contains(ch) {
                return refuse(format!(
                    "`{name} -{ch}` writes, executes or never ends: not a glance"
                ));
            }
            if spec.value_short.contains(ch) {
                if k + ch.len_utf8() == cluster.len() {
                    i += 1; // the value is the next word
                }
                break;
            }
        }
    }
    if let Some(max) = spec.max_positional {
        if positional > max {
            return refuse(format!(
                "`{name}` with {positional} file arguments may write the last one"
            ));
        }
    }
    Ok(())
}

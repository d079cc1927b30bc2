//! `git`: read-only subcommands only, listing forms of `branch`/`tag`/`stash`/`worktree`.

use super::lex::Word;
use super::{refuse, Refusal};

pub(super) fn check_git(args: &[Word]) -> Result<(), Refusal> {
    let Some(i) = subcommand_at(args)? else {
        return Ok(());
    };
    let Some(sub) = args.get(i) else {
        return refuse("`git` needs a read-only subcommand");
    };
    let rest = &args[i + 1..];
    let sub = sub.text.as_str();
    // Dynamic words (globs, $VAR) only as pathspecs after `--`.
    let mut after_dd = false;
    for w in rest {
        if w.text == "--" && !w.dynamic {
            after_dd = true;
        } else if w.dynamic && !after_dd {
            return refuse("`git`: put patterns and variables after `--`");
        }
    }
    let opts: Vec<&str> = rest
        .iter()
        .take_while(|w| w.text != "--")
        .map(|w| w.text.as_str())
        .collect();
    let has = |names: &[&str]| opts.iter().any(|o| names.contains(o));
    let long_prefixed = |prefix: &str| opts.iter().any(|o| o.starts_with(prefix));
    let positional: Vec<&str> = opts
        .iter()
        .copied()
        .filter(|o| !o.starts_with('-'))
        .collect();
    match sub {
        "status" | "show-ref" | "rev-parse" | "describe" | "ls-files" | "ls-tree" | "cat-file"
        | "rev-list" | "count-objects" | "check-ignore" | "merge-base" | "name-rev" | "var"
        | "for-each-ref" | "cherry" | "blame" | "shortlog" | "whatchanged" | "diff" | "log"
        | "show" => {
            if long_prefixed("--output") {
                return refuse("`git --output` writes a file: not a glance");
            }
            Ok(())
        }
        "grep" => {
            if has(&["-O"])
                || long_prefixed("--open-files-in-pager")
                || opts.iter().any(|o| o.starts_with("-O"))
            {
                return refuse("`git grep -O` runs a pager program: not a glance");
            }
            Ok(())
        }
        "branch" | "tag" => check_refs(sub, &opts),
        "stash" => match positional.first() {
            Some(&"list") | Some(&"show") => Ok(()),
            _ => refuse("only `git stash list` / `git stash show` are a glance"),
        },
        "worktree" => match positional.first() {
            Some(&"list") => Ok(()),
            _ => refuse("only `git worktree list` is a glance"),
        },
        "reflog" => match positional.first() {
            Some(&"expire") | Some(&"delete") => {
                refuse("only `git reflog` / `git reflog show` are a glance")
            }
            _ => Ok(()),
        },
        "remote" => match positional.first() {
            None | Some(&"get-url") => Ok(()),
            _ => refuse("only `git remote [-v]` / `git remote get-url` are a glance"),
        },
        "config" => check_config(&opts),
        _ => refuse(format!(
            "`git {sub}` is not a read-only glance; delegate it"
        )),
    }
}

/// Where the subcommand is, after the global options before it; `None` for a lone
/// `--version` / `--help`.
fn subcommand_at(args: &[Word]) -> Result<Option<usize>, Refusal> {
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if args[i].dynamic {
            return refuse("`git`: patterns and variables only after `--`");
        }
        match t {
            "--no-pager" | "-P" | "--no-optional-locks" | "--literal-pathspecs" | "--bare" => {
                i += 1
            }
            "-C" => i += 2,
            "--version" | "--help" if i + 1 == args.len() => return Ok(None),
            _ if t.starts_with("--git-dir=") || t.starts_with("--work-tree=") => i += 1,
            _ if t.starts_with('-') => {
                return refuse(format!("`git {t}` is not allowed in a glance"))
            }
            _ => break,
        }
    }
    Ok(Some(i))
}

/// `git branch` / `git tag`: listing forms only (`opts`: the words before `--`).
fn check_refs(sub: &str, opts: &[&str]) -> Result<(), Refusal> {
    let has = |names: &[&str]| opts.iter().any(|o| names.contains(o));
    let (bad_short, bad_long): (&str, &[&str]) = if sub == "branch" {
        (
            "dDmMcCfu",
            &[
                "--delete",
                "--move",
                "--copy",
                "--force",
                "--set-upstream-to",
                "--unset-upstream",
                "--edit-description",
                "--track",
                "--no-track",
                "--create-reflog",
            ],
        )
    } else {
        (
            "dasmfFue",
            &[
                "--delete",
                "--annotate",
                "--sign",
                "--message",
                "--file",
                "--force",
                "--edit",
                "--local-user",
                "--create-reflog",
                "--cleanup",
            ],
        )
    };
    for o in opts {
        if let Some(long) = o.strip_prefix("--") {
            let key = long.split('=').next().unwrap_or(long);
            if bad_long.iter().any(|b| b.trim_start_matches("--") == key) {
                return refuse(format!("`git {sub} --{key}` changes refs: not a glance"));
            }
        } else if let Some(cluster) = o.strip_prefix('-') {
            if let Some(ch) = cluster.chars().find(|c| bad_short.contains(*c)) {
                return refuse(format!("`git {sub} -{ch}` changes refs: not a glance"));
            }
        }
    }
    // Positional arguments create a branch or tag unless listing with a pattern, or they
    // are the value of a filter option.
    let listing = has(&["-l", "--list"]);
    const VALUE_OPTS: &[&str] = &[
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--sort",
        "--format",
    ];
    let mut k = 0;
    while k < opts.len() {
        let o = opts[k];
        if VALUE_OPTS.contains(&o) {
            k += 2;
            continue;
        }
        if !o.starts_with('-') && !listing {
            return refuse(format!(
                "`git {sub} {o}` creates a {sub}: not a glance (list with `--list`)"
            ));
        }
        k += 1;
    }
    Ok(())
}

/// `git config`: reading forms only.
fn check_config(opts: &[&str]) -> Result<(), Refusal> {
    let has = |names: &[&str]| opts.iter().any(|o| names.contains(o));
    const READS: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--list",
        "-l",
        "--get-urlmatch",
        "get",
        "list",
    ];
    const WRITES: &[&str] = &[
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--edit",
        "-e",
        "--rename-section",
        "--remove-section",
        "set",
        "unset",
        "edit",
        "rename-section",
        "remove-section",
    ];
    if has(WRITES) || !has(READS) {
        return refuse("only reading `git config` (`--get`, `--list`) is a glance");
    }
    Ok(())
}

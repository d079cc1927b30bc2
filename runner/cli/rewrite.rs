//! Default-subcommand rewriting (seed 000, "调用形式"): `flowerbox "做 X"` becomes
//! `flowerbox go "做 X"` before clap sees it.
//!
//! The rules, all derived from the clap [`Command`] itself (no hard-coded lists):
//! 1. global switches are the top-level non-positional arguments; those whose action takes a
//!    value are valued switches, the rest are flags;
//! 2. scan left to right skipping global switches (a valued one with its value; `--x=y` too);
//! 3. stop at the first other token: a subcommand name is left alone, anything else gets `go`
//!    inserted in front of it (so it becomes `go`'s request or `go`'s switch);
//! 4. nothing but global switches (or nothing at all) → `go` appended;
//! 5. `-h`/`--help` anywhere → unchanged.
//!
//! Unlike flower, every registered subcommand counts (`setup`, `doctor`, `gc` are reachable);
//! `flowerbox go setup` still makes "setup" the request text.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::Command;

/// The default subcommand.
pub const DEFAULT_SUBCOMMAND: &str = "go";

/// The global switches and subcommand names of a parser.
#[derive(Debug, Clone)]
pub struct Grammar {
    /// Spellings of global switches that take no value (`-v`, `--verbose`, ...).
    pub flags: BTreeSet<String>,
    /// Spellings of global switches that take a value (`-w`, `--workspace`, ...).
    pub valued: BTreeSet<String>,
    /// Subcommand names.
    pub subcommands: BTreeSet<String>,
}

impl Grammar {
    /// Reads the grammar off `cmd` (the top-level parser).
    pub fn from_command(cmd: &Command) -> Self {
        let mut flags = BTreeSet::new();
        let mut valued = BTreeSet::new();
        for arg in cmd.get_arguments().filter(|a| !a.is_positional()) {
            let set = if arg.get_action().takes_values() {
                &mut valued
            } else {
                &mut flags
            };
            if let Some(short) = arg.get_short() {
                set.insert(format!("-{short}"));
            }
            if let Some(long) = arg.get_long() {
                set.insert(format!("--{long}"));
            }
        }
        let subcommands = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        Self {
            flags,
            valued,
            subcommands,
        }
    }

    /// Applies the rules to `args` (argv without the program name).
    pub fn rewrite(&self, args: &[OsString]) -> Vec<OsString> {
        if args.iter().any(|a| a == "-h" || a == "--help") {
            return args.to_vec();
        }
        let mut i = 0;
        while i < args.len() {
            let Some(token) = args[i].to_str() else {
                break;
            };
            if self.flags.contains(token) {
                i += 1;
            } else if self.valued.contains(token) {
                i += 2;
            } else if token.starts_with("--")
                && token
                    .split_once('=')
                    .is_some_and(|(name, _)| self.valued.contains(name))
            {
                i += 1;
            } else {
                break;
            }
        }
        let mut out = args.to_vec();
        if i > args.len() {
            // A valued switch at the very end is missing its value: let clap say so rather
            // than feed it `go` as the value.
            return out;
        }
        if i == args.len() {
            out.push(DEFAULT_SUBCOMMAND.into());
        } else if !args[i]
            .to_str()
            .is_some_and(|t| self.subcommands.contains(t))
        {
            out.insert(i, DEFAULT_SUBCOMMAND.into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::CommandFactory;

    fn rewrite(args: &[&str]) -> Vec<String> {
        let grammar = Grammar::from_command(&Cli::command());
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        grammar
            .rewrite(&args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn grammar_is_derived_from_the_parser() {
        let g = Grammar::from_command(&Cli::command());
        for f in ["-v", "--verbose", "-W", "--workbench", "-T", "--trim"] {
            assert!(g.flags.contains(f), "{f}");
        }
        for v in [
            "-w",
            "--workspace",
            "-r",
            "--run-dir",
            "--sandbox",
            "--image",
        ] {
            assert!(g.valued.contains(v), "{v}");
        }
        let subs: Vec<_> = g.subcommands.iter().map(String::as_str).collect();
        assert_eq!(subs, ["doctor", "gc", "go", "once", "run", "setup"]);
    }

    // The seed's table "实际的改写结果", one test per row.
    #[test]
    fn row_bare() {
        assert_eq!(rewrite(&[]), ["go"]);
    }
    #[test]
    fn row_verbose_only() {
        assert_eq!(rewrite(&["-v"]), ["-v", "go"]);
    }
    #[test]
    fn row_request() {
        assert_eq!(rewrite(&["帮我做一个 X"]), ["go", "帮我做一个 X"]);
    }
    #[test]
    fn row_workspace_then_request() {
        assert_eq!(
            rewrite(&["-w", "/tmp", "做 X"]),
            ["-w", "/tmp", "go", "做 X"]
        );
    }
    #[test]
    fn row_equals_form() {
        assert_eq!(
            rewrite(&["--workspace=/tmp", "做 X"]),
            ["--workspace=/tmp", "go", "做 X"]
        );
    }
    #[test]
    fn row_switch_after_request() {
        assert_eq!(
            rewrite(&["做 X", "--timeout", "0"]),
            ["go", "做 X", "--timeout", "0"]
        );
    }
    #[test]
    fn row_switch_before_request() {
        assert_eq!(
            rewrite(&["--timeout", "0", "做 X"]),
            ["go", "--timeout", "0", "做 X"]
        );
    }
    #[test]
    fn row_new_only() {
        assert_eq!(rewrite(&["--new"]), ["go", "--new"]);
    }
    #[test]
    fn row_once() {
        assert_eq!(rewrite(&["once", "hi"]), ["once", "hi"]);
    }
    #[test]
    fn row_run() {
        assert_eq!(rewrite(&["run", "flows:main"]), ["run", "flows:main"]);
    }
    #[test]
    fn row_run_without_target() {
        assert_eq!(rewrite(&["run"]), ["run"]);
    }
    #[test]
    fn row_go_run() {
        assert_eq!(rewrite(&["go", "run"]), ["go", "run"]);
    }
    #[test]
    fn row_setup_is_reachable() {
        // flower rewrote this to ["go", "setup"] (its _CMDS bug); flowerbox fixes it.
        assert_eq!(rewrite(&["setup"]), ["setup"]);
        assert_eq!(rewrite(&["-v", "setup"]), ["-v", "setup"]);
        assert_eq!(rewrite(&["go", "setup"]), ["go", "setup"]);
    }
    #[test]
    fn row_help() {
        assert_eq!(rewrite(&["--help"]), ["--help"]);
        assert_eq!(rewrite(&["-h"]), ["-h"]);
        assert_eq!(rewrite(&["做 X", "-h"]), ["做 X", "-h"]);
    }

    #[test]
    fn doctor_and_gc_are_subcommands() {
        assert_eq!(rewrite(&["doctor"]), ["doctor"]);
        assert_eq!(rewrite(&["-w", "/x", "gc"]), ["-w", "/x", "gc"]);
        assert_eq!(rewrite(&["go", "doctor"]), ["go", "doctor"]);
    }

    #[test]
    fn new_global_switches_skip_their_values() {
        assert_eq!(
            rewrite(&["--sandbox", "host", "--image=img:1", "做 X"]),
            ["--sandbox", "host", "--image=img:1", "go", "做 X"]
        );
        assert_eq!(
            rewrite(&["-r", "runs2", "-W", "-T"]),
            ["-r", "runs2", "-W", "-T", "go"]
        );
    }

    #[test]
    fn valued_switch_missing_its_value_is_left_to_clap() {
        assert_eq!(rewrite(&["-w"]), ["-w"]);
    }

    #[test]
    fn a_value_that_looks_like_a_subcommand_is_a_value() {
        assert_eq!(rewrite(&["-w", "run", "做 X"]), ["-w", "run", "go", "做 X"]);
    }

    #[test]
    fn unknown_switch_goes_to_go() {
        assert_eq!(rewrite(&["--bogus"]), ["go", "--bogus"]);
    }
}

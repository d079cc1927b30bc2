//! The start prompt (seed 000, "起跑时的提示符", "管道喂 stdin"): asks for the request when
//! `go` got none.
//!
//! On a terminal it prints one of two headers, then `> `. Bare Enter continues a woken directory
//! and is [`CliError::EmptyRequest`] on a fresh one; `/new` means `--new` and asks again;
//! Ctrl-C/Ctrl-D is [`CliError::Cancelled`]. When stdin is not a terminal it reads one line
//! after `> ` without the header and without echoing it (flower's `input("> ")`); nothing (or an empty line) on a fresh directory is
//! [`CliError::NeedRequest`].

use std::io::Write;

use super::error::CliError;
use crate::creds::input::{LineRead, LineSource};

/// The header on a fresh directory.
pub const PROMPT_FRESH: &str = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)";
/// The header on a woken directory (its `需求.md` is complete).
pub const PROMPT_WOKEN: &str =
    "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)";
/// Printed when `go` runs with a non-terminal stdin and questions would wait.
pub const NOT_A_TERMINAL_WARNING: &str =
    "! 标准输入不是终端,没人能回答提问。想让它自己判断就加 --timeout 0";

/// What the human asked for at the start prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAnswer {
    /// The request; `None` = continue last time (only on a woken directory).
    pub ask: Option<String>,
    /// `--new` was given or `/new` typed.
    pub new: bool,
}

/// Asks for the request. `woken` says whether the directory was woken (ignoring `new`, which
/// makes it fresh); `interactive` whether stdin is a terminal.
///
/// Errors: [`CliError::Cancelled`], [`CliError::EmptyRequest`], [`CliError::NeedRequest`],
/// terminal I/O failures.
pub fn ask_for_request(
    woken: bool,
    new: bool,
    interactive: bool,
    input: &mut dyn LineSource,
    out: &mut dyn Write,
) -> Result<StartAnswer, CliError> {
    let mut new = new;
    loop {
        let woken_now = woken && !new;
        if interactive {
            let header = if woken_now {
                PROMPT_WOKEN
            } else {
                PROMPT_FRESH
            };
            writeln!(out, "{header}").map_err(CliError::terminal)?;
        }
        write!(out, "> ").map_err(CliError::terminal)?;
        out.flush().map_err(CliError::terminal)?;
        let text = match input.read_line().map_err(CliError::terminal)? {
            LineRead::Line(line) => line.trim().to_string(),
            LineRead::Eof if !interactive => String::new(),
            LineRead::Eof | LineRead::Interrupted => {
                // Keep the cancel message off the prompt line.
                writeln!(out).map_err(CliError::terminal)?;
                return Err(CliError::Cancelled);
            }
        };
        if !interactive {
            // No terminal ended the prompt's line with the human's Enter: end it, without
            // echoing what was read (flower's `input("> ")` echoes nothing either).
            writeln!(out).map_err(CliError::terminal)?;
        }
        if text == "/new" {
            new = true;
            continue;
        }
        if !text.is_empty() {
            return Ok(StartAnswer {
                ask: Some(text),
                new,
            });
        }
        if woken_now {
            return Ok(StartAnswer { ask: None, new });
        }
        return Err(if interactive {
            CliError::EmptyRequest
        } else {
            CliError::NeedRequest
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::input::ScriptedLines;

    fn run(
        woken: bool,
        new: bool,
        interactive: bool,
        script: Vec<LineRead>,
    ) -> (Result<StartAnswer, CliError>, String) {
        let mut input = ScriptedLines(script.into());
        let mut out = Vec::new();
        let r = ask_for_request(woken, new, interactive, &mut input, &mut out);
        (r, String::from_utf8(out).unwrap())
    }

    fn line(s: &str) -> LineRead {
        LineRead::Line(s.to_string())
    }

    #[test]
    fn fresh_terminal_prompt() {
        let (r, out) = run(false, false, true, vec![line("  做 X  ")]);
        assert_eq!(
            r.unwrap(),
            StartAnswer {
                ask: Some("做 X".into()),
                new: false
            }
        );
        assert_eq!(out, format!("{PROMPT_FRESH}\n> "));
    }

    #[test]
    fn woken_terminal_prompt_and_bare_enter() {
        let (r, out) = run(true, false, true, vec![line("")]);
        assert_eq!(
            r.unwrap(),
            StartAnswer {
                ask: None,
                new: false
            }
        );
        assert!(out.starts_with(PROMPT_WOKEN));
    }

    #[test]
    fn empty_on_fresh_directory() {
        let (r, _) = run(false, false, true, vec![line("   ")]);
        let e = r.unwrap_err();
        assert!(matches!(e, CliError::EmptyRequest));
        assert_eq!(
            e.to_string(),
            "诉求是空的。直接 `flowerbox` 然后按提示输入,或者 flowerbox \"帮我做一个 X\"。"
        );
    }

    #[test]
    fn slash_new_asks_again_as_fresh() {
        let (r, out) = run(true, false, true, vec![line("/new"), line("新的事")]);
        assert_eq!(
            r.unwrap(),
            StartAnswer {
                ask: Some("新的事".into()),
                new: true
            }
        );
        assert_eq!(out, format!("{PROMPT_WOKEN}\n> {PROMPT_FRESH}\n> "));
        // After /new the directory is fresh: an empty answer is no longer "continue".
        let (r, _) = run(true, false, true, vec![line("/new"), line("")]);
        assert!(matches!(r.unwrap_err(), CliError::EmptyRequest));
    }

    #[test]
    fn new_switch_makes_a_woken_directory_fresh() {
        let (_, out) = run(true, true, true, vec![line("x")]);
        assert!(out.starts_with(PROMPT_FRESH));
    }

    #[test]
    fn ctrl_c_and_ctrl_d_cancel() {
        for read in [LineRead::Interrupted, LineRead::Eof] {
            let (r, _) = run(false, false, true, vec![read]);
            let e = r.unwrap_err();
            assert!(matches!(e, CliError::Cancelled));
            assert_eq!(e.to_string(), "已取消");
            assert_eq!(e.exit_code(), 1);
        }
    }

    #[test]
    fn piped_stdin_reads_one_line_without_header() {
        let (r, out) = run(false, false, false, vec![line("做 X"), line("ignored")]);
        assert_eq!(r.unwrap().ask.as_deref(), Some("做 X"));
        // As flower's `input("> ")`: the prompt, no echo of the line read (issue 29 §2.6).
        assert_eq!(out, "> \n");
        let (r, _) = run(false, false, false, vec![]);
        assert!(matches!(r.unwrap_err(), CliError::NeedRequest));
        let (r, _) = run(true, false, false, vec![]);
        assert_eq!(r.unwrap().ask, None);
    }
}

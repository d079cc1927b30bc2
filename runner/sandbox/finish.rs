//! How every backend finishes a command's result and says how a process ended (issue 31 §3:
//! one definition each): the captured output moved into the [`ExecOutput`], the note on a
//! program the shell could not find (exit 127, detected in one way for every backend: the
//! shell's own message, [`not_found_programs`]) and the note on an exit code that says a
//! signal killed the command (above 128).

use regex::Regex;
use std::path::Path;
use std::sync::LazyLock;

use super::output::CapturedOutput;
use super::ExecOutput;

/// Where a command ran, for the words of its notes.
#[derive(Debug, Clone, Copy)]
pub enum RanIn<'a> {
    /// As a host process (`--sandbox host`) in this directory.
    Host(&'a Path),
    /// In a container of this image.
    Image(&'a str),
}

/// bash: `bash: line 1: foo: command not found`; dash: `sh: 1: foo: not found`.
#[allow(clippy::expect_used, reason = "a literal regex, compiled by the tests")]
static NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^[^:\n]*: (?:line )?\d+: ([^:\n]+): (?:command )?not found\s*$")
        .expect("valid regex")
});

/// The programs a shell's `stderr` says it could not find, in the order of its lines (bash and
/// dash wording; bash's `cannot execute: required file not found` for a file that is there but
/// cannot start is not one).
pub fn not_found_programs(stderr: &str) -> Vec<String> {
    NOT_FOUND
        .captures_iter(stderr)
        .map(|c| c[1].to_string())
        .collect()
}

/// The signal a shell's exit code says killed its command (`128 + n`, 129 to 159).
pub fn signal_of_exit(code: i64) -> Option<nix::sys::signal::Signal> {
    (129..=159)
        .contains(&code)
        .then(|| nix::sys::signal::Signal::try_from((code - 128) as i32).ok())
        .flatten()
}

/// `result` of a command that ended (or was stopped) as it says, with the output `captured`
/// and `notes` so far; the notes on a program not found (exit 127) and on an exit code that
/// says a signal killed it are added.
pub fn finish(
    mut result: ExecOutput,
    captured: CapturedOutput,
    mut notes: Vec<String>,
    ran_in: RanIn<'_>,
) -> ExecOutput {
    if result.exit_code == Some(127) {
        let missing = not_found_programs(&captured.stderr);
        match ran_in {
            RanIn::Image(image) => notes.extend(
                missing
                    .iter()
                    .map(|p| format!("`{p}`: not found in the image ({image})")),
            ),
            RanIn::Host(cwd) => {
                for p in missing {
                    // A path that is there was found: it could not start (dash says "not
                    // found" for a `#!` line ending in `\r`, a missing interpreter).
                    if p.contains('/') && cwd.join(&p).exists() {
                        continue;
                    }
                    notes.push(format!(
                        "程序不存在:这台机器上找不到 {p}(命令在宿主机上执行)"
                    ));
                }
            }
        }
    }
    if let Some(code) = result.exit_code {
        if let Some(sig) = signal_of_exit(code) {
            notes.push(format!(
                "exit code {code}: probably killed by {}",
                sig.as_str()
            ));
        }
    }
    result.stdout = captured.stdout;
    result.stderr = captured.stderr;
    result.truncated = captured.truncated;
    result.total_bytes = captured.total_bytes;
    result.full_output = captured.full_output;
    result.full_output_omitted = captured.full_output_omitted;
    result.notes.extend(notes);
    result
}

/// How a long-lived process (an attached MCP server) ended, in words: its exit `code`, or the
/// `signal` that killed it; `program` and where it ran for an exit code that says it could not
/// be found or run.
pub fn ended(code: Option<i64>, signal: Option<i32>, program: &str, ran_in: RanIn<'_>) -> String {
    match (code, signal) {
        (Some(c), _) => match (signal_of_exit(c), c, ran_in) {
            (Some(sig), _, _) => format!("退出码 {c}(多半是被 {} 杀掉的)", sig.as_str()),
            (None, 126 | 127, RanIn::Image(image)) => format!(
                "退出码 {c}:{program} 在容器里找不到或不能执行(镜像 {image} 的 PATH 里有它吗?)"
            ),
            (None, 126 | 127, RanIn::Host(_)) => {
                format!("退出码 {c}:{program} 在这台机器上找不到或不能执行")
            }
            _ => format!("退出码 {c}"),
        },
        (None, Some(s)) => match nix::sys::signal::Signal::try_from(s) {
            Ok(sig) => format!("被 {} 杀掉了", sig.as_str()),
            Err(_) => format!("被信号 {s} 杀掉了"),
        },
        (None, None) => "退出码未知".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_bash_and_dash() {
        let bash = "bash: line 1: frobnicate: command not found\n";
        let dash = "sh: 1: zap: not found\n";
        let other = "bash: line 1: ./x: No such file or directory\n";
        assert_eq!(not_found_programs(bash), ["frobnicate"]);
        assert_eq!(not_found_programs(dash), ["zap"]);
        assert!(not_found_programs(other).is_empty());
        let crlf = "bash: line 1: ./run.sh: cannot execute: required file not found\n";
        assert!(not_found_programs(crlf).is_empty());
    }

    #[test]
    fn both_backends_get_the_same_notes_in_their_words() {
        let captured = CapturedOutput {
            stderr: "bash: line 1: frobnicate: command not found\n".into(),
            ..Default::default()
        };
        let result = ExecOutput {
            exit_code: Some(127),
            ..Default::default()
        };
        let image = finish(
            result.clone(),
            captured.clone(),
            Vec::new(),
            RanIn::Image("img"),
        );
        assert_eq!(image.notes, ["`frobnicate`: not found in the image (img)"]);
        let here = Path::new("/");
        let host = finish(result, captured, Vec::new(), RanIn::Host(here));
        assert_eq!(
            host.notes,
            ["程序不存在:这台机器上找不到 frobnicate(命令在宿主机上执行)"]
        );
        let killed = ExecOutput {
            exit_code: Some(137),
            ..Default::default()
        };
        let k = finish(
            killed,
            CapturedOutput::default(),
            Vec::new(),
            RanIn::Host(here),
        );
        assert_eq!(k.notes, ["exit code 137: probably killed by SIGKILL"]);
        assert_eq!(
            ended(Some(137), None, "x", RanIn::Host(here)),
            "退出码 137(多半是被 SIGKILL 杀掉的)"
        );
        assert_eq!(
            ended(None, Some(9), "x", RanIn::Host(here)),
            "被 SIGKILL 杀掉了"
        );
        assert!(ended(Some(127), None, "srv", RanIn::Image("img")).contains("镜像 img"));
    }
}

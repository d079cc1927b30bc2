//! The CRLF hint of `Bash`: a script saved with Windows line endings fails with "bad
//! interpreter" or "required file not found" for its `#!…\r` line, and every line of it run by
//! a shell ends in a stray `\r`; the messages never say so. The hint names the file and the fix.
//!
//! Decided on the command's shape and the file's bytes, never on the error text: a file the
//! command runs (the first word of a simple command, the script of `bash`/`sh`/`source`…, the
//! program after `env`/`exec`/`nohup`…) gets the hint whatever the command's exit status, so
//! `./run.sh; echo $?` gets it too; after an exit status of 126 or 127 every file the command
//! names is looked at. One hint per file, however it is spelled (`run.sh`, `./run.sh`).

use std::collections::HashSet;
use std::path::Path;

use super::ToolContext;

/// Most words of a command looked at.
const CANDIDATES: usize = 16;

/// Shells and `source`: their first operand is a script they run.
const SHELLS: [&str; 8] = ["bash", "sh", "dash", "zsh", "ksh", "busybox", "source", "."];

/// Commands that run the program named after their own options and operands.
const PREFIXES: [&str; 9] = [
    "env", "exec", "nohup", "time", "nice", "command", "timeout", "xargs", "sudo",
];

/// Hints for `command`'s CRLF files, read through the agent's own view (as the file tools
/// read). `cannot_start`: the command exited 126 or 127.
pub(super) async fn hints(ctx: &ToolContext, command: &str, cannot_start: bool) -> Vec<String> {
    let mut words = run_words(command);
    if cannot_start {
        words.extend(all_words(command));
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for word in words.into_iter().take(CANDIDATES) {
        if !seen.insert(word.to_string()) {
            continue;
        }
        let Ok(abs) = ctx.confine.absolute(word) else {
            continue;
        };
        let head = ctx.files.head(ctx.confine.view(), &abs, 512).await;
        let Ok((path, head)) = head else { continue };
        // `crlf.sh` and `./crlf.sh` are one file: one hint.
        if !seen.insert(path.display().to_string()) {
            continue;
        }
        if let Some(h) = hint(&path, &head) {
            out.push(h);
        }
    }
    out
}

/// The words of `command`, split at blanks and shell operators, unquoted; without options,
/// assignments and words a shell would expand.
fn all_words(command: &str) -> Vec<&str> {
    command
        .split(|c: char| c.is_whitespace() || ";|&()<>`".contains(c))
        .map(|w| w.trim_matches(['"', '\'']))
        .filter(|w| !w.is_empty() && !w.starts_with('-') && !w.contains(['=', '$', '*', '?']))
        .collect()
}

/// The files `command` runs: in each simple command (split at `;`, `&`, `|`, `(`, `)`, a
/// newline or a backquote), the first word that is not an assignment; a shell's script; the
/// program after a prefix command.
fn run_words(command: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for simple in command.split(|c: char| ";&|()\n`".contains(c)) {
        let mut words = simple
            .split(|c: char| c.is_whitespace() || "<>".contains(c))
            .map(|w| w.trim_matches(['"', '\'']))
            .filter(|w| !w.is_empty() && !is_assignment(w));
        while let Some(w) = words.next() {
            if w.starts_with('-') || w.contains(['$', '*', '?']) {
                continue;
            }
            let name = w.rsplit('/').next().unwrap_or(w);
            if SHELLS.contains(&name) {
                // `bash -x run.sh`: the first operand (`bash -c '…'` runs no file).
                let mut rest = words.by_ref().skip_while(|a| a.starts_with('-'));
                if let Some(script) = rest.next() {
                    out.push(script);
                }
                break;
            }
            if PREFIXES.contains(&name) {
                // `timeout 10 ./run.sh`: a number is the prefix's own operand.
                continue;
            }
            if is_duration(w) {
                continue;
            }
            out.push(w);
            break;
        }
    }
    out
}

/// `10`, `2.5`, `30s`, `5m`: a prefix command's own operand (`timeout`, `nice -n`).
fn is_duration(w: &str) -> bool {
    let number = w.strip_suffix(['s', 'm', 'h']).unwrap_or(w);
    number.parse::<f64>().is_ok()
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The hint for a file starting with `head`, when its first line ends in `\r`. The fix is
/// shell-quoted: a path with a space works as given.
fn hint(path: &Path, head: &[u8]) -> Option<String> {
    let first = &head[..head.iter().position(|&b| b == b'\n')?];
    if first.last() != Some(&b'\r') {
        return None;
    }
    let fix = format!(
        "sed -i 's/\\r$//' {}",
        crate::sandbox::shell_quote(&path.display().to_string())
    );
    Some(if first.starts_with(b"#!") {
        let interpreter = String::from_utf8_lossy(&first[2..first.len() - 1]);
        format!(
            "[{} 的行尾是 CRLF(Windows 换行):#! 那一行末尾多了一个 \\r,系统去找名叫 \"{}\\r\" 的解释器,所以找不到。改成 LF 再跑:{fix}(或 dos2unix)]",
            path.display(),
            interpreter.trim()
        )
    } else {
        format!(
            "[{} 的行尾是 CRLF(Windows 换行):shell 把每行末尾的 \\r 当成命令的一部分。改成 LF 再跑:{fix}(或 dos2unix)]",
            path.display()
        )
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::bash::BashTool;
    use super::super::Tool;
    use super::*;
    use serde_json::json;

    #[test]
    fn hints_name_the_file_and_the_fix() {
        let p = Path::new("/ws/run.sh");
        let h = hint(p, b"#!/bin/bash\r\necho hi\r\n").unwrap();
        assert!(h.contains("/ws/run.sh 的行尾是 CRLF"), "{h}");
        assert!(h.contains("\"/bin/bash\\r\""), "{h}");
        assert!(h.contains("sed -i 's/\\r$//' '/ws/run.sh'"), "{h}");
        let plain = hint(p, b"echo hi\r\n").unwrap();
        assert!(plain.contains("shell 把每行末尾的 \\r"), "{plain}");
        assert_eq!(hint(p, b"#!/bin/bash\necho hi\r\n"), None);
        assert_eq!(hint(p, b"#!/bin/bash"), None, "no complete first line");
        // A path with a space and a quote: the fix runs as given.
        let odd = hint(Path::new("/ws/my dir/it's.sh"), b"#!/bin/sh\r\n").unwrap();
        assert!(
            odd.contains("sed -i 's/\\r$//' '/ws/my dir/it'\\''s.sh'"),
            "{odd}"
        );
    }

    #[test]
    fn the_files_a_command_runs() {
        assert_eq!(run_words("./run.sh; echo $?"), ["./run.sh", "echo"]);
        assert_eq!(
            run_words("cd d && X=1 ./a.sh arg | bash -x b.sh c"),
            ["cd", "./a.sh", "b.sh"]
        );
        assert_eq!(run_words("timeout 10 ./t.sh"), ["./t.sh"]);
        assert_eq!(run_words("env -i FOO=1 nohup ./n.sh >log"), ["./n.sh"]);
        assert_eq!(run_words("bash -c 'x'"), ["x"]);
        assert_eq!(run_words("cat data.csv"), ["cat"]);
        assert_eq!(run_words("source ./env.sh"), ["./env.sh"]);
    }

    /// A worker's tool context on the host sandbox over workspace `ws` (also bash.rs's tests).
    pub(in crate::agent::tools) fn ctx(ws: &Path) -> ToolContext {
        let abox = crate::sandbox::AgentBox {
            agent: "worker-1".into(),
            role: crate::role::Role::Worker,
            mounts: vec![crate::sandbox::Mount::same(ws.to_path_buf(), false)],
            masked: Vec::new(),
            workdir: ws.to_path_buf(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        ToolContext::new(
            "worker-1".into(),
            crate::role::Role::Worker,
            0,
            abox,
            Some(std::sync::Arc::new(
                crate::sandbox::host::HostSandboxFactory::new(),
            )),
            None,
            std::sync::Arc::new(crate::agent::human::Absent),
            tokio_util::sync::CancellationToken::new(),
            None,
            super::super::ToolLimits::default(),
        )
    }

    async fn bash(ctx: &ToolContext, command: &str) -> String {
        match BashTool.call(&json!({ "command": command }), ctx).await {
            Ok(t) => t,
            Err(e) => e.to_string(),
        }
    }

    /// Issue 29 §2.5: once per file however spelled, also inside a larger command that
    /// succeeds, the fix shell-quoted, and with `--sandbox host` no "程序不存在".
    #[tokio::test]
    async fn a_crlf_script_that_cannot_start_gets_the_hint() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("my ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("run.sh"), "#!/bin/sh\r\necho hi\r\n").unwrap();
        std::fs::write(ws.join("ok.sh"), "#!/bin/sh\necho fine\n").unwrap();
        std::fs::write(ws.join("data.txt"), "a\r\nb\r\n").unwrap();
        for f in ["run.sh", "ok.sh"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(ws.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let ctx = ctx(&ws);
        let header = format!("[{} 的行尾是 CRLF", ws.join("run.sh").display());
        let err = bash(&ctx, "./ok.sh && ./run.sh").await;
        assert!(err.contains("[退出码 12"), "{err}");
        assert!(err.contains(&header), "{err}");
        assert!(!err.contains("ok.sh 的行尾"), "{err}");
        // Not the host sandbox's "program not found": the program is there.
        assert!(!err.contains("程序不存在"), "{err}");
        // One hint per file however it is spelled; the fix is shell-quoted.
        let err = bash(&ctx, "bash run.sh >/dev/null; ./run.sh; sh ./run.sh").await;
        assert_eq!(err.matches("的行尾是 CRLF").count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "sed -i 's/\\r$//' '{}'",
                ws.join("run.sh").display()
            )),
            "{err}"
        );
        // Inside a command that succeeds.
        let out = bash(&ctx, "./run.sh; echo $?").await;
        assert!(out.contains(&header), "{out}");
        // A CRLF file the command only reads, and another failure, get none.
        let out = bash(&ctx, "cat data.txt").await;
        assert!(!out.contains("CRLF"), "{out}");
        let err = bash(&ctx, "./ok.sh; exit 127").await;
        assert!(!err.contains("CRLF"), "{err}");
        // A program that is not there is still named so.
        let err = bash(&ctx, "flowerbox-no-such-program").await;
        assert!(err.contains("程序不存在"), "{err}");
    }
}

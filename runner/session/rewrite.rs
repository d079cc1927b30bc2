//! What resume feeds back (seed 001 "裁剪", "剪除"; flower `docs/en/guide/context.md`, layer
//! four): the stored entries rewritten by prune, expiry and trim. Pure functions over copies —
//! the rows in `sessions.db` are never touched, so a different policy on the next resume gets
//! the full record back.
//!
//! Order: prune first (notices out, interrupted results neutralised, missing results added so
//! every `tool_use` is answered by the next message), then expiry of ephemeral Bash results,
//! then trim of large results. Results written by prune are left alone by the other two.

use super::{NoticeKind, TrimPolicy};
use crate::agent::glance::is_ephemeral;
use crate::model::{ContentBlock, Message, Speaker};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The neutral note that replaces a tool result the interruption left behind, and answers a
/// tool call that never got a result (crash mid-tool). flower's exact text.
pub const INTERRUPTED_NOTE: &str = "[上一轮在此处被中断,该工具结果未产生]";

/// The tool whose calls can be ephemeral (its input's `command` goes to
/// [`is_ephemeral`]).
pub const BASH_TOOL: &str = "Bash";

/// One stored row of a session, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A conversation message, exactly as appended.
    Message(Message),
    /// A notice: kept for the record, never loaded.
    Notice(NoticeKind, String),
}

/// What one load rewrote (for the wake banner and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Notices left out.
    pub notices: usize,
    /// Tool results replaced by (or added as) [`INTERRUPTED_NOTE`].
    pub interrupted: usize,
    /// Ephemeral results replaced by the expiry note.
    pub expired: usize,
    /// Large results replaced by a spill pointer.
    pub trimmed: usize,
    /// Large results kept verbatim because they are among the most recent.
    pub kept_large: usize,
    /// Characters moved out of the context by trim.
    pub chars_saved: usize,
}

impl TrimReport {
    /// flower's one-line summary (`未裁剪`, `N 个时效性结果标记为过期`,
    /// `裁掉 N 个工具结果(保留最近 K 个),省下 ~T tokens`).
    pub fn summary(&self) -> String {
        if self.trimmed == 0 && self.expired == 0 {
            "未裁剪".to_string()
        } else if self.trimmed == 0 {
            format!("{} 个时效性结果标记为过期", self.expired)
        } else {
            format!(
                "裁掉 {} 个工具结果(保留最近 {} 个),省下 ~{} tokens",
                self.trimmed,
                self.kept_large,
                self.chars_saved / 4
            )
        }
    }
}

/// The expiry note for an ephemeral result (flower's format). `cmd` is shortened to its first
/// line, at most 60 characters, in backticks; `age` is the result's rank among ephemeral
/// results counted from the most recent (the first expired one with 6 kept says `第 7 轮前`),
/// as flower counts it.
pub fn expiry_note(cmd: &str, age: usize) -> String {
    let first = cmd.trim().lines().next().unwrap_or("");
    let short: String = first.chars().take(60).collect();
    format!("[`{short}` 的结果已过期(第 {age} 轮前),当前状态可能已变。需要请重新执行]")
}

/// The one-line pointer that replaces a trimmed result: its size in characters and where to
/// `Read` it back (flower's format).
pub fn spill_pointer(path: &Path, chars: usize) -> String {
    format!(
        "[工具结果已归档:{chars} 字符。完整内容在 {},需要时用 Read 读取]",
        path.display()
    )
}

/// The spill file for `text`: `<spill_dir>/<first 16 hex of sha256>.txt`.
pub fn spill_path(spill_dir: &Path, text: &str) -> PathBuf {
    let digest = Sha256::digest(text.as_bytes());
    spill_dir.join(format!("{}.txt", &hex::encode(digest)[..16]))
}

/// Rewrites stored entries into the history resume feeds the model.
///
/// # Errors
/// I/O errors writing spill files (trim only).
pub fn for_resume(
    entries: &[Entry],
    policy: &TrimPolicy,
) -> std::io::Result<(Vec<Message>, TrimReport)> {
    let mut report = TrimReport::default();
    let (mut msgs, protected) = prune(entries, &mut report);
    expire(&mut msgs, &protected, policy, &mut report);
    if policy.trim_large {
        trim(&mut msgs, &protected, policy, &mut report)?;
    }
    Ok((msgs, report))
}

/// (message index, block index) of results prune wrote; expiry and trim leave them alone.
type Protected = HashSet<(usize, usize)>;

/// Prune (seed 001 "剪除"): notices never enter; results left by an interruption become
/// [`INTERRUPTED_NOTE`]; every assistant `tool_use` is answered in the next message (missing
/// results are added as the note, a missing user message is inserted); results answering no
/// call of the previous message (impossible in a history the API accepted) are dropped.
pub fn prune(entries: &[Entry], report: &mut TrimReport) -> (Vec<Message>, Protected) {
    // Pass 1: messages only; which calls were open when an interruption was recorded.
    let mut msgs: Vec<&Message> = Vec::new();
    let mut interrupted: HashSet<&str> = HashSet::new();
    let mut open: Vec<&str> = Vec::new();
    for e in entries {
        match e {
            Entry::Notice(kind, _) => {
                report.notices += 1;
                if *kind == NoticeKind::Interrupted {
                    interrupted.extend(open.iter().copied());
                }
            }
            Entry::Message(m) => {
                msgs.push(m);
                match m.role {
                    Speaker::Assistant => {
                        open = m.content.iter().filter_map(use_id).collect();
                    }
                    Speaker::User => {
                        let answered: HashSet<&str> =
                            m.content.iter().filter_map(result_id).collect();
                        open.retain(|id| !answered.contains(id));
                    }
                }
            }
        }
    }

    // Pass 2: structure.
    let mut out: Vec<Message> = Vec::with_capacity(msgs.len() + 1);
    let mut protected = Protected::new();
    let mut i = 0;
    while i < msgs.len() {
        let m = msgs[i];
        if m.role == Speaker::User {
            // Not directly after an assistant message with calls: results here answer nothing.
            let kept: Vec<ContentBlock> = m
                .content
                .iter()
                .filter(|b| result_id(b).is_none())
                .cloned()
                .collect();
            if kept.is_empty() && !m.content.is_empty() {
                i += 1;
                continue;
            }
            out.push(Message {
                role: Speaker::User,
                content: kept,
            });
            i += 1;
            continue;
        }
        out.push(m.clone());
        let uses: Vec<&str> = m.content.iter().filter_map(use_id).collect();
        if uses.is_empty() {
            i += 1;
            continue;
        }
        let next = msgs.get(i + 1).filter(|n| n.role == Speaker::User);
        let mut seen: HashSet<&str> = HashSet::new();
        let mut blocks: Vec<ContentBlock> = Vec::new();
        for b in next.map(|n| n.content.as_slice()).unwrap_or(&[]) {
            match result_id(b) {
                Some(id) if uses.contains(&id) && seen.insert(id) => blocks.push(b.clone()),
                Some(_) => {} // duplicate, or answers nothing
                None => blocks.push(b.clone()),
            }
        }
        let at = blocks
            .iter()
            .rposition(|b| result_id(b).is_some())
            .map_or(0, |p| p + 1);
        let missing: Vec<ContentBlock> = uses
            .iter()
            .filter(|id| !seen.contains(*id))
            .map(|id| ContentBlock::ToolResult {
                tool_use_id: (*id).to_string(),
                content: INTERRUPTED_NOTE.to_string(),
                is_error: false,
            })
            .collect();
        let added = missing.len();
        blocks.splice(at..at, missing);
        let idx = out.len();
        for k in at..at + added {
            protected.insert((idx, k));
        }
        report.interrupted += added;
        for (k, b) in blocks.iter_mut().enumerate() {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } = b
            {
                if !protected.contains(&(idx, k)) && interrupted.contains(tool_use_id.as_str()) {
                    *content = INTERRUPTED_NOTE.to_string();
                    protected.insert((idx, k));
                    report.interrupted += 1;
                }
            }
        }
        out.push(Message {
            role: Speaker::User,
            content: blocks,
        });
        i += if next.is_some() { 2 } else { 1 };
    }
    (out, protected)
}

fn use_id(b: &ContentBlock) -> Option<&str> {
    match b {
        ContentBlock::ToolUse { id, .. } => Some(id),
        _ => None,
    }
}

fn result_id(b: &ContentBlock) -> Option<&str> {
    match b {
        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id),
        _ => None,
    }
}

/// Expiry (on whatever the policy says about trim): results of ephemeral Bash calls shorter
/// than `min_chars`, except the `keep_ephemeral` most recent, become [`expiry_note`]. Not
/// spilled: a stale `git status` is worth rerunning, not archiving.
pub fn expire(
    msgs: &mut [Message],
    protected: &Protected,
    policy: &TrimPolicy,
    report: &mut TrimReport,
) {
    let commands: HashMap<String, String> = msgs
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } if name == BASH_TOOL => input
                .get("command")
                .and_then(|c| c.as_str())
                .map(|c| (id.clone(), c.to_string())),
            _ => None,
        })
        .collect();
    let mut sites: Vec<(usize, usize, String)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        for (k, b) in m.content.iter().enumerate() {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } = b
            {
                let Some(cmd) = commands.get(tool_use_id) else {
                    continue;
                };
                if protected.contains(&(i, k))
                    || content.chars().count() >= policy.min_chars
                    || !is_ephemeral(cmd)
                {
                    continue;
                }
                sites.push((i, k, cmd.clone()));
            }
        }
    }
    let total = sites.len();
    let expire_n = total.saturating_sub(policy.keep_ephemeral);
    for (n, (i, k, cmd)) in sites.into_iter().take(expire_n).enumerate() {
        if let ContentBlock::ToolResult { content, .. } = &mut msgs[i].content[k] {
            *content = expiry_note(&cmd, total - n);
        }
    }
    report.expired += expire_n;
}

/// Trim (`policy.trim_large`): results of at least `min_chars` characters, except the
/// `keep_recent` most recent, are written to [`spill_path`] and replaced by [`spill_pointer`].
///
/// # Errors
/// I/O errors creating the spill directory or writing a spill file.
pub fn trim(
    msgs: &mut [Message],
    protected: &Protected,
    policy: &TrimPolicy,
    report: &mut TrimReport,
) -> std::io::Result<()> {
    let mut sites: Vec<(usize, usize)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        for (k, b) in m.content.iter().enumerate() {
            if let ContentBlock::ToolResult { content, .. } = b {
                if !protected.contains(&(i, k)) && content.chars().count() >= policy.min_chars {
                    sites.push((i, k));
                }
            }
        }
    }
    let n = sites.len().saturating_sub(policy.keep_recent);
    report.kept_large += sites.len() - n;
    for &(i, k) in &sites[..n] {
        if let ContentBlock::ToolResult { content, .. } = &mut msgs[i].content[k] {
            let chars = content.chars().count();
            let path = spill_path(&policy.spill_dir, content);
            write_spill(&path, content)?;
            *content = spill_pointer(&path, chars);
            report.trimmed += 1;
            report.chars_saved += chars;
        }
    }
    Ok(())
}

/// Writes a spill file once (content-addressed), atomically so a concurrent reader never sees
/// half of it.
fn write_spill(path: &Path, text: &str) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(dir: &Path, trim_large: bool) -> TrimPolicy {
        TrimPolicy {
            trim_large,
            keep_recent: 2,
            min_chars: 50,
            keep_ephemeral: 2,
            spill_dir: dir.join("spill"),
        }
    }

    fn call(id: &str, name: &str, input: serde_json::Value) -> Message {
        Message {
            role: Speaker::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input,
            }],
        }
    }

    fn bash(id: &str, cmd: &str) -> Message {
        call(id, "Bash", json!({ "command": cmd }))
    }

    fn result(id: &str, text: &str) -> Message {
        Message {
            role: Speaker::User,
            content: vec![res(id, text)],
        }
    }

    fn res(id: &str, text: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: text.into(),
            is_error: false,
        }
    }

    fn m(msg: Message) -> Entry {
        Entry::Message(msg)
    }

    #[test]
    fn notices_never_enter_and_a_clean_history_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let history = vec![
            Message::user_text("go"),
            bash("a", "cargo test"),
            result("a", "ok"),
            Message::assistant_text("done"),
        ];
        let mut entries: Vec<Entry> = history.iter().cloned().map(Entry::Message).collect();
        entries.insert(
            2,
            Entry::Notice(NoticeKind::NetworkError, "503 while waiting".into()),
        );
        entries.push(Entry::Notice(NoticeKind::NetworkError, "ECONNRESET".into()));
        let (out, report) = for_resume(&entries, &policy(dir.path(), true)).unwrap();
        assert_eq!(out, history);
        assert_eq!(
            report,
            TrimReport {
                notices: 2,
                ..TrimReport::default()
            }
        );
        assert_eq!(report.summary(), "未裁剪");
    }

    #[test]
    fn a_trailing_call_without_result_gets_the_interrupted_note() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![m(Message::user_text("go")), m(bash("a", "cargo build"))];
        let (out, report) = for_resume(&entries, &policy(dir.path(), true)).unwrap();
        assert_eq!(
            out,
            vec![
                Message::user_text("go"),
                bash("a", "cargo build"),
                result("a", INTERRUPTED_NOTE)
            ]
        );
        assert_eq!(report.interrupted, 1);
    }

    #[test]
    fn partial_results_are_completed_in_call_order_after_the_existing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let two = Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::text("two calls"),
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "Read".into(),
                    input: json!({}),
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "Read".into(),
                    input: json!({}),
                },
                ContentBlock::ToolUse {
                    id: "c".into(),
                    name: "Read".into(),
                    input: json!({}),
                },
            ],
        };
        let answer = Message {
            role: Speaker::User,
            content: vec![res("b", "B"), ContentBlock::text("also this")],
        };
        let entries = vec![
            m(Message::user_text("go")),
            m(two.clone()),
            m(answer),
            m(Message::assistant_text("x")),
        ];
        let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
        assert_eq!(
            out[2],
            Message {
                role: Speaker::User,
                content: vec![
                    res("b", "B"),
                    res("a", INTERRUPTED_NOTE),
                    res("c", INTERRUPTED_NOTE),
                    ContentBlock::text("also this")
                ],
            }
        );
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn a_call_followed_by_an_assistant_message_gets_a_user_message_inserted() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            m(Message::user_text("go")),
            m(bash("a", "ls")),
            m(Message::assistant_text("hm")),
        ];
        let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
        assert_eq!(
            out,
            vec![
                Message::user_text("go"),
                bash("a", "ls"),
                result("a", INTERRUPTED_NOTE),
                Message::assistant_text("hm")
            ]
        );
    }

    #[test]
    fn results_left_by_an_interruption_are_neutralised_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            m(Message::user_text("go")),
            m(bash("a", "cargo test")),
            Entry::Notice(NoticeKind::Interrupted, "Ctrl-C".into()),
            m(Message {
                role: Speaker::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "a".into(),
                        content: "killed".into(),
                        is_error: true,
                    },
                    ContentBlock::text("stop and look at X instead"),
                ],
            }),
            m(bash("b", "cargo test")),
            m(result("b", "ok")),
            // An interruption with nothing open touches nothing.
            Entry::Notice(NoticeKind::Interrupted, "Ctrl-C".into()),
        ];
        let (out, report) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
        assert_eq!(
            out[2],
            Message {
                role: Speaker::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "a".into(),
                        content: INTERRUPTED_NOTE.into(),
                        is_error: true
                    },
                    ContentBlock::text("stop and look at X instead"),
                ],
            }
        );
        assert_eq!(out[4], result("b", "ok"));
        assert_eq!(report.interrupted, 1);
        assert_eq!(report.notices, 2);
    }

    #[test]
    fn stray_results_are_dropped_and_never_separate_a_call_from_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            m(Message::user_text("go")),
            m(Message::assistant_text("thinking")),
            m(result("ghost", "answers nothing")),
            m(bash("a", "cargo test")),
            m(Message {
                role: Speaker::User,
                content: vec![res("a", "first"), res("a", "duplicate")],
            }),
        ];
        let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
        assert_eq!(
            out,
            vec![
                Message::user_text("go"),
                Message::assistant_text("thinking"),
                bash("a", "cargo test"),
                result("a", "first")
            ]
        );
    }

    /// A history of `n` ephemeral `git status` calls and one non-ephemeral call.
    fn glance_history(n: usize) -> Vec<Entry> {
        let mut e = vec![m(Message::user_text("go"))];
        for i in 0..n {
            e.push(m(bash(&format!("g{i}"), "git status -s\ngit log -1")));
            e.push(m(result(&format!("g{i}"), &format!("M file{i}"))));
            if i == 0 {
                e.push(m(bash("t", "cargo test")));
                e.push(m(result("t", "test result: ok")));
            }
        }
        e
    }

    #[test]
    fn expiry_keeps_the_most_recent_ephemeral_results_and_notes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        // keep_ephemeral = 2 of 4: g0 and g1 expire with ages 4 and 3.
        let (out, report) = for_resume(&glance_history(4), &policy(dir.path(), false)).unwrap();
        let texts: Vec<String> = out
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolResult { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                "[`git status -s` 的结果已过期(第 4 轮前),当前状态可能已变。需要请重新执行]"
                    .to_string(),
                "test result: ok".to_string(),
                "[`git status -s` 的结果已过期(第 3 轮前),当前状态可能已变。需要请重新执行]"
                    .to_string(),
                "M file2".to_string(),
                "M file3".to_string(),
            ]
        );
        assert_eq!(report.expired, 2);
        assert_eq!(report.summary(), "2 个时效性结果标记为过期");
        // Expiry never writes a spill file.
        assert!(!dir.path().join("spill").exists());
    }

    #[test]
    fn flowers_default_note_reads_seven_turns_for_the_first_expired_result() {
        let dir = tempfile::tempdir().unwrap();
        let p = TrimPolicy::new(dir.path().join("spill"), false);
        let (out, report) = for_resume(&glance_history(7), &p).unwrap();
        assert_eq!(report.expired, 1);
        assert_eq!(
            out[2],
            result(
                "g0",
                "[`git status -s` 的结果已过期(第 7 轮前),当前状态可能已变。需要请重新执行]"
            )
        );
    }

    #[test]
    fn expiry_and_the_glance_guard_are_the_same_set() {
        let dir = tempfile::tempdir().unwrap();
        let p = TrimPolicy {
            keep_ephemeral: 0,
            ..policy(dir.path(), false)
        };
        for cmd in [
            "git status",
            "git status && rm x",
            "ls -la",
            "ls $(pwd)",
            "cat a > b",
            "ps aux | grep x | head",
            "cargo test",
            "find . -delete",
            "git log --oneline | head",
        ] {
            let entries = vec![
                m(Message::user_text("go")),
                m(bash("a", cmd)),
                m(result("a", "short")),
            ];
            let (out, _) = for_resume(&entries, &p).unwrap();
            let expired = out[2] != result("a", "short");
            assert_eq!(expired, is_ephemeral(cmd), "{cmd}");
        }
        // Other tools are never expired, even with a glance-looking input.
        let entries = vec![
            m(Message::user_text("go")),
            m(call("a", "Read", json!({ "command": "ls" }))),
            m(result("a", "short")),
        ];
        assert_eq!(for_resume(&entries, &p).unwrap().0[2], result("a", "short"));
    }

    #[test]
    fn trim_spills_old_large_results_and_keeps_the_recent_ones() {
        let dir = tempfile::tempdir().unwrap();
        let big = |c: char| c.to_string().repeat(60);
        let mut entries = vec![m(Message::user_text("go"))];
        for (i, c) in ['a', 'b', 'c', 'd'].into_iter().enumerate() {
            let id = format!("r{i}");
            entries.push(m(call(&id, "Read", json!({ "path": "/x" }))));
            entries.push(m(result(&id, &big(c))));
        }
        entries.push(m(call("s", "Read", json!({}))));
        entries.push(m(result("s", "small")));
        let p = policy(dir.path(), true);
        let (out, report) = for_resume(&entries, &p).unwrap();
        let path_a = p.spill_dir.join(format!(
            "{}.txt",
            &hex::encode(Sha256::digest(big('a').as_bytes()))[..16]
        ));
        let path_b = spill_path(&p.spill_dir, &big('b'));
        assert_eq!(
            out[2],
            result(
                "r0",
                &format!(
                    "[工具结果已归档:60 字符。完整内容在 {},需要时用 Read 读取]",
                    path_a.display()
                )
            )
        );
        assert_eq!(out[4], result("r1", &spill_pointer(&path_b, 60)));
        assert_eq!(out[6], result("r2", &big('c')));
        assert_eq!(out[8], result("r3", &big('d')));
        assert_eq!(out[10], result("s", "small"));
        assert_eq!(std::fs::read_to_string(&path_a).unwrap(), big('a'));
        assert_eq!(std::fs::read_to_string(&path_b).unwrap(), big('b'));
        assert_eq!(report.trimmed, 2);
        assert_eq!(report.kept_large, 2);
        assert_eq!(report.chars_saved, 120);
        assert_eq!(
            report.summary(),
            "裁掉 2 个工具结果(保留最近 2 个),省下 ~30 tokens"
        );

        // Off: nothing is trimmed and nothing is written.
        let other = tempfile::tempdir().unwrap();
        let (out, report) = for_resume(&entries, &policy(other.path(), false)).unwrap();
        assert_eq!(out[2], result("r0", &big('a')));
        assert_eq!(report.trimmed, 0);
        assert!(!other.path().join("spill").exists());
    }

    #[test]
    fn size_is_counted_in_characters_and_the_boundary_is_inclusive() {
        let dir = tempfile::tempdir().unwrap();
        let p = TrimPolicy {
            keep_recent: 0,
            ..policy(dir.path(), true)
        };
        let exactly = "字".repeat(50); // 50 characters, 150 bytes
        let below = "字".repeat(49);
        let entries = vec![
            m(Message::user_text("go")),
            m(call("a", "Read", json!({}))),
            m(result("a", &exactly)),
            m(call("b", "Read", json!({}))),
            m(result("b", &below)),
        ];
        let (out, _) = for_resume(&entries, &p).unwrap();
        assert_eq!(
            out[2],
            result("a", &spill_pointer(&spill_path(&p.spill_dir, &exactly), 50))
        );
        assert_eq!(out[4], result("b", &below));
    }

    #[test]
    fn large_ephemeral_results_are_trimmed_not_expired() {
        let dir = tempfile::tempdir().unwrap();
        let p = TrimPolicy {
            keep_recent: 0,
            keep_ephemeral: 0,
            ..policy(dir.path(), true)
        };
        let long = "x".repeat(80);
        let entries = vec![
            m(Message::user_text("go")),
            m(bash("a", "git diff")),
            m(result("a", &long)),
        ];
        let (out, report) = for_resume(&entries, &p).unwrap();
        assert_eq!(
            out[2],
            result("a", &spill_pointer(&spill_path(&p.spill_dir, &long), 80))
        );
        assert_eq!((report.expired, report.trimmed), (0, 1));
    }

    #[test]
    fn notes_written_by_prune_are_neither_expired_nor_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let p = TrimPolicy {
            keep_recent: 0,
            keep_ephemeral: 0,
            min_chars: 5,
            ..policy(dir.path(), true)
        };
        let entries = vec![m(Message::user_text("go")), m(bash("a", "git status"))];
        let (out, report) = for_resume(&entries, &p).unwrap();
        assert_eq!(out[2], result("a", INTERRUPTED_NOTE));
        assert_eq!((report.expired, report.trimmed), (0, 0));
    }

    #[test]
    fn expiry_note_shortens_the_command() {
        let long = format!("git log --format='{}'", "x".repeat(100));
        let note = expiry_note(&long, 9);
        let shown: String = long.chars().take(60).collect();
        assert_eq!(
            note,
            format!("[`{shown}` 的结果已过期(第 9 轮前),当前状态可能已变。需要请重新执行]")
        );
    }
}

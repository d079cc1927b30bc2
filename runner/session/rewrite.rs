//! What resume feeds back (seed 001 "裁剪", "剪除"; flower `docs/en/guide/context.md`, layer
//! four): the stored entries rewritten by prune, expiry and trim. Pure functions over copies —
//! the rows in `sessions.db` are never touched, so a different policy on the next resume gets
//! the full record back.
//!
//! Order: prune first (notices out, interrupted results neutralised, missing results added so
//! every `tool_use` is answered by the next message), then expiry of ephemeral Bash results,
//! then trim of large results. Results written by prune are left alone by the other two.

use super::{NoticeKind, TrimPolicy};
use crate::fsroot::{own, PendingBatch};
use crate::glance::is_ephemeral;
use crate::model::{ContentBlock, Message, Speaker};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The neutral note that replaces a tool result the interruption left behind, and answers a
/// tool call that never got a result (crash mid-tool). flower's exact text.
pub const INTERRUPTED_NOTE: &str = "[上一轮在此处被中断,该工具结果未产生]";

/// The tool whose calls can be ephemeral (its input's `command` goes to
/// [`is_ephemeral`]).
pub const BASH_TOOL: &str = crate::model::ToolName::Bash.as_str();

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
    /// Stored messages left out because they had no content (repaired sessions).
    pub repaired: usize,
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
#[cfg(test)]
pub(crate) fn spill_path(spill_dir: &Path, text: &str) -> std::path::PathBuf {
    spill_dir.join(spill_name(text))
}

/// Rewrites stored entries into the history resume feeds the model, the spill files written
/// and synced before it returns.
///
/// # Errors
/// I/O errors writing or syncing spill files (trim only).
pub fn for_resume(
    entries: &[Entry],
    policy: &TrimPolicy,
) -> std::io::Result<(Vec<Message>, TrimReport)> {
    let (msgs, report, batch) = for_resume_deferred(entries.to_vec(), policy)?;
    if let Some(batch) = batch {
        let stop = std::sync::atomic::AtomicBool::new(false);
        if let (_, Some(sync)) = batch.write(&stop)? {
            sync.sync()?;
        }
    }
    Ok((msgs, report))
}

/// [`for_resume`] without touching the spill files: the spill directory is made and every
/// name checked, and the returned [`PendingBatch`] holds the trimmed results. It must be
/// written before anything can read a spill pointer of this history (a tool run, the end of
/// the run), and its sync must have run before anything holding a pointer is stored durably
/// (a compaction's or a handoff's new session). The model may be asked before either: a
/// request it refuses never showed it a pointer, and a crash before the sync leaves a spill
/// file that the next trim finds by content and rewrites, with no stored row pointing to it.
///
/// # Errors
/// I/O errors making the spill directory or looking at its names (trim only).
pub fn for_resume_deferred(
    entries: Vec<Entry>,
    policy: &TrimPolicy,
) -> std::io::Result<(Vec<Message>, TrimReport, Option<PendingBatch>)> {
    let mut report = TrimReport::default();
    let (mut msgs, protected) = prune(entries, &mut report);
    expire(&mut msgs, &protected, policy, &mut report);
    let batch = if policy.trim_large {
        trim(&mut msgs, &protected, policy, &mut report)?
    } else {
        None
    };
    Ok((msgs, report, batch))
}

/// (message index, block index) of results prune wrote; expiry and trim leave them alone.
type Protected = HashSet<(usize, usize)>;

/// Adds a stored message to the history being rebuilt. A message without content the APIs
/// accept (none at all, or only empty text: an older flowerbox stored the empty assistant
/// message of a turn cut off inside its only tool call) is left out, and a user message right
/// after a user message is merged into it (what the runner sent: it merges user content into a
/// trailing user message in memory and stores it as its own row).
fn push_merged(msgs: &mut Vec<Message>, m: Message, report: &mut TrimReport) {
    let empty = m
        .content
        .iter()
        .all(|b| matches!(b, ContentBlock::Text { text } if text.is_empty()));
    if empty {
        report.repaired += 1;
        return;
    }
    match msgs.last_mut() {
        Some(last) if last.role == Speaker::User && m.role == Speaker::User => {
            last.content.extend(m.content)
        }
        _ => msgs.push(m),
    }
}

/// Prune (seed 001 "剪除"): notices never enter; messages without content are left out and
/// adjacent messages of one role merged ([`push_merged`]); results left by an interruption become
/// [`INTERRUPTED_NOTE`]; every assistant `tool_use` is answered in the next message (missing
/// results are added as the note, a missing user message is inserted); results answering no
/// call of the previous message (impossible in a history the API accepted) are dropped.
/// The messages are moved, never copied.
pub fn prune(entries: Vec<Entry>, report: &mut TrimReport) -> (Vec<Message>, Protected) {
    // Pass 1: messages only; which calls were open when an interruption was recorded.
    let mut msgs: Vec<Message> = Vec::with_capacity(entries.len());
    let mut interrupted: HashSet<String> = HashSet::new();
    let mut open: Vec<String> = Vec::new();
    for e in entries {
        match e {
            Entry::Notice(kind, _) => {
                report.notices += 1;
                if kind == NoticeKind::Interrupted {
                    interrupted.extend(open.iter().cloned());
                }
            }
            Entry::Message(m) => {
                match m.role {
                    Speaker::Assistant => {
                        open = m
                            .content
                            .iter()
                            .filter_map(use_id)
                            .map(String::from)
                            .collect();
                    }
                    Speaker::User => {
                        let answered: HashSet<&str> =
                            m.content.iter().filter_map(result_id).collect();
                        open.retain(|id| !answered.contains(id.as_str()));
                    }
                }
                push_merged(&mut msgs, m, report);
            }
        }
    }

    // Pass 2: structure.
    let mut out: Vec<Message> = Vec::with_capacity(msgs.len() + 1);
    let mut protected = Protected::new();
    let mut msgs = msgs.into_iter().peekable();
    while let Some(m) = msgs.next() {
        if m.role == Speaker::User {
            // Not directly after an assistant message with calls: results here answer nothing.
            let had_content = !m.content.is_empty();
            let kept: Vec<ContentBlock> = m
                .content
                .into_iter()
                .filter(|b| result_id(b).is_none())
                .collect();
            if kept.is_empty() && had_content {
                continue;
            }
            out.push(Message {
                role: Speaker::User,
                content: kept,
            });
            continue;
        }
        let uses: Vec<String> = m
            .content
            .iter()
            .filter_map(use_id)
            .map(String::from)
            .collect();
        out.push(m);
        if uses.is_empty() {
            continue;
        }
        let next = msgs.next_if(|n| n.role == Speaker::User);
        let mut seen: HashSet<String> = HashSet::new();
        let mut blocks: Vec<ContentBlock> = Vec::new();
        for b in next.map(|n| n.content).unwrap_or_default() {
            match result_id(&b) {
                Some(id) if uses.iter().any(|u| u == id) && !seen.contains(id) => {
                    seen.insert(id.to_string());
                    blocks.push(b)
                }
                Some(_) => {} // duplicate, or answers nothing
                None => blocks.push(b),
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
                tool_use_id: id.clone(),
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
/// `keep_recent` most recent, are replaced by [`spill_pointer`] to their file in the spill
/// directory. Returns the batch that writes those files ([`for_resume_deferred`]); the
/// results' text moves into it, never copied.
///
/// # Errors
/// I/O errors creating the spill directory or looking at a spill file's name.
pub fn trim(
    msgs: &mut [Message],
    protected: &Protected,
    policy: &TrimPolicy,
    report: &mut TrimReport,
) -> std::io::Result<Option<PendingBatch>> {
    let mut sites: Vec<(usize, usize, usize)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        for (k, b) in m.content.iter().enumerate() {
            if let ContentBlock::ToolResult { content, .. } = b {
                // Fewer bytes than `min_chars` cannot be as many characters.
                if protected.contains(&(i, k)) || content.len() < policy.min_chars {
                    continue;
                }
                let chars = content.chars().count();
                if chars >= policy.min_chars {
                    sites.push((i, k, chars));
                }
            }
        }
    }
    let n = sites.len().saturating_sub(policy.keep_recent);
    report.kept_large += sites.len() - n;
    if n == 0 {
        return Ok(None);
    }
    // The pointers replace the results at once; the files are the caller's to write (one
    // batch) before anything can read a pointer. The rows in sessions.db are never touched.
    let mut files: Vec<(String, Vec<u8>)> = Vec::with_capacity(n);
    for &(i, k, chars) in &sites[..n] {
        if let ContentBlock::ToolResult { content, .. } = &mut msgs[i].content[k] {
            let name = spill_name(content);
            let pointer = spill_pointer(&policy.spill_dir.join(&name), chars);
            files.push((name, std::mem::replace(content, pointer).into_bytes()));
            report.trimmed += 1;
            report.chars_saved += chars;
        }
    }
    // Content-addressed names: a file there with the same bytes is kept.
    own::plan_batch(&policy.spill_dir, files)
}

/// The spill file name of `text`: the first 16 hex digits of its SHA-256, `.txt`.
fn spill_name(text: &str) -> String {
    format!(
        "{}.txt",
        &hex::encode(Sha256::digest(text.as_bytes()))[..16]
    )
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;

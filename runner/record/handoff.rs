//! The handoff document (seed 001 "换代", "交接书"; flower `docs/en/guide/handoff.md`) and the
//! window arithmetic that decides when a handoff is due (seed 000 `--window`).
//!
//! Five sections — doing, decided, deadends, next, scene — of which only doing and next are
//! required: demanding dead ends would force the model to invent some. The document is written
//! to `notes/交接-<step>.md` (the previous one archived), a file a human can open and edit
//! before the successor reads it. The runtime owns the mechanism (when to ask, the new
//! session); this module owns the texts and the file.

use super::RecordError;
use std::path::{Path, PathBuf};

/// Tokens kept free below the window: the handoff turn itself needs room, and it must come
/// before the provider's own limits (flower: `headroom = 50_000`).
pub const HEADROOM: u64 = 50_000;
/// The handoff threshold never goes below this (below it not even the handoff fits).
pub const MIN_THRESHOLD: u64 = 10_000;
/// Generations per step before the runaway brake stops the step.
pub const MAX_GENERATIONS: u32 = 8;
/// The window when neither `--window` nor a haiku model name says otherwise.
pub const DEFAULT_WINDOW: u64 = 1_000_000;
/// The window of haiku models.
pub const HAIKU_WINDOW: u64 = 200_000;
/// Marks `doing` of a document the runner assembled because the model did not write one.
pub const DEGRADED_MARK: &str = "[降级:交接没写成]";
/// How much of the original task a degraded document carries in `scene`, in characters.
pub const DEGRADED_SCENE_CHARS: usize = 1200;
/// What an empty section says in the markdown.
pub const EMPTY_SECTION: &str = "(空)";

/// The model's context window in tokens (seed 000 `--window`): a positive `flag` wins;
/// a negative one is floored to [`MIN_THRESHOLD`] (flower passes negatives down and clamps
/// them); without a flag (or with 0, which the CLI rejects before this point) the model name
/// decides — `1m` as a standalone word → 1,000,000 (checked first, so `claude-haiku[1m]` is
/// 1M), `haiku` → 200,000, anything else → 1,000,000.
pub fn window_for(model: &str, flag: Option<i64>) -> u64 {
    match flag {
        Some(n) if n > 0 => n as u64,
        Some(n) if n < 0 => MIN_THRESHOLD,
        _ => {
            let m = model.to_ascii_lowercase();
            if has_word(&m, "1m") {
                DEFAULT_WINDOW
            } else if m.contains("haiku") {
                HAIKU_WINDOW
            } else {
                DEFAULT_WINDOW
            }
        }
    }
}

/// The context window a run hands off by, decided in one place: `--window` when given; else
/// the model catalogue's window for a model it knows; else what the model's server reports
/// (`server`); else the seed's rule on the name ([`window_for`]).
pub fn context_window(model: &str, flag: Option<u64>, server: Option<u64>) -> u64 {
    match flag.filter(|w| *w > 0) {
        Some(w) => w,
        None => crate::model::catalog::context_window(model)
            .or(server)
            .unwrap_or_else(|| window_for(model, None)),
    }
}

/// True when `word` occurs in `s` with no letter or digit right before or after it.
fn has_word(s: &str, word: &str) -> bool {
    s.match_indices(word).any(|(i, _)| {
        let before = s[..i].chars().next_back();
        let after = s[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric()) && !after.is_some_and(|c| c.is_alphanumeric())
    })
}

/// The context size (tokens) at which the main thread hands off: `window − 50000`, never
/// below 10,000.
pub fn handoff_threshold(window: u64) -> u64 {
    window.saturating_sub(HEADROOM).max(MIN_THRESHOLD)
}

/// The "approaching" notice line: 20,000 tokens before the threshold, never below 1,000.
#[cfg(test)]
pub(crate) fn warn_threshold(window: u64) -> u64 {
    handoff_threshold(window).saturating_sub(20_000).max(1_000)
}

/// Tokens as flower shows them: `950.0K`, `1000K` for whole thousands of a window.
pub fn fmt_tokens(tokens: u64) -> String {
    format!("{:.1}K", tokens as f64 / 1000.0)
}

/// The five sections: field name, heading, and the spellings accepted when parsing.
const SECTIONS: [(&str, &str, &[&str]); 5] = [
    (
        "doing",
        "现在在做",
        &[
            "现在在做",
            "现在在做什么",
            "在做什么",
            "正在做",
            "当前在做",
            "doing",
            "current work",
        ],
    ),
    (
        "decided",
        "已定的事",
        &[
            "已定的事",
            "定了什么",
            "已经定了的事",
            "已决定",
            "决定",
            "decided",
            "decisions",
        ],
    ),
    (
        "deadends",
        "走不通的",
        &[
            "走不通的",
            "走不通的路",
            "死路",
            "踩过的坑",
            "deadends",
            "dead ends",
            "dead-ends",
            "dead end",
        ],
    ),
    (
        "next",
        "下一步",
        &["下一步", "接下来", "next", "next steps", "next step"],
    ),
    ("scene", "现场", &["现场", "scene"]),
];

/// A handoff document (seed 001 "交接书").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handoff {
    /// The step it belongs to (the header and the file name; not parsed).
    pub step: String,
    /// What is being done now, how far it got. Required.
    pub doing: String,
    /// What is settled, each with why.
    pub decided: String,
    /// What was tried and does not work — the most expensive section to rediscover.
    pub deadends: String,
    /// The first thing the successor should do. Required.
    pub next: String,
    /// Paths to the key files and outputs (pointers, not contents).
    pub scene: String,
}

impl Handoff {
    /// The prompt that asks the current session to write its handoff, with the context used
    /// and the window in tokens. Its headings are what [`Handoff::parse`] reads.
    pub fn request_prompt(used_tokens: u64, window: u64) -> String {
        format!(
            "上下文已用 {used}/{window},快满了。停下手上的事,写一份交接书交给接手你的新会话 —— \
它看不到你现在的上下文,只看得到这份交接书。\n\n\
严格按下面五段写,每段用这个二级标题:\n\n\
## 现在在做\n(必填)正在做什么,做到哪一步。\n\n\
## 已定的事\n已经定下来的决定,每条都写上为什么,免得接手的人重新争论。\n\n\
## 走不通的\n试过但走不通的路:试了什么、为什么不行。这一段最贵 —— 不写下来,接手的人会把同样的弯路\
原样再走一遍(实测一次白绕了一个小时)。真的没有就写 {EMPTY_SECTION},不要编。\n\n\
## 下一步\n(必填)接手后第一件该做的事,具体到命令或文件。\n\n\
## 现场\n关键文件、产出、日志的路径。只写路径,不贴内容。\n\n\
只输出这份交接书:不要调用工具,不要写别的。",
            used = fmt_tokens(used_tokens),
            window = fmt_tokens(window).replace(".0K", "K"),
        )
    }

    /// Reads the model's answer (or an edited file) tolerantly: `#`/`##`/bold headings, inline
    /// `标签:内容` lines, Chinese or English labels, or a JSON object with the five keys.
    /// Never fails; check [`Handoff::missing`].
    pub fn parse(step: &str, answer: &str) -> Handoff {
        let mut h = Handoff {
            step: step.to_string(),
            ..Handoff::default()
        };
        if let Some(j) = parse_json(answer) {
            for (field, _, _) in SECTIONS {
                if let Some(v) = j.get(field) {
                    *h.field_mut(field) = json_text(v);
                }
            }
            if !h.doing.is_empty() || !h.next.is_empty() {
                return h;
            }
        }
        let mut current: Option<&str> = None;
        let mut bodies: Vec<(&str, Vec<&str>)> = Vec::new();
        for line in answer.lines() {
            if let Some((field, inline)) = heading(line) {
                current = Some(field);
                bodies.push((field, Vec::new()));
                if !inline.is_empty() {
                    if let Some(b) = bodies.last_mut() {
                        b.1.push(inline);
                    }
                }
            } else if current.is_some() {
                if let Some(b) = bodies.last_mut() {
                    b.1.push(line);
                }
            }
        }
        for (field, lines) in bodies {
            let text = lines.join("\n").trim().to_string();
            if text == EMPTY_SECTION || text == "(空)" || text.eq_ignore_ascii_case("(empty)") {
                continue;
            }
            let slot = h.field_mut(field);
            if slot.is_empty() {
                *slot = text;
            } else if !text.is_empty() {
                slot.push('\n');
                slot.push_str(&text);
            }
        }
        h
    }

    fn field_mut(&mut self, field: &str) -> &mut String {
        match field {
            "doing" => &mut self.doing,
            "decided" => &mut self.decided,
            "deadends" => &mut self.deadends,
            "next" => &mut self.next,
            _ => &mut self.scene,
        }
    }

    fn field(&self, field: &str) -> &str {
        match field {
            "doing" => &self.doing,
            "decided" => &self.decided,
            "deadends" => &self.deadends,
            "next" => &self.next,
            _ => &self.scene,
        }
    }

    /// Required sections that are empty (`doing`, `next`).
    pub fn missing(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if self.doing.trim().is_empty() {
            m.push("doing");
        }
        if self.next.trim().is_empty() {
            m.push("next");
        }
        m
    }

    /// True when both required sections are present.
    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// The document the runner assembles when the model did not write a complete one: `doing`
    /// carries [`DEGRADED_MARK`] and `why`, `scene` the first 1200 characters of the step's
    /// original task, `next` tells the successor to look at the scene itself.
    pub fn degraded(step: &str, original_prompt: &str, why: &str) -> Handoff {
        let head: String = original_prompt.chars().take(DEGRADED_SCENE_CHARS).collect();
        let why = why.trim();
        let why = if why.is_empty() {
            String::new()
        } else {
            format!("({why})")
        };
        Handoff {
            step: step.to_string(),
            doing: format!(
                "{DEGRADED_MARK} 上一代会话没能写出交接书{why}。这份是框架按已知信息拼的,不完整:做到哪了要你自己去现场确认。"
            ),
            decided: String::new(),
            deadends: String::new(),
            next: "先看现场:工作区的改动(git status、git log)、工作台的 notes/ 和 artifacts/,弄清原任务做到了哪一步,再接着做。已经完成的部分不要从头重做。".to_string(),
            scene: format!("原任务(前 {DEGRADED_SCENE_CHARS} 字符):\n{head}"),
        }
    }

    /// True when this is a document from [`Handoff::degraded`].
    pub fn is_degraded(&self) -> bool {
        self.doing.starts_with(DEGRADED_MARK)
    }

    /// The markdown written to disk; empty sections say `(空)`. [`Handoff::parse`] reads it back.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("# 交接书 · {}\n", self.step);
        for (field, title, _) in SECTIONS {
            let body = self.field(field).trim();
            out.push_str(&format!(
                "\n## {title}\n\n{}\n",
                if body.is_empty() { EMPTY_SECTION } else { body }
            ));
        }
        out
    }

    /// The first message of the successor session: it is taking over, must not ask a human
    /// for background, and (when degraded) that the document is incomplete.
    pub fn successor_prompt(&self) -> String {
        let mut out = String::from(
            "你在接手上一代会话的工作。上一代的上下文快满了,换成了你这条新会话;下面是它留下的交接书。\
照着它接着做,不要从头开始,也不要回头问人要背景 —— 需要的东西在交接书和工作区里。\n",
        );
        if self.is_degraded() {
            out.push_str("注意:这份交接书是降级的(上一代没写成),内容不全,先去现场看清楚再动手。\n");
        }
        out.push('\n');
        out.push_str(&self.to_markdown());
        out
    }

    /// Writes `notes/交接-<step>.md` under `notes_dir` (step name with characters a file name
    /// cannot hold removed), after moving an existing one to
    /// `notes/archive/交接/<step>-<YYYYmmdd-HHMMSS>.md`. Returns the written path.
    ///
    /// # Errors
    /// [`RecordError::Io`] when the archive move or the write fails.
    pub fn write(&self, notes_dir: &Path) -> Result<PathBuf, RecordError> {
        let name = file_stem(&self.step);
        let path = handoff_path(notes_dir, &self.step);
        // The notes are writable by workers: nothing here follows a symlink, and the archive
        // move never overwrites.
        if crate::fsroot::own::exists(&path) {
            let archive = notes_dir.join("archive").join("交接");
            let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
            let mut dest = archive.join(format!("{name}-{stamp}.md"));
            let mut n = 2;
            loop {
                match crate::fsroot::own::rename(&path, &dest, false) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        dest = archive.join(format!("{name}-{stamp}-{n}.md"));
                        n += 1;
                    }
                    Err(e) => return Err(RecordError::io(&path, e)),
                }
            }
        }
        // The model's words, for the next session and for people: cleaned like every note.
        crate::shown::notes::write_durable(&path, &self.to_markdown())
            .map_err(|e| RecordError::io(&path, e))?;
        Ok(path)
    }
}

/// `<notes_dir>/交接-<step>.md`.
pub fn handoff_path(notes_dir: &Path, step: &str) -> PathBuf {
    notes_dir.join(format!("交接-{}.md", file_stem(step)))
}

/// The step name without path separators, NUL, control characters and the characters other
/// file systems refuse.
fn file_stem(step: &str) -> String {
    let s: String = step
        .chars()
        .filter(|c| !c.is_control() && !crate::shown::is_hidden(*c) && !r#"/\:*?"<>|"#.contains(*c))
        .collect();
    let s = s.trim().trim_matches('.').to_string();
    if s.is_empty() {
        "step".to_string()
    } else {
        s
    }
}

/// Recognises a section heading; returns the field and any text after the label on that line.
fn heading(line: &str) -> Option<(&'static str, &str)> {
    let t = line.trim();
    let is_md_heading = t.starts_with('#');
    let t = t.trim_start_matches('#').trim_start();
    let t = t.trim_start_matches(['-', '*', '+']).trim_start();
    let t = t.trim_start_matches("**").trim_start();
    // Numbered headings: `1. 现在在做`, `1、现在在做`.
    let t = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(k) if k > 0 && (t[k..].starts_with('.') || t[k..].starts_with('、')) => {
            t[k..].trim_start_matches(['.', '、']).trim_start()
        }
        _ => t,
    };
    let lower = t.to_lowercase();
    // Longest alias first, so `现在在做什么` is not read as `现在在做` + `什么`.
    let mut best: Option<(&'static str, usize)> = None;
    for (field, _, aliases) in SECTIONS {
        for a in aliases {
            if lower.starts_with(&a.to_lowercase()) && best.is_none_or(|(_, len)| a.len() > len) {
                best = Some((field, a.len()));
            }
        }
    }
    let (field, len) = best?;
    // Aliases are ASCII-lowercase-stable or CJK, so byte lengths match between `t` and `lower`.
    let rest = t.get(len..)?;
    let rest = rest.trim_start_matches("**").trim_start();
    // `## 现在在做(doing)` — a parenthesised gloss after the label.
    let rest = if rest.starts_with('(') || rest.starts_with('(') {
        match rest.find([')', ')']) {
            Some(k) => rest[k..].trim_start_matches([')', ')']).trim_start(),
            None => rest,
        }
    } else {
        rest
    };
    let rest = rest.trim_start_matches("**").trim_start();
    if rest.is_empty() {
        return Some((field, ""));
    }
    for sep in [":", ":", "—", "-"] {
        if let Some(inline) = rest.strip_prefix(sep) {
            let inline = inline.trim_start_matches("**").trim();
            return Some((field, inline));
        }
    }
    // `## 下一步 跑一次 make` under a markdown heading still counts; in prose it does not.
    if is_md_heading {
        return Some((field, rest));
    }
    None
}

fn parse_json(answer: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let start = answer.find('{')?;
    let end = answer.rfind('}')?;
    match serde_json::from_str::<serde_json::Value>(answer.get(start..=end)?) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.trim().to_string(),
        serde_json::Value::Array(items) => {
            items.iter().map(json_text).collect::<Vec<_>>().join("\n")
        }
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;

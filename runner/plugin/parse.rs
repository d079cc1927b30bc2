//! The text formats of a Claude Code plugin: the front matter of `SKILL.md` and `agents/*.md`
//! (a `---` block of `key: value` lines, a value possibly a `[a, b]` or `- a` list), the
//! `hooks/hooks.json` event table, and `.claude-plugin/plugin.json`'s name. Pure functions over
//! text: the files are read by `fsroot::config` (see the module above).

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use thiserror::Error;

/// Default time a hook may take (Claude Code's: 60 s).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest timeout a hook may ask for.
const HOOK_TIMEOUT_MAX: Duration = Duration::from_secs(600);

/// What is wrong with one plugin file.
#[derive(Debug, Error)]
pub enum ParseError {
    /// A Markdown file without a `---` front matter block.
    #[error("开头没有 --- 包起来的 front matter")]
    NoFrontMatter,
    /// A required key is missing or empty.
    #[error("front matter 里没有 {0}")]
    Missing(&'static str),
    /// Not JSON.
    #[error("不是合法的 JSON:{0}")]
    Json(#[source] serde_json::Error),
    /// The JSON has the wrong shape.
    #[error("{0}")]
    Shape(String),
    /// An event name Claude Code does not have.
    #[error("钩子事件 {0} 不认识(可用:PreToolUse、PostToolUse、UserPromptSubmit、Stop、SubagentStop、SessionStart)")]
    UnknownEvent(String),
    /// A matcher that is not a regular expression.
    #[error("matcher {0:?} 不是合法的正则表达式")]
    BadMatcher(String),
}

/// A Markdown file split into its front matter and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// `key: value` pairs (a list's items joined by `,`).
    pub keys: BTreeMap<String, String>,
    /// Everything after the closing `---`.
    pub body: String,
}

impl FrontMatter {
    /// The value of `key`, trimmed, when present and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// `key` as a list: comma- or space-separated (`tools: Read, Grep` or `[Read, Grep]`).
    pub fn list(&self, key: &str) -> Option<Vec<String>> {
        self.get(key).map(|v| {
            v.split([',', ' '])
                .map(|s| s.trim().trim_matches(['"', '\'']))
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
    }
}

/// Splits `text` into front matter and body.
pub fn front_matter(text: &str) -> Result<FrontMatter, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(ParseError::NoFrontMatter);
    }
    let mut keys = BTreeMap::new();
    let mut last: Option<String> = None;
    let mut closed = false;
    let mut consumed = text.find('\n').map_or(text.len(), |i| i + 1);
    for line in lines.by_ref() {
        consumed += line.len() + 1;
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let (Some(item), Some(key)) = (trimmed.strip_prefix("- "), &last) {
            let entry: &mut String = keys.entry(key.clone()).or_default();
            if !entry.is_empty() {
                entry.push(',');
            }
            entry.push_str(unquote(item));
            continue;
        }
        if line.starts_with([' ', '\t']) {
            // A folded continuation line of the last value.
            if let Some(key) = &last {
                let entry: &mut String = keys.entry(key.clone()).or_default();
                entry.push(' ');
                entry.push_str(trimmed);
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim();
            let v = v
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .unwrap_or(v);
            let v = if matches!(v, "|" | ">" | "|-" | ">-") {
                ""
            } else {
                unquote(v)
            };
            keys.insert(k.trim().to_string(), v.to_string());
            last = Some(k.trim().to_string());
        }
    }
    if !closed {
        return Err(ParseError::NoFrontMatter);
    }
    let body = text
        .get(consumed.min(text.len())..)
        .unwrap_or("")
        .to_string();
    Ok(FrontMatter { keys, body })
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// The events a hook can be bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEvent {
    /// Before a tool call runs: exit 2 blocks it.
    PreToolUse,
    /// After a tool call ran: exit 2 tells the model stderr.
    PostToolUse,
    /// When a prompt is given to an agent: stdout joins the prompt, exit 2 is shown.
    UserPromptSubmit,
    /// When the main agent ends its turn.
    Stop,
    /// When a worker ends its turn.
    SubagentStop,
    /// When an agent's session starts: stdout joins its first prompt.
    SessionStart,
}

impl HookEvent {
    /// Every event, by its Claude Code name.
    pub const ALL: [HookEvent; 6] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::SessionStart,
    ];

    /// Claude Code's name of the event.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::SessionStart => "SessionStart",
        }
    }

    /// True for the events whose matcher is matched against a tool name.
    pub fn matches_tools(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

/// One command bound to an event (Claude Code's `{"type": "command", "command": …}`).
#[derive(Debug, Clone)]
pub struct HookSpec {
    /// The event.
    pub event: HookEvent,
    /// The matcher as written (`Bash`, `Edit|Write`, `*`, empty: everything).
    pub matcher: String,
    /// The compiled matcher, anchored; `None` matches everything.
    pub pattern: Option<regex::Regex>,
    /// The shell command (run with the agent's shell, in its container).
    pub command: String,
    /// How long it may take.
    pub timeout: Duration,
}

impl HookSpec {
    /// True when the hook applies to a call of `tool` (events without tools: always).
    pub fn applies_to(&self, tool: &str) -> bool {
        !self.event.matches_tools() || self.pattern.as_ref().is_none_or(|p| p.is_match(tool))
    }
}

/// Parses `hooks/hooks.json`: `{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks":
/// [{"type": "command", "command": "…", "timeout": 30}]}]}}` (the outer `hooks` key may be
/// left out, as in Claude Code's settings files).
pub fn hooks_json(text: &str) -> Result<Vec<HookSpec>, ParseError> {
    let root: Value = serde_json::from_str(text).map_err(ParseError::Json)?;
    let table = root.get("hooks").unwrap_or(&root);
    let table = table
        .as_object()
        .ok_or_else(|| ParseError::Shape("hooks 要是一个对象(事件 → 列表)".into()))?;
    let mut out = Vec::new();
    for (event_name, groups) in table {
        if event_name == "description" {
            continue;
        }
        let event = HookEvent::ALL
            .into_iter()
            .find(|e| e.as_str() == event_name)
            .ok_or_else(|| ParseError::UnknownEvent(event_name.clone()))?;
        let groups = groups
            .as_array()
            .ok_or_else(|| ParseError::Shape(format!("{event_name} 要是一个列表")))?;
        for group in groups {
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(m)) => m.clone(),
                Some(_) => {
                    return Err(ParseError::Shape(format!(
                        "{event_name} 的 matcher 要是字符串"
                    )))
                }
            };
            let pattern = match matcher.trim() {
                "" | "*" => None,
                m => Some(
                    regex::Regex::new(&format!("^(?:{m})$"))
                        .map_err(|_| ParseError::BadMatcher(m.to_string()))?,
                ),
            };
            let hooks = group
                .get("hooks")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    ParseError::Shape(format!("{event_name} 的条目里没有 hooks 列表"))
                })?;
            for hook in hooks {
                let kind = hook
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("command");
                if kind != "command" {
                    return Err(ParseError::Shape(format!(
                        "钩子类型 {kind:?} 不支持(只支持 command)"
                    )));
                }
                let command = hook
                    .get("command")
                    .and_then(Value::as_str)
                    .filter(|c| !c.trim().is_empty() && !c.contains('\0'))
                    .ok_or_else(|| ParseError::Shape(format!("{event_name} 的钩子没有 command")))?;
                let timeout = match hook.get("timeout") {
                    None | Some(Value::Null) => HOOK_TIMEOUT,
                    Some(t) => {
                        Duration::from_secs(t.as_u64().filter(|s| *s > 0).ok_or_else(|| {
                            ParseError::Shape(format!("{event_name} 的 timeout 要是正整数秒"))
                        })?)
                        .min(HOOK_TIMEOUT_MAX)
                    }
                };
                out.push(HookSpec {
                    event,
                    matcher: matcher.clone(),
                    pattern: pattern.clone(),
                    command: command.to_string(),
                    timeout,
                });
            }
        }
    }
    Ok(out)
}

/// The `name` of `.claude-plugin/plugin.json`, when it gives one.
pub fn manifest_name(text: &str) -> Result<Option<String>, ParseError> {
    let root: Value = serde_json::from_str(text).map_err(ParseError::Json)?;
    if !root.is_object() {
        return Err(ParseError::Shape("plugin.json 要是一个对象".into()));
    }
    Ok(root
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string))
}

/// What a hook said, read from its exit code, stdout and stderr (Claude Code's semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Exit 0: go on; stdout is extra context (UserPromptSubmit, SessionStart).
    Proceed {
        /// Its stdout.
        stdout: String,
    },
    /// Exit 2, or JSON output `{"decision": "block"}` / `permissionDecision: "deny"`: the
    /// call is blocked (PreToolUse) or the reason told to the model; the reason is stderr
    /// (or the JSON's reason).
    Block {
        /// Why, for the model.
        reason: String,
    },
    /// Any other exit, a timeout, or the hook could not run: shown and logged, never a block.
    Error {
        /// What went wrong.
        why: String,
    },
}

/// Reads a finished hook: `code` is its exit code (`None`: killed or timed out).
pub fn outcome(code: Option<i64>, timed_out: bool, stdout: &str, stderr: &str) -> HookOutcome {
    if timed_out {
        return HookOutcome::Error {
            why: "超时,按出错处理(不拦)".into(),
        };
    }
    match code {
        Some(0) => {
            if let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) {
                let specific = v.get("hookSpecificOutput");
                let deny = specific
                    .and_then(|s| s.get("permissionDecision"))
                    .and_then(Value::as_str)
                    == Some("deny");
                let block = v.get("decision").and_then(Value::as_str) == Some("block");
                if deny || block {
                    let reason = specific
                        .and_then(|s| s.get("permissionDecisionReason"))
                        .or_else(|| v.get("reason"))
                        .and_then(Value::as_str)
                        .unwrap_or("钩子拒绝了")
                        .to_string();
                    return HookOutcome::Block { reason };
                }
                let context = specific
                    .and_then(|s| s.get("additionalContext"))
                    .and_then(Value::as_str);
                if let Some(c) = context {
                    return HookOutcome::Proceed {
                        stdout: c.to_string(),
                    };
                }
            }
            HookOutcome::Proceed {
                stdout: stdout.to_string(),
            }
        }
        Some(2) => HookOutcome::Block {
            reason: if stderr.trim().is_empty() {
                "钩子以退出码 2 拦下,没说原因".into()
            } else {
                stderr.trim().to_string()
            },
        },
        Some(c) => HookOutcome::Error {
            why: format!("退出码 {c}:{}", stderr.trim()),
        },
        None => HookOutcome::Error {
            why: format!("被信号终止:{}", stderr.trim()),
        },
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;

//! Guards that decide, in code, what an agent may do (seed 001 "协调者", seed 003
//! "whitelist_guard"): the whitelist (any tool not on the role's list is denied whatever the
//! model calls), the delegate guard (the coordinator's Bash runs only glance commands, decided by
//! the same `is_ephemeral` trim uses), and the worker report format.

use super::spec::AgentSpec;
use crate::glance::is_ephemeral;
use crate::model::{ToolCall, ToolName};

/// Most lines of a worker report.
pub const REPORT_MAX_LINES: usize = 30;
/// The four parts of a worker report, in order.
pub const REPORT_PARTS: [&str; 4] = ["结论", "依据", "产出", "未验证"];

/// What a guard says about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Refuse it; the text becomes an error tool_result.
    Deny(String),
}

/// Checks one call against the agent's whitelist and, for glance-only agents, the delegate
/// guard. Unknown tool names are refused too (the registry has the final say).
pub fn check(spec: &AgentSpec, call: &ToolCall) -> Decision {
    if !spec.allows(&call.name) {
        let available = if spec.tools.is_empty() {
            "它没有任何工具,直接回答".to_string()
        } else {
            format!("可用:{}", spec.tools.join(", "))
        };
        return Decision::Deny(format!(
            "工具 {} 不在 {} 的白名单里,运行时拒绝执行({available})。",
            call.name, spec.name,
        ));
    }
    if spec.glance_only && ToolName::Bash.is(&call.name) {
        let cmd = call
            .input
            .get("command")
            .and_then(|c| c.as_str())
            .unwrap_or("");
        if !is_ephemeral(cmd) {
            return Decision::Deny(format!(
                "协调者的 Bash 只跑一眼就完的只读命令(git status/diff/log、ls、cat、ps……),`{}` 不是。\
                 要动手就用 Agent 工具派执行者:任务书写清目标和验收标准,要求长产出写进工作台 artifacts/、只回路径和结论。",
                one_line(cmd, 120)
            ));
        }
    }
    Decision::Allow
}

/// What is wrong with a worker report (the text is for the model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportProblem {
    /// The parts that are missing, in order.
    pub missing: Vec<&'static str>,
    /// The non-empty lines, when more than [`REPORT_MAX_LINES`].
    pub too_long: Option<usize>,
}

impl std::fmt::Display for ReportProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut problems = Vec::new();
        if !self.missing.is_empty() {
            problems.push(format!("缺少:{}", self.missing.join("、")));
        }
        if let Some(n) = self.too_long {
            problems.push(format!("{n} 行,超过 {REPORT_MAX_LINES} 行"));
        }
        f.write_str(&problems.join(";"))
    }
}

/// Checks a worker report: the four parts present (as headings or `结论:` lines) and at most
/// [`REPORT_MAX_LINES`] non-empty lines. `Err` names what is wrong.
pub fn check_report(text: &str) -> Result<(), ReportProblem> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let missing: Vec<&'static str> = REPORT_PARTS
        .iter()
        .copied()
        .filter(|part| !lines.iter().any(|l| is_heading(l, part)))
        .collect();
    let too_long = (lines.len() > REPORT_MAX_LINES).then_some(lines.len());
    if missing.is_empty() && too_long.is_none() {
        Ok(())
    } else {
        Err(ReportProblem { missing, too_long })
    }
}

fn is_heading(line: &str, part: &str) -> bool {
    let l = line
        .trim()
        .trim_start_matches(['#', '*', '-', ' ', '>'])
        .trim_start();
    let l = l
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '、')
        .trim_start();
    l.strip_prefix(part).is_some_and(|rest| {
        let rest = rest.trim_start_matches('*');
        rest.is_empty() || rest.starts_with([':', ':', ' ', '\u{3000}'])
    })
}

/// `s` on one line, cut to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        flat.chars().take(max).collect::<String>() + "…"
    } else {
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::roles;
    use serde_json::json;

    fn call(name: &str, input: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "t".into(),
            name: name.into(),
            input,
        }
    }

    #[test]
    fn whitelist_denies_tools_off_the_list() {
        let j = roles::judge("判定", "", false);
        assert!(matches!(
            check(&j, &call("Write", json!({}))),
            Decision::Deny(_)
        ));
        assert!(matches!(
            check(&j, &call("Bash", json!({"command": "ls"}))),
            Decision::Deny(_)
        ));
        assert_eq!(check(&j, &call("Read", json!({}))), Decision::Allow);
        assert!(matches!(
            check(&j, &call("NoSuchTool", json!({}))),
            Decision::Deny(_)
        ));
        assert!(matches!(
            check(&j, &call("Write", json!({}))),
            Decision::Deny(t) if t.ends_with("(可用:mcp__human__ask, Read, Glob, Grep)。")
        ));
    }

    #[test]
    fn an_empty_whitelist_says_so_instead_of_an_empty_list() {
        // `once -t ''`: no tools at all.
        let bare = roles::once("", Vec::new(), None);
        assert_eq!(
            check(&bare, &call("Read", json!({}))),
            Decision::Deny(
                "工具 Read 不在 ad-hoc 的白名单里,运行时拒绝执行(它没有任何工具,直接回答)。".into()
            )
        );
    }

    #[test]
    fn coordinator_bash_is_glance_only() {
        let c = roles::coordinator("协调者", "", vec![]);
        let deny = |cmd: &str| {
            matches!(
                check(&c, &call("Bash", json!({"command": cmd}))),
                Decision::Deny(_)
            )
        };
        assert!(deny("rm -rf x"));
        assert!(deny("git status && rm x"));
        assert!(!deny("git status"));
        assert!(deny(""));
        assert!(matches!(
            check(&c, &call("Write", json!({}))),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn worker_report_format() {
        let good = "## 结论\n做成了\n## 依据\ncargo test 通过\n## 产出\nsrc/a.rs\n## 未验证\n无";
        assert!(check_report(good).is_ok());
        assert!(check_report("结论:好了\n依据:跑过\n产出:a\n未验证:无").is_ok());
        assert!(check_report("**结论**:好了\n**依据**:x\n**产出**:y\n**未验证**:无").is_ok());
        let e = check_report("做完了").unwrap_err().to_string();
        assert!(e.contains("结论") && e.contains("未验证"));
        let long = format!("{good}\n{}", "x\n".repeat(40));
        assert!(check_report(&long)
            .unwrap_err()
            .to_string()
            .contains("超过 30 行"));
        // "结论性" is not the heading 结论.
        assert!(check_report("结论性的话\n依据:\n产出:\n未验证:").is_err());
    }
}

//! [`Goal`]: the frozen goal and its checklist (seed 002 "目标长什么样", "验不了的条目,设目标时就会喊").
//!
//! Two sections, both required: 目标 (a statement) and 判定清单 (checks, one list item each).
//! A check the judge cannot verify in this environment is marked `[此环境无法验证:原因]`; such
//! items are doomed at judging time, so the seed's warning block is shown the moment the goal
//! is frozen ([`unverifiable_warning`]). A goal the human amends after an UNREACHABLE verdict
//! keeps the original visible and appends the change ([`Goal::amend`]).
//!
//! An item may carry a check, a command whose exit status decides it ([`super::checks`] has
//! the format); [`Goal::commands`] holds them by item and [`Goal::gate_checks`] lists them for
//! the gates.

use std::io;
use std::path::Path;

use super::brief::{
    first_non_empty, is_placeholder, list_items, read_optional, split_sections, write_atomic,
};
use super::checks::{
    drop_marker_lines, fence_markdown, item_command, lift_fences, script_of, take_markers, Check,
    CheckSource, ItemCommand,
};

/// The section names in order (seed 002).
pub const SECTION_NAMES: [&str; 2] = ["目标", "判定清单"];

/// The marker of a check that cannot be verified here (seed 002).
pub const UNVERIFIABLE_MARK: &str = "此环境无法验证";

/// What [`Goal::amend`] puts before the human's amendment.
pub const AMENDED_MARK: &str = "(已修改)";

/// Heading spellings, each with its section index.
const ALIASES: &[(&str, usize)] = &[
    ("目标", 0),
    ("判定清单", 1),
    ("检查清单", 1),
    ("验收清单", 1),
    ("判定项", 1),
];

/// A goal with its checklist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Goal {
    /// 目标: what has to be true at the end.
    pub statement: String,
    /// 判定清单: checks verifiable on the spot, one per entry.
    pub checks: Vec<String>,
    /// The command of each item that has one, by item index (0-based), in order.
    pub commands: Vec<(usize, ItemCommand)>,
}

impl Goal {
    /// Parses the judge's goal-setting output or a goal file (fenced code removed first, as
    /// for the brief). Never fails.
    pub fn parse(text: &str) -> Goal {
        // Fenced blocks become markers first, so a block under an item stays with it.
        let (lifted, fences) = lift_fences(text);
        let found = split_sections(&lifted, ALIASES);
        let mut checks = Vec::new();
        let mut commands = Vec::new();
        for item in list_items(&first_non_empty(&found[1])) {
            let (mut text, idx) = take_markers(&item);
            let under: Vec<_> = idx.iter().filter_map(|i| fences.get(*i)).collect();
            let command = item_command(&text, &under);
            if is_placeholder(&text) || (text.trim().is_empty() && command.is_none()) {
                continue;
            }
            if text.trim().is_empty() {
                if let Some(c) = &command {
                    text = format!("`{}`", c.command.lines().next().unwrap_or("").trim());
                }
            }
            if let Some(c) = command {
                commands.push((checks.len(), c));
            }
            checks.push(text);
        }
        Goal {
            statement: drop_marker_lines(&first_non_empty(&found[0]))
                .trim()
                .to_string(),
            checks,
            commands,
        }
    }

    /// The checks the gates run: one per item that has a command, in item order.
    pub fn gate_checks(&self) -> Vec<Check> {
        self.commands
            .iter()
            .map(|(i, c)| Check {
                source: CheckSource::Goal(i + 1),
                command: script_of(c),
                expect: c.expect,
            })
            .collect()
    }

    /// The Chinese names of the empty sections.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.statement.trim().is_empty() {
            out.push(SECTION_NAMES[0]);
        }
        if self.checks.is_empty() {
            out.push(SECTION_NAMES[1]);
        }
        out
    }

    /// Both sections have content.
    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// The checks marked `[此环境无法验证:…]` (ASCII or fullwidth brackets and colon).
    pub fn unverifiable(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| is_unverifiable(c))
            .map(String::as_str)
            .collect()
    }

    /// The seed's warning block for this goal, `None` when every check is verifiable.
    /// `shown_path` is the goal file as the human should see it (`.flower/notes/目标.md`).
    #[cfg(test)]
    pub(crate) fn unverifiable_warning(&self, shown_path: &str) -> Option<Vec<String>> {
        let items: Vec<String> = self.unverifiable().into_iter().map(String::from).collect();
        unverifiable_warning(self.checks.len(), &items, shown_path)
    }

    /// The file form: `# 目标` and `# 判定清单` with `- ` items (`(空)` when empty).
    pub fn to_markdown(&self) -> String {
        let statement = if self.statement.trim().is_empty() {
            "(空)"
        } else {
            self.statement.trim()
        };
        let checks = if self.checks.is_empty() {
            "(空)".to_string()
        } else {
            self.checks
                .iter()
                .enumerate()
                .map(|(i, c)| match self.fenced(i) {
                    Some(cmd) => format!("- {c}\n{}", fence_markdown(cmd)),
                    None => format!("- {c}"),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!("# 目标\n{statement}\n\n# 判定清单\n{checks}\n")
    }

    /// The fenced command of item `i` (0-based), if it has one.
    fn fenced(&self, i: usize) -> Option<&ItemCommand> {
        self.commands
            .iter()
            .find(|(n, c)| *n == i && c.fenced)
            .map(|(_, c)| c)
    }

    /// What the judge and the work step read: the statement and the numbered checklist (so a
    /// verdict can cite "判定项 2").
    pub fn prompt_block(&self) -> String {
        let checks = self
            .checks
            .iter()
            .enumerate()
            .map(|(i, c)| match self.fenced(i) {
                Some(cmd) => format!("{}. {c}(检查:`{}`)", i + 1, one_line(&cmd.command)),
                None => format!("{}. {c}", i + 1),
            })
            .collect::<Vec<_>>()
            .join("\n");
        format!(
            "## 目标\n{}\n\n## 判定清单\n{checks}",
            self.statement.trim()
        )
    }

    /// Reads a goal file; `Ok(None)` when it does not exist. Placeholders count as empty.
    /// Errors: any other I/O error.
    pub fn load(path: &Path) -> io::Result<Option<Goal>> {
        let Some(text) = read_optional(path)? else {
            return Ok(None);
        };
        let mut g = Goal::parse(&text);
        if is_placeholder(&g.statement) {
            g.statement.clear();
        }
        Ok(Some(g))
    }

    /// Writes [`Goal::to_markdown`] atomically, creating directories. Errors: I/O.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        write_atomic(path, &self.to_markdown())
    }

    /// Appends the human's amendment after the statement — `(已修改)` and the text on a new
    /// paragraph — so the original goal stays visible. Blank text changes nothing.
    pub fn amend(&mut self, extra: &str) {
        let extra = extra.trim();
        if extra.is_empty() {
            return;
        }
        self.statement = format!("{}\n\n{AMENDED_MARK}{extra}", self.statement.trim_end());
    }

    /// Loads the goal at `path`, [`Goal::amend`]s it and writes it back. Returns the amended
    /// goal, or `Ok(None)` when there is no goal file. Errors: I/O.
    #[cfg(test)]
    pub(crate) fn append_amendment(path: &Path, extra: &str) -> io::Result<Option<Goal>> {
        let Some(mut g) = Goal::load(path)? else {
            return Ok(None);
        };
        g.amend(extra);
        g.write(path)?;
        Ok(Some(g))
    }
}

/// A script on one line (`a; b`).
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether a check carries the unverifiable marker.
fn is_unverifiable(check: &str) -> bool {
    ["[", "【", "［"]
        .iter()
        .any(|open| check.contains(&format!("{open}{UNVERIFIABLE_MARK}")))
}

/// The seed's warning block (seed 002), as plain screen lines:
///
/// ```text
///   # 目标里有 4/15 条在这个环境里验不了 —— 判定时它们必然过不去,会停下来问你。
///     现在改 .flower/notes/目标.md 还来得及:
///       · 界面截图并实际看图 [此环境无法验证:屏幕录制未授权]
/// ```
///
/// `None` when `items` is empty. Item text is model output: sanitise before printing (the
/// renderer does).
pub fn unverifiable_warning(
    total: usize,
    items: &[String],
    shown_path: &str,
) -> Option<Vec<String>> {
    if items.is_empty() {
        return None;
    }
    let mut lines = vec![
        format!(
            "  # 目标里有 {}/{total} 条在这个环境里验不了 —— 判定时它们必然过不去,会停下来问你。",
            items.len()
        ),
        format!("    现在改 {shown_path} 还来得及:"),
    ];
    lines.extend(items.iter().map(|i| format!("      · {i}")));
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOAL: &str = "# 目标\n让 conv.py 能把 md 转成 html。\n\n# 判定清单\n- 跑 `python conv.py a.md` 产出 a.html\n- 输出里含 `<h1>`\n- 列表被转成 `<ul><li>`\n";

    #[test]
    fn parses_statement_and_checks() {
        let g = Goal::parse(GOAL);
        assert_eq!(g.statement, "让 conv.py 能把 md 转成 html。");
        assert_eq!(
            g.checks,
            vec![
                "跑 `python conv.py a.md` 产出 a.html",
                "输出里含 `<h1>`",
                "列表被转成 `<ul><li>`"
            ]
        );
        assert!(g.is_complete());
        assert!(g.unverifiable().is_empty());
        assert_eq!(g.unverifiable_warning(".flower/notes/目标.md"), None);
    }

    #[test]
    fn numbered_and_starred_items_and_continuations() {
        let g = Goal::parse(
            "## 目标\nX\n## 判定清单\n1. 构建成功\n2) 跑得起来\n* 能用:\n  输入 a 输出 b\n",
        );
        assert_eq!(
            g.checks,
            vec!["构建成功", "跑得起来", "能用: 输入 a 输出 b"]
        );
    }

    #[test]
    fn both_sections_are_required() {
        assert_eq!(Goal::parse("# 目标\nX\n").missing(), vec!["判定清单"]);
        assert_eq!(Goal::parse("# 判定清单\n- a\n").missing(), vec!["目标"]);
        assert_eq!(Goal::default().missing(), SECTION_NAMES.to_vec());
    }

    #[test]
    fn unverifiable_items_and_the_seed_warning_block() {
        let g = Goal::parse(
            "# 目标\nX\n# 判定清单\n- 构建成功\n- 界面截图并实际看图 [此环境无法验证:屏幕录制未授权]\n- 在 macOS 终端运行 【此环境无法验证：容器是 Linux】\n- 能用\n",
        );
        assert_eq!(g.unverifiable().len(), 2);
        let lines = g.unverifiable_warning(".flower/notes/目标.md").unwrap();
        assert_eq!(
            lines,
            vec![
                "  # 目标里有 2/4 条在这个环境里验不了 —— 判定时它们必然过不去,会停下来问你。",
                "    现在改 .flower/notes/目标.md 还来得及:",
                "      · 界面截图并实际看图 [此环境无法验证:屏幕录制未授权]",
                "      · 在 macOS 终端运行 【此环境无法验证：容器是 Linux】",
            ]
        );
    }

    #[test]
    fn markdown_round_trips_and_placeholders_load_empty() {
        let g = Goal::parse(GOAL);
        assert_eq!(Goal::parse(&g.to_markdown()), g);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes/目标.md");
        assert_eq!(Goal::load(&path).unwrap(), None);
        Goal::default().write(&path).unwrap();
        let loaded = Goal::load(&path).unwrap().unwrap();
        assert_eq!(loaded, Goal::default());
        assert!(!loaded.is_complete());
    }

    #[test]
    fn prompt_block_numbers_the_checks() {
        let g = Goal::parse(GOAL);
        assert_eq!(
            g.prompt_block(),
            "## 目标\n让 conv.py 能把 md 转成 html。\n\n## 判定清单\n1. 跑 `python conv.py a.md` 产出 a.html\n2. 输出里含 `<h1>`\n3. 列表被转成 `<ul><li>`"
        );
    }

    #[test]
    fn amendment_is_appended_visibly_and_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("目标.md");
        assert_eq!(Goal::append_amendment(&path, "x").unwrap(), None);
        Goal::parse(GOAL).write(&path).unwrap();
        let g = Goal::append_amendment(&path, "只要求 Linux 上能跑")
            .unwrap()
            .unwrap();
        assert_eq!(
            g.statement,
            "让 conv.py 能把 md 转成 html。\n\n(已修改)只要求 Linux 上能跑"
        );
        let reloaded = Goal::load(&path).unwrap().unwrap();
        assert_eq!(reloaded, g);
        assert_eq!(reloaded.checks.len(), 3, "checks untouched");
        let mut same = reloaded.clone();
        same.amend("  ");
        assert_eq!(same, reloaded);
    }

    #[test]
    fn items_with_inline_and_fenced_checks() {
        let text = "# 目标\n服务能用\n\n# 判定清单\n```\n./orphan\n```\n\
            - 构建成功 检查: `make`\n\
            - 自检通过\n  ```sh\n  make\n  ./httpd --selftest\n  ```\n\
            - 坏请求被拒\n  ```bash exit=1\n  ./httpd --bad\n  ```\n\
            - 页面好看\n  ```text\n  <h1>hi</h1>\n  ```\n\
            - 没有的端点 404,check: `curl -s -o /dev/null -w '%{http_code}' x | grep -q 404` (exit 0)\n";
        let g = Goal::parse(text);
        assert_eq!(
            g.checks,
            vec![
                "`./orphan`",
                "构建成功 检查: `make`",
                "自检通过",
                "坏请求被拒",
                "页面好看",
                "没有的端点 404,check: `curl -s -o /dev/null -w '%{http_code}' x | grep -q 404` (exit 0)",
            ]
        );
        let gates = g.gate_checks();
        let got: Vec<(String, &str, i64)> = gates
            .iter()
            .map(|c| (c.id(), c.command.as_str(), c.expect))
            .collect();
        assert_eq!(
            got,
            vec![
                ("item-1".to_string(), "./orphan", 0),
                ("item-2".to_string(), "make", 0),
                ("item-3".to_string(), "set -e\nmake\n./httpd --selftest", 0),
                ("item-4".to_string(), "./httpd --bad", 1),
                (
                    "item-6".to_string(),
                    "curl -s -o /dev/null -w '%{http_code}' x | grep -q 404",
                    0
                ),
            ]
        );
        // Written back and read again: the same goal, fences and all.
        assert_eq!(Goal::parse(&g.to_markdown()), g);
        assert!(g
            .prompt_block()
            .contains("3. 自检通过(检查:`make; ./httpd --selftest`)"));
        // Fences outside the checklist are dropped as before.
        let plain = Goal::parse("# 目标\nX\n```\ncode\n```\n\n(已修改)Y\n# 判定清单\n- a\n");
        assert_eq!(plain.statement, "X\n\n(已修改)Y");
        assert_eq!(plain.commands.len(), 0);
    }
}

//! The console as a run's [`Frontend`] (the UI seam of [`crate::flow::frontend`]): what `go` and
//! `run` get when stdin is a terminal; and how a [`Notice`] looks on screen, for both frontends.
//!
//! Lifecycle as the driver calls it: the command line builds the console (events print as lines;
//! the terminal is untouched while the run's services are built and the Docker image may be
//! built with its own spinner); [`Frontend::attach`] takes the terminal (cbreak, input thread,
//! resident prompt, signal listener) and the run's controls (Ctrl-C, aside oracle);
//! [`Frontend::quit_requested`] resolves on the second Ctrl-C; [`Frontend::detach`] waits for
//! pending aside answers (≤ 120 s, not after a quit or a signal) and restores the terminal.

use async_trait::async_trait;

use super::console::Console;
use super::render::{closing_line, shorten_home, wake_banner, RenderOptions};
use crate::agent::EventSink;
use crate::flow::frontend::{Controls, Frontend, Notice};
use crate::flow::watch::{Change, ConfigChange};
use crate::shown::Line;

/// The lines of a notice (every kind but [`Notice::Totals`], which is the frontend's own
/// running tally).
pub fn notice_lines(notice: &Notice, opts: &RenderOptions) -> Vec<Line> {
    match notice {
        Notice::Archived(dir) => vec![Line::plain(format!(
            "<- 上一段已归档到 {}",
            shorten_home(dir, opts.home.as_deref())
        ))],
        Notice::Wake(info) => vec![wake_banner(info, opts)],
        Notice::Amended => {
            vec!["+ 收到 (已追加进确认书;目标会按它重新设定,协调者这一轮直接收到它)".into()]
        }
        Notice::AlreadyClarified => vec![
            "- 需求已经确认过(notes/需求.md 四段齐全):--clarify-only 不改它,这句话没记进确认书。要按它重新确认就加 --new"
                .into(),
        ],
        Notice::Sandbox(lines) => lines.iter().map(|l| Line::plain(format!("- {l}"))).collect(),
        Notice::TeardownFailed(why) => vec![Line::plain(format!(
            "x 清理容器失败:{why}(`flowerbox gc` 可以收拾残留)"
        ))],
        Notice::Recovered(text) => vec![Line::plain(format!("! {text}"))],
        Notice::ConfigChanged(changes) => config_changed_lines(changes, opts),
        Notice::Closing(c) => vec![
            Line::new(),
            closing_line(c.cost_usd, c.all_known, c.any_known, &c.manifest),
        ],
        Notice::Totals => Vec::new(),
    }
}

/// The configuration files a run changed: one `!` line, then one line per file (what happened,
/// and the keys or servers that appeared, changed or went; never a value). Names an agent wrote
/// (a server's) are cleaned where every line is, at the terminal.
fn config_changed_lines(changes: &[ConfigChange], opts: &RenderOptions) -> Vec<Line> {
    let mut lines: Vec<Line> =
        vec!["! 这次运行里,下次运行会读的配置被改了(下次运行前先看一眼,确认是你要的):".into()];
    for c in changes {
        let path = shorten_home(&c.path, opts.home.as_deref());
        let what = match c.change {
            Change::Created => "新建",
            Change::Modified => "改了",
            Change::Removed => "删了",
        };
        let why = match &c.unreadable {
            Some(why) => format!(":现在读不了({why})"),
            None => String::new(),
        };
        // A removed file is named alone: all of its items went with it.
        let listed = match c.change {
            Change::Removed => Vec::new(),
            Change::Created | Change::Modified => {
                vec![
                    (&c.added, "新增"),
                    (&c.changed, "改了"),
                    (&c.removed, "删了"),
                ]
            }
        };
        let parts: Vec<String> = listed
            .into_iter()
            .filter(|(names, _)| !names.is_empty())
            .map(|(names, label)| format!("{label} {}", names.join("、")))
            .collect();
        let items = if parts.is_empty() {
            String::new()
        } else {
            format!(":{} {}", c.items, parts.join(";"))
        };
        lines.push(Line::plain(format!("  {what} {path}{why}{items}")));
    }
    lines
}

#[async_trait]
impl Frontend for Console {
    fn events(&self) -> EventSink {
        self.event_sink()
    }

    fn notice(&self, notice: &Notice) {
        let lines = match notice {
            Notice::Totals => vec![self.status_line()],
            other => notice_lines(other, &self.render_options()),
        };
        self.print_rendered(&lines);
    }

    fn attach(&self, controls: Controls) {
        if let Err(e) = self.start(controls.channel.clone()) {
            tracing::warn!(error = %e, "console: no interactive input");
        }
        self.set_interrupter(controls.interrupt);
        self.set_aside(controls.aside);
    }

    fn owns_interrupt(&self) -> bool {
        Console::owns_interrupt(self)
    }

    async fn quit_requested(&self) {
        Console::quit_requested(self).await
    }

    fn detach(&self) {
        self.finish_blocking();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn what_the_sandbox_says_at_setup_and_teardown_is_a_notice_of_the_frontend() {
        // These were lines on stderr from the library, drawn over a spinner (issue 31 §2).
        let opts = RenderOptions::default();
        let lines = notice_lines(
            &Notice::Sandbox(vec![
                "删掉了残留的容器 a".into(),
                "删掉了残留的网络 b".into(),
            ]),
            &opts,
        );
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("- 删掉了残留的容器 a"), "{lines:?}");
        let lines = notice_lines(&Notice::TeardownFailed("engine gone".into()), &opts);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("x 清理容器失败:engine gone(`flowerbox gc` 可以收拾残留)"),
            "{lines:?}"
        );
    }

    #[test]
    fn changed_configuration_is_named_with_its_keys_and_nothing_raw() {
        let change =
            |path: &str, change: Change, items, added: &[&str], changed: &[&str]| ConfigChange {
                path: PathBuf::from(path),
                change,
                unreadable: None,
                items,
                added: added.iter().map(|s| s.to_string()).collect(),
                changed: changed.iter().map(|s| s.to_string()).collect(),
                removed: Vec::new(),
            };
        let opts = RenderOptions {
            home: Some(PathBuf::from("/home/u")),
            ..RenderOptions::default()
        };
        let lines = notice_lines(
            &Notice::ConfigChanged(vec![
                change(
                    "/home/u/p/.env",
                    Change::Created,
                    "键",
                    &["ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"],
                    &[],
                ),
                change(
                    "/home/u/p/.mcp.json",
                    Change::Modified,
                    "服务器",
                    &["evil\x1b]52;c;aGk=\x07"],
                    &["db"],
                ),
                ConfigChange {
                    unreadable: Some("不是普通文件(FIFO、套接字或设备),不读".into()),
                    ..change("/home/u/p/flows.toml", Change::Created, "流程", &[], &[])
                },
            ]),
            &opts,
        );
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("! 这次运行里"));
        assert_eq!(
            lines[1],
            "  新建 ~/p/.env:键 新增 ANTHROPIC_BASE_URL、ANTHROPIC_AUTH_TOKEN"
        );
        assert!(
            lines[2].starts_with("  改了 ~/p/.mcp.json:服务器 新增 evil"),
            "{lines:?}"
        );
        assert!(lines[2].ends_with(";改了 db"), "{lines:?}");
        // What the terminal writes of them holds no control character.
        let painted: String = lines.iter().map(|l| l.painted(false)).collect();
        assert!(
            !painted.contains('\x1b') && !painted.contains('\x07'),
            "{painted:?}"
        );
        assert!(
            lines[3].starts_with("  新建 ~/p/flows.toml:现在读不了(不是普通文件"),
            "{lines:?}"
        );
    }
}

//! Unit tests of [`super`] (moved out of the module so that file stays a readable size).

use super::*;
use crate::model::Usage;
use crate::role::Role;
use crate::term::sanitize::strip_sgr;

fn ev(depth: u32, kind: EventKind) -> Event {
    Event {
        agent: if depth == 0 {
            "coordinator"
        } else {
            "worker-1"
        }
        .into(),
        role: if depth == 0 {
            Role::Coordinator
        } else {
            Role::Worker
        },
        depth,
        kind,
    }
}

fn plain() -> RenderOptions {
    RenderOptions {
        home: Some(PathBuf::from("/home/u")),
        ..RenderOptions::default()
    }
}

fn verbose() -> RenderOptions {
    RenderOptions {
        verbose: true,
        ..plain()
    }
}

fn r(depth: u32, kind: EventKind, opts: &RenderOptions) -> Vec<Line> {
    render(&ev(depth, kind), opts)
}

fn text(t: &str) -> EventKind {
    EventKind::Text { text: t.into() }
}

#[test]
fn step_separator_fills_the_width() {
    let opts = RenderOptions {
        width: 40,
        ..plain()
    };
    let lines = r(
        0,
        EventKind::StepStart {
            step: "干活".into(),
        },
        &opts,
    );
    assert_eq!(
        lines,
        vec![String::new(), format!("== 干活 {}", "=".repeat(32))]
    );
    assert_eq!(layout_width(&lines[1]), 40);
}

#[test]
fn step_end_shows_cost_turns_and_context() {
    let ok = EventKind::StepEnd {
        step: "干活".into(),
        ok: true,
        cost_usd: Some(1.2345),
        turns: 12,
        context_tokens: 71_400,
        error: None,
    };
    assert_eq!(
        r(0, ok, &plain()),
        vec!["  + 完成 干活 · 12 轮 · $1.2345 · 上下文 71.4K"]
    );
    let failed = EventKind::StepEnd {
        step: "干活#round2".into(),
        ok: false,
        cost_usd: None,
        turns: 3,
        context_tokens: 0,
        error: Some("boom".into()),
    };
    assert_eq!(
        r(0, failed, &plain()),
        vec!["  x 失败 干活#round2 · 3 轮 · $?", "    boom"]
    );
}

#[test]
fn main_text_always_subagent_text_only_with_verbose() {
    assert_eq!(
        r(0, text("决定先写解析器"), &plain()),
        vec!["  决定先写解析器"]
    );
    assert!(r(1, text("我在读文件"), &plain()).is_empty());
    assert_eq!(
        r(1, text("我在读文件"), &verbose()),
        vec!["  | worker-1 我在读文件"]
    );
    assert!(r(0, EventKind::TextDelta { text: "x".into() }, &verbose()).is_empty());
}

#[test]
fn thinking_is_main_thread_only() {
    let t = || EventKind::Thinking {
        text: "先看看目录".into(),
    };
    assert_eq!(r(0, t(), &plain()), vec!["  ~ 先看看目录"]);
    assert!(r(1, t(), &verbose()).is_empty());
}

#[test]
fn prompt_events_only_with_verbose() {
    let p = || EventKind::Prompt {
        text: "任务书".into(),
    };
    assert!(r(0, p(), &plain()).is_empty());
    assert_eq!(r(0, p(), &verbose()), vec!["  > 任务书"]);
    assert_eq!(r(1, p(), &verbose()), vec!["  | worker-1 > 任务书"]);
}

#[test]
fn tool_calls_show_at_every_depth_with_the_gutter() {
    let call = |name: &str, summary: &str| EventKind::ToolCall {
        id: "t1".into(),
        name: name.into(),
        summary: summary.into(),
    };
    assert_eq!(
        r(0, call("Bash", "Bash: git status"), &plain()),
        vec!["  * Bash git status"]
    );
    assert_eq!(
        r(1, call("Read", "src/main.rs"), &plain()),
        vec!["  | worker-1 * Read src/main.rs"]
    );
    assert_eq!(
        r(1, call("TodoWrite", ""), &plain()),
        vec!["  | worker-1 * TodoWrite"]
    );
    // A multi-line command keeps its lines (issue 20: `pkill -x httpd || true nohup …`).
    assert_eq!(
        r(
            1,
            call(
                "Bash",
                "Bash: pkill -x httpd || true\nnohup ./httpd > log 2>&1 &"
            ),
            &plain()
        ),
        vec![
            "  | worker-1 * Bash pkill -x httpd || true",
            "  |                 nohup ./httpd > log 2>&1 &"
        ]
    );
    assert_eq!(
        r(0, call("Bash", "Bash: make\n./app"), &plain()),
        vec!["  * Bash make", "         ./app"]
    );
    assert!(r(0, call("Agent", "worker"), &plain()).is_empty());
}

#[test]
fn tool_results_errors_always_others_with_verbose() {
    let res = |is_error: bool, t: &str| EventKind::ToolResult {
        id: "t1".into(),
        name: "Bash".into(),
        is_error,
        text: t.into(),
    };
    assert_eq!(
        r(0, res(true, "没有这个文件"), &plain()),
        vec!["  x 没有这个文件"]
    );
    assert_eq!(
        r(1, res(true, "exit 2"), &plain()),
        vec!["  | worker-1 x exit 2"]
    );
    assert!(r(0, res(false, "ok"), &plain()).is_empty());
    assert_eq!(r(0, res(false, "ok"), &verbose()), vec!["  ok"]);
    assert_eq!(r(1, res(false, "ok"), &verbose()), vec!["  | worker-1 ok"]);
    let long = "a ".repeat(400);
    let shown: usize = r(0, res(true, &long), &plain())
        .iter()
        .map(|l| l.trim_start_matches("  x ").trim().len())
        .sum();
    assert!(shown < 520, "a result is cut to 500 characters ({shown})");
}

#[test]
fn dispatch_line() {
    let d = EventKind::Dispatch {
        child: "worker-2".into(),
        description: "写解析器\n带测试".into(),
    };
    assert_eq!(r(0, d, &plain()), vec!["  > 派人 worker-2 写解析器 带测试"]);
}

#[test]
fn question_shows_exactly_as_the_seed() {
    let q = |remaining| EventKind::Question {
        question: "这个工具要做成 CLI 还是库?".into(),
        options: vec!["CLI".into(), "库".into()],
        remaining,
    };
    assert_eq!(
        r(0, q(5), &plain()),
        vec![
            "",
            "  ? 这个工具要做成 CLI 还是库?",
            "     1) CLI",
            "     2) 库",
            "     (还能问 5 次)"
        ]
    );
    assert_eq!(
        r(0, q(-1), &plain()),
        vec![
            "",
            "  ? 这个工具要做成 CLI 还是库?",
            "     1) CLI",
            "     2) 库"
        ]
    );
}

#[test]
fn the_answer_states() {
    let a = |outcome: &str, text: &str| {
        r(
            0,
            EventKind::Answer {
                outcome: outcome.into(),
                text: text.into(),
            },
            &plain(),
        )
    };
    assert_eq!(a("answered", "纯命令行"), vec!["  + 纯命令行"]);
    assert_eq!(
        a("timeout", ""),
        vec!["  ! 无人应答 —— 它会自己判断,把假设记进「未知与假设」"]
    );
    assert_eq!(a("over_budget", ""), vec!["  ! 提问额度用完"]);
    assert_eq!(a("skipped", ""), vec!["  . 已跳过"]);
    assert_eq!(a("declined", ""), vec!["  . 已跳过"]);
    assert!(a("empty", "").is_empty());
}

fn handoff_event(degraded: bool) -> EventKind {
    EventKind::Handoff {
        context_tokens: 950_000,
        window: 1_000_000,
        path: "/home/u/proj/.flower/notes/交接-干活.md".into(),
        degraded,
        sections: ["现在在做", "已定的事", "走不通的", "下一步"]
            .iter()
            .map(|l| (l.to_string(), "…".to_string()))
            .collect(),
    }
}

#[test]
fn handoff_block_as_the_seed() {
    assert_eq!(
        r(0, handoff_event(false), &plain()),
        vec![
            "",
            "# 上下文 950.0K/1000K —— 写交接准备换代",
            "  - 现在在做    …",
            "  - 已定的事    …",
            "  - 走不通的    …",
            "  - 下一步      …",
            "<- 交接写在 ~/proj/.flower/notes/交接-干活.md",
            "<- 新会话接手,上下文从 950.0K 重新开始",
            "",
        ]
    );
    let degraded = r(0, handoff_event(true), &plain());
    assert_eq!(
        degraded[2],
        "  交接没写成,用了降级版本 —— 接手的人会自己去现场看"
    );
}

#[test]
fn a_long_handoff_path_stays_whole() {
    let long = format!(
        "/srv/{}/proj/.flower/notes/交接-干活.md",
        "deep/".repeat(30)
    );
    let mut ev = handoff_event(false);
    if let EventKind::Handoff { path, .. } = &mut ev {
        *path = long.clone();
    }
    let lines = r(0, ev, &plain());
    let shown = format!("<- 交接写在 {long}");
    assert!(lines.iter().any(|l| *l == shown), "{lines:?}");
}

#[test]
fn warnings_errors_retries_and_delivered_mail() {
    assert_eq!(
        r(
            0,
            EventKind::Warning {
                text: "小心".into()
            },
            &plain()
        ),
        vec!["  ! 小心"]
    );
    assert_eq!(
        r(
            0,
            EventKind::Error {
                text: "连不上".into()
            },
            &plain()
        ),
        vec!["  x 连不上"]
    );
    assert_eq!(
        r(
            0,
            EventKind::Retry {
                reason: "第 2 次重试".into()
            },
            &plain()
        ),
        vec!["  ~ 第 2 次重试"]
    );
    assert_eq!(
        r(
            0,
            EventKind::Inbox {
                text: "加一条".into()
            },
            &plain()
        ),
        vec!["  + 已送达 加一条"]
    );
}

#[test]
fn unverifiable_goal_block() {
    let k = EventKind::GoalUnverifiable {
        total: 15,
        items: vec!["界面截图并实际看图 [此环境无法验证:屏幕录制未授权]".into()],
        path: ".flower/notes/目标.md".into(),
    };
    assert_eq!(
        r(
            0,
            k,
            &RenderOptions {
                width: 110,
                ..plain()
            }
        ),
        vec![
            "  # 目标里有 1/15 条在这个环境里验不了 —— 判定时它们必然过不去,会停下来问你。",
            "    现在改 .flower/notes/目标.md 还来得及:",
            "      · 界面截图并实际看图 [此环境无法验证:屏幕录制未授权]",
        ]
    );
}

#[test]
fn checks_line_and_a_hostile_command_in_it() {
    let k = EventKind::Checks {
        passed: 3,
        total: 4,
        line: "✗ 3/4 检查 · ✗ make test (exit 2, 1.3 s)".into(),
    };
    assert_eq!(
        r(0, k, &plain()),
        vec!["  ✗ 3/4 检查 · ✗ make test (exit 2, 1.3 s)"]
    );
    // The command is the goal setter's text: it cannot break the line or paint the screen.
    let evil = EventKind::Checks {
        passed: 0,
        total: 1,
        line: "✗ 0/1 检查 · ✗ x\n  ✓ 伪造\x1b[2J (exit 1, 0.1 s)".into(),
    };
    let out = r(0, evil, &plain());
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(!out[0].contains('\x1b'), "{out:?}");
}

#[test]
fn wake_banner_as_the_seed() {
    let mut info = WakeInfo {
        workspace: PathBuf::from("/home/u/proj"),
        checks: Some(7),
        work_context: Some(71_400),
        woke: 3,
    };
    let opts = RenderOptions {
        width: 110,
        ..plain()
    };
    assert_eq!(
        wake_banner(&info, &opts),
        "<- 在 ~/proj 接上上次  需求已确认 · 目标 7 条 · 干活上下文 71.4K · 第 3 次唤醒"
    );
    info.work_context = None;
    assert_eq!(
        wake_banner(&info, &opts),
        "<- 在 ~/proj 接上上次  需求已确认 · 目标 7 条 · 第 3 次唤醒"
    );
    info.checks = None;
    info.workspace = PathBuf::from("/srv/proj");
    assert_eq!(
        wake_banner(&info, &opts),
        "<- 在 /srv/proj 接上上次  需求已确认 · 第 3 次唤醒"
    );
    // A long workspace path (the fresh machine's temporary directory) gives way to the status,
    // at the width used when stdout is not a terminal.
    info.checks = Some(2);
    info.work_context = Some(1_200);
    info.workspace = PathBuf::from("/var/tmp/flowerbox-fresh.K2sALf/tmp/.tmpxInqFj/proj");
    let narrow = RenderOptions {
        width: crate::term::tty::UNKNOWN_COLUMNS,
        ..plain()
    };
    let banner = wake_banner(&info, &narrow);
    assert!(
        banner.starts_with("<- 在 ...") && banner.contains("/.tmpxInqFj/proj 接上上次"),
        "{banner}"
    );
    assert!(
        banner.ends_with("需求已确认 · 目标 2 条 · 干活上下文 1.2K · 第 3 次唤醒"),
        "{banner}"
    );
    assert!(
        layout_width(&banner) <= crate::term::tty::UNKNOWN_COLUMNS,
        "{banner}"
    );
}

#[test]
fn closing_line_says_at_least_when_cost_is_unknown() {
    let m = Path::new("/abs/path/runs/manifest.json");
    assert_eq!(
        closing_line(1.2345, true, true, m),
        "总花费 $1.2345 · 清单 /abs/path/runs/manifest.json"
    );
    assert_eq!(
        closing_line(0.5, false, true, m),
        "总花费 ≥ $0.5000 · 清单 /abs/path/runs/manifest.json"
    );
    // Every cost unknown (a local model): unknown, never `≥ $-0.0000` (an empty float sum
    // is -0.0).
    let empty: f64 = std::iter::empty::<f64>().sum();
    assert_eq!(
        closing_line(empty, false, false, m),
        "总花费 未知 · 清单 /abs/path/runs/manifest.json"
    );
    assert!(!closing_line(empty, true, true, m).contains('-'));
}

#[test]
fn the_status_line_says_unknown_when_no_cost_is_known() {
    let usage = |c: Option<f64>| {
        ev(
            0,
            EventKind::Usage {
                usage: Usage::default(),
                cost_usd: c,
                context_tokens: 10,
            },
        )
    };
    let mut t = Tally::default();
    t.observe(&usage(None));
    let line = t.status_line(Duration::from_secs(5), &plain());
    assert!(line.contains("累计 未知"), "{line}");
    t.observe(&usage(Some(0.25)));
    let line = t.status_line(Duration::from_secs(5), &plain());
    assert!(line.contains("累计 ≥ $0.2500"), "{line}");
}

#[test]
fn inbox_receipts() {
    let opts = RenderOptions {
        width: 110,
        ..plain()
    };
    assert_eq!(
        inbox_receipt(true, &opts),
        "+ 收到 (它下次查收件箱时会看到;已追加进确认书)"
    );
    assert_eq!(
        inbox_receipt(false, &opts),
        "+ 收到 (它下次查收件箱时会看到;没有确认书可落盘 —— 它可能活不过下一个步骤)"
    );
}

#[test]
fn aside_answer_failure_and_waiting() {
    assert_eq!(
        aside_answer("现在在第 2 轮", Some(0.0123), &plain()),
        vec![
            "",
            "# 旁路",
            "  现在在第 2 轮",
            "  ($0.0123,没有打扰正在跑的运行)"
        ]
    );
    assert_eq!(aside_answer(" ", None, &plain())[2], "  (没有回答)");
    assert_eq!(
        aside_failure("Timeout", "太慢了", &plain()),
        vec!["", "# 旁路问答失败:Timeout: 太慢了"]
    );
    assert_eq!(aside_waiting(2, &plain()), "(等 2 条旁路问答收尾…)");
}

#[test]
fn interrupt_prompt_and_prompts() {
    assert_eq!(
        interrupt_prompt(&plain()),
        vec![
            "",
            "! 已打断这一轮。正在跑的 subagent 会丢掉半成品。",
            "  要说什么?(直接回车 = 什么都不说,接着跑;再按一次 Ctrl+C = 退出)"
        ]
    );
    assert_eq!(INTERRUPT_INPUT_PROMPT, "> ");
    assert_eq!(
        interrupt_pending_note(2, &plain()).as_deref(),
        Some("  (有 2 个提问还等着,打断不影响它们)")
    );
    assert_eq!(interrupt_pending_note(0, &plain()), None);
    assert_eq!(prompt_text(true), ANSWER_PROMPT);
    assert_eq!(prompt_text(false), IDLE_PROMPT);
    let styled = prompt_text(true).painted(true);
    assert_eq!(strip_sgr(&styled), ANSWER_PROMPT);
    assert!(styled.ends_with("> "));
}

#[test]
fn model_text_cannot_drive_the_terminal() {
    let nasty = "\x1b[2J\x1b[Hhi\x1b]0;owned\x07 there\r\x1b[31mred\x1b[0m\x1bc";
    let opts = RenderOptions {
        color: true,
        verbose: true,
        ..plain()
    };
    let kinds = [
        text(nasty),
        EventKind::Thinking { text: nasty.into() },
        EventKind::ToolCall {
            id: "1".into(),
            name: "Bash".into(),
            summary: nasty.into(),
        },
        EventKind::ToolResult {
            id: "1".into(),
            name: "Bash".into(),
            is_error: true,
            text: nasty.into(),
        },
        EventKind::Question {
            question: nasty.into(),
            options: vec![nasty.into()],
            remaining: 1,
        },
        EventKind::Answer {
            outcome: "answered".into(),
            text: nasty.into(),
        },
        EventKind::Dispatch {
            child: nasty.into(),
            description: nasty.into(),
        },
        EventKind::Warning { text: nasty.into() },
    ];
    for k in kinds {
        for l in render(&ev(0, k.clone()), &opts) {
            let rest = strip_sgr(&l.painted(true));
            assert!(
                !rest.contains('\x1b') && !rest.contains('\r'),
                "{k:?} -> {l:?}"
            );
            // Only flowerbox's styles remain: the model's own `ESC[31m` is gone.
            assert!(!rest.contains("[31m") && !rest.contains("owned"), "{l:?}");
        }
    }
    // What was there stays readable: a mark per sequence, a picture for the carriage return.
    assert_eq!(r(0, text(nasty), &plain()), vec!["  ␛␛hi␛ there␍red␛"]);
}

#[test]
fn colour_is_per_line_and_only_when_asked() {
    let opts = RenderOptions {
        color: true,
        ..plain()
    };
    let lines = r(0, EventKind::Thinking { text: "想".into() }, &opts);
    assert_eq!(lines[0].painted(true), "\x1b[36m  ~ 想\x1b[0m");
    assert!(r(0, EventKind::Thinking { text: "想".into() }, &plain())[0]
        .painted(false)
        .find('\x1b')
        .is_none());
}

#[test]
fn every_line_fits_the_width() {
    let opts = RenderOptions {
        width: 40,
        verbose: true,
        ..plain()
    };
    let long = "这是一段很长很长的中文正文,夹杂 English words and a_very_long_identifier_without_spaces_at_all 还有更多中文".repeat(3);
    for depth in [0, 1] {
        for k in [
            text(&long),
            EventKind::ToolCall {
                id: "1".into(),
                name: "Bash".into(),
                summary: long.clone(),
            },
            EventKind::Dispatch {
                child: "w".into(),
                description: long.clone(),
            },
            EventKind::Question {
                question: long.clone(),
                options: vec![long.clone()],
                remaining: 3,
            },
        ] {
            for l in r(depth, k, &opts) {
                assert!(layout_width(&l) <= 40, "{l:?}");
            }
        }
    }
}

#[test]
fn tally_and_status_line() {
    let mut t = Tally::default();
    let usage = |depth, cost, ctx| {
        ev(
            depth,
            EventKind::Usage {
                usage: Usage::default(),
                cost_usd: cost,
                context_tokens: ctx,
            },
        )
    };
    t.observe(&usage(0, Some(0.10), 71_400));
    t.observe(&usage(1, Some(0.02), 5_000));
    assert_eq!(
        t.context_tokens, 71_400,
        "subagent context is not the main thread's"
    );
    assert_eq!(
        t.status_line(Duration::from_secs(83), &plain()),
        "  - 上下文 71.4K · 累计 $0.1200 · 1:23"
    );
    t.observe(&usage(0, None, 80_000));
    t.observe(&ev(0, handoff_event(false)));
    assert_eq!(
        t.status_line(Duration::from_secs(3723), &plain()),
        "  - 累计 ≥ $0.1200 · 1:02:03"
    );
    // The once of issue 20: the step line said $0.0015, the status line $0.00.
    let mut t = Tally::default();
    t.observe(&usage(0, Some(0.0015), 900));
    let status = t.status_line(Duration::from_secs(2), &plain());
    assert!(
        status.contains(&format!("累计 {}", dollars(Some(0.0015)))),
        "{status}"
    );
}

#[test]
fn small_helpers() {
    assert_eq!(human_tokens(999), "999");
    assert_eq!(human_tokens(71_400), "71.4K");
    assert_eq!(human_tokens(950_000), "950.0K");
    assert_eq!(
        shorten_home(Path::new("/home/u"), Some(Path::new("/home/u"))),
        "~"
    );
    assert_eq!(
        shorten_home(Path::new("/home/uu/x"), Some(Path::new("/home/u"))),
        "/home/uu/x"
    );
    assert_eq!(elapsed(Duration::from_secs(59)), "0:59");
}

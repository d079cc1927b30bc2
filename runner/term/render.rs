//! Screen lines (seed 000 "屏幕上都是什么"): [`render`] turns one [`Event`] into finished lines,
//! and the helpers below produce the lines that are not events (wake banner, closing line,
//! inbox receipt, aside answers, the Ctrl-C prompt, the two input prompts).
//!
//! Pure: no I/O, no clock, no terminal. Every line is sanitised (untrusted text through
//! [`sanitize`]), wrapped or cut to [`RenderOptions::width`], and only then styled, so the
//! only SGR on screen is flowerbox's own and a style never spans two lines. Icons are ASCII
//! only (`= + ~ x > # * - ? <- ! . |`): emoji and box-drawing glyphs crashed terminals through
//! glyph fallback. What shows depends on `verbose` (seed 000 `-v`): by default subagent text,
//! non-error tool results and prompt events are hidden; subagent tool calls always show,
//! indented behind `|`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::sanitize::{fit, layout_width, sanitize, wrap, Style};
use crate::agent::{Event, EventKind};
use crate::flow::frontend::WakeInfo;
use crate::flow::goal::unverifiable_warning;
use crate::model::ToolName;

/// The prompt while a question is pending (seed 000 "常驻在最下面的输入提示符").
pub const ANSWER_PROMPT: &str = "你的回答 (回车=跳过,让它自己判断) > ";
/// The prompt while no question is pending.
pub const IDLE_PROMPT: &str =
    "(直接说 = 加需求,下个检查点送达;? 开头 = 顺便问一句,不打扰它干活) > ";
/// The input prompt after the Ctrl-C lines (seed 000 "Ctrl-C").
pub const INTERRUPT_INPUT_PROMPT: &str = "> ";

/// How much of a tool result is shown, in characters (the rest is in the session).
const RESULT_CHARS: usize = 500;
/// How much of a dispatch description is shown, in characters.
const DISPATCH_CHARS: usize = 60;
/// The subagent gutter: subagent lines are indented behind it.
const GUTTER: &str = "  | ";

/// What the renderer needs to know about the screen and the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// `-v`: show subagent text, non-error tool results and prompt events.
    pub verbose: bool,
    /// Emit flowerbox's SGR colours (a terminal that is not `NO_COLOR`).
    pub color: bool,
    /// Line width in columns, already [`super::sanitize::screen_width`]-clamped.
    pub width: usize,
    /// The home directory, shown as `~` in paths.
    pub home: Option<PathBuf>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            verbose: false,
            color: false,
            width: 80,
            home: None,
        }
    }
}

/// One styled piece of a line.
type Seg = (Option<Style>, String);

/// Cuts a line of segments to `width` (conservative measure) and paints it.
fn finish(segs: Vec<Seg>, opts: &RenderOptions) -> String {
    let plain: String = segs.iter().map(|(_, s)| s.as_str()).collect();
    let segs = if layout_width(&plain) > opts.width {
        // Re-cut the whole line and keep the first segment's style: rare, a last guard.
        vec![(segs[0].0, fit(&plain, opts.width))]
    } else {
        segs
    };
    segs.into_iter()
        .map(|(style, s)| match style {
            Some(st) if opts.color => st.paint(&s),
            _ => s,
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// A one-style line.
fn line(style: Option<Style>, text: impl Into<String>, opts: &RenderOptions) -> String {
    finish(vec![(style, text.into())], opts)
}

/// Untrusted text wrapped with `first`/`rest` prefixes, one style per line.
fn block(
    style: Option<Style>,
    text: &str,
    first: &str,
    rest: &str,
    opts: &RenderOptions,
) -> Vec<String> {
    wrap(&sanitize(text), opts.width, first, rest)
        .into_iter()
        .map(|l| line(style, l, opts))
        .collect()
}

/// Untrusted text flattened to one line (newlines and tabs become spaces).
fn one_line(text: &str) -> String {
    sanitize(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first `n` characters of `text`, with `…` when cut.
fn cut_chars(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Tokens as the screen shows them: `71.4K` from 1000 up, the plain number below.
pub fn human_tokens(n: u64) -> String {
    if n >= 1000 {
        format!("{:.1}K", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// A path with the home directory shown as `~` (`~/proj`); other paths unchanged.
pub fn shorten_home(path: &Path, home: Option<&Path>) -> String {
    if let Some(rel) = home.and_then(|h| path.strip_prefix(h).ok()) {
        if rel.as_os_str().is_empty() {
            return "~".to_string();
        }
        return format!("~/{}", rel.display());
    }
    path.display().to_string()
}

/// Elapsed time as `M:SS` or `H:MM:SS`.
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// Dollars with four decimals; `None` (unknown) as `$?`.
fn dollars(cost: Option<f64>) -> String {
    match cost {
        Some(c) => format!("${c:.4}"),
        None => "$?".to_string(),
    }
}

/// The main thread's text as screen lines (what a `Text` event of depth 0 shows).
pub fn text_lines(text: &str, opts: &RenderOptions) -> Vec<String> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    block(None, text, "  ", "  ", opts)
}

/// The lines for one event (possibly none). See the module doc for what shows when.
pub fn render(ev: &Event, opts: &RenderOptions) -> Vec<String> {
    let sub = ev.depth > 0;
    // A subagent's lines name it: parallel workers' lines interleave.
    let named = format!("{GUTTER}{} ", one_line(&ev.agent));
    let pad = if sub { named.as_str() } else { "  " };
    match &ev.kind {
        EventKind::StepStart { step } => {
            let name = one_line(step);
            let used = layout_width("== ") + layout_width(&name) + 1;
            let bar = "=".repeat(opts.width.saturating_sub(used).max(4));
            vec![
                String::new(),
                line(Some(Style::BoldCyan), format!("== {name} {bar}"), opts),
            ]
        }
        EventKind::StepEnd {
            step,
            ok,
            cost_usd,
            turns,
            context_tokens,
            error,
        } => {
            let mut detail = format!(" {} · {turns} 轮 · {}", one_line(step), dollars(*cost_usd));
            if *context_tokens > 0 {
                detail.push_str(&format!(" · 上下文 {}", human_tokens(*context_tokens)));
            }
            let (style, head) = if *ok {
                (Style::Green, "  + 完成")
            } else {
                (Style::Red, "  x 失败")
            };
            let mut out = vec![finish(
                vec![(Some(style), head.into()), (Some(Style::Dim), detail)],
                opts,
            )];
            if let (false, Some(e)) = (*ok, error) {
                out.extend(block(Some(Style::Red), e, "    ", "    ", opts));
            }
            out
        }
        EventKind::Prompt { text } if opts.verbose => {
            let (first, rest) = if sub {
                (format!("{pad}> "), "  |   ")
            } else {
                ("  > ".to_string(), "    ")
            };
            block(Some(Style::Dim), text, &first, rest, opts)
        }
        EventKind::Text { text } if !sub => text_lines(text, opts),
        EventKind::Text { text } if opts.verbose => {
            block(Some(Style::Dim), text, pad, GUTTER, opts)
        }
        EventKind::Thinking { text } if !sub => {
            block(Some(Style::Cyan), text, "  ~ ", "    ", opts)
        }
        // The Dispatch event shows an Agent call.
        EventKind::ToolCall { name, .. } if ToolName::Agent.is(name) => Vec::new(),
        EventKind::ToolCall { name, summary, .. } => {
            let name = one_line(name);
            // One screen line per line of a multi-line command: flattened, `a || true` and
            // `nohup b` would read as one command.
            let mut lines = summary.lines().map(one_line).filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or_default();
            let first = first
                .strip_prefix(&format!("{name}:"))
                .map(str::trim_start)
                .unwrap_or(&first)
                .to_string();
            let head_style = if sub { Style::Dim } else { Style::Blue };
            let head = format!("{pad}* {name}");
            let mut segs = vec![(Some(head_style), head.clone())];
            if !first.is_empty() {
                segs.push((Some(Style::Dim), format!(" {first}")));
            }
            let mut out = vec![finish(segs, opts)];
            let hang = if sub {
                format!(
                    "{GUTTER}{}",
                    " ".repeat(layout_width(&head) + 1 - layout_width(GUTTER))
                )
            } else {
                " ".repeat(layout_width(&head) + 1)
            };
            out.extend(lines.map(|l| line(Some(Style::Dim), format!("{hang}{l}"), opts)));
            out
        }
        EventKind::ToolResult {
            is_error: true,
            text,
            ..
        } => {
            let hang = if sub { GUTTER } else { "    " };
            block(
                Some(Style::Red),
                &cut_chars(text, RESULT_CHARS),
                &format!("{pad}x "),
                hang,
                opts,
            )
        }
        EventKind::ToolResult { text, .. } if opts.verbose => block(
            Some(Style::Dim),
            &cut_chars(text, RESULT_CHARS),
            pad,
            pad,
            opts,
        ),
        EventKind::Dispatch { child, description } => {
            let desc = cut_chars(&one_line(description), DISPATCH_CHARS);
            vec![finish(
                vec![
                    (Some(Style::Magenta), format!("{pad}> 派人")),
                    (Some(Style::Bold), format!(" {}", one_line(child))),
                    (Some(Style::Dim), format!(" {desc}")),
                ],
                opts,
            )]
        }
        EventKind::Question {
            question,
            options,
            remaining,
        } => {
            let mut out = vec![String::new()];
            out.extend(block(
                Some(Style::BoldYellow),
                question,
                "  ? ",
                "    ",
                opts,
            ));
            for (i, o) in options.iter().enumerate() {
                out.extend(block(
                    Some(Style::Yellow),
                    o,
                    &format!("     {}) ", i + 1),
                    "        ",
                    opts,
                ));
            }
            if *remaining >= 0 {
                out.push(line(
                    Some(Style::Dim),
                    format!("     (还能问 {remaining} 次)"),
                    opts,
                ));
            }
            out
        }
        EventKind::Answer { outcome, text } => match outcome.as_str() {
            "answered" => block(Some(Style::Green), text, "  + ", "    ", opts),
            "timeout" => vec![line(
                Some(Style::Yellow),
                "  ! 无人应答 —— 它会自己判断,把假设记进「未知与假设」",
                opts,
            )],
            "over_budget" => vec![line(Some(Style::Yellow), "  ! 提问额度用完", opts)],
            "skipped" | "declined" => vec![line(Some(Style::Dim), "  . 已跳过", opts)],
            _ => Vec::new(),
        },
        EventKind::Retry { reason } => block(Some(Style::Yellow), reason, "  ~ ", "    ", opts),
        EventKind::Handoff {
            context_tokens,
            window,
            path,
            degraded,
            sections,
        } => handoff(*context_tokens, *window, path, *degraded, sections, opts),
        EventKind::Compacted {
            context_tokens,
            window,
            folded,
            kept,
            degraded,
        } => {
            let mut out = vec![
                String::new(),
                line(
                    Some(Style::BoldYellow),
                    format!(
                        "# 上下文 {}/{}K —— 换代关着,压缩:较早的 {folded} 条消息换成一段摘要,最近 {kept} 条原样留着",
                        human_tokens(*context_tokens),
                        window / 1000
                    ),
                    opts,
                ),
            ];
            if *degraded {
                out.push(line(
                    Some(Style::Red),
                    "  摘要没写成,用了机械整理的调用清单",
                    opts,
                ));
            }
            out
        }
        EventKind::Warning { text } => block(Some(Style::Yellow), text, "  ! ", "    ", opts),
        EventKind::Error { text } => block(Some(Style::Red), text, "  x ", "    ", opts),
        EventKind::Inbox { text } => vec![finish(
            vec![
                (Some(Style::Green), "  + 已送达".into()),
                (Some(Style::Dim), format!(" {}", one_line(text))),
            ],
            opts,
        )],
        EventKind::GoalUnverifiable { total, items, path } => {
            let items: Vec<String> = items.iter().map(|i| one_line(i)).collect();
            let shown = shorten_home(Path::new(&one_line(path)), opts.home.as_deref());
            unverifiable_warning(*total, &items, &shown)
                .unwrap_or_default()
                .into_iter()
                .map(|l| line(Some(Style::Yellow), l, opts))
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The handoff block (seed 000 "换代写完交接书时是一整块").
fn handoff(
    context: u64,
    window: u64,
    path: &str,
    degraded: bool,
    sections: &[(String, String)],
    opts: &RenderOptions,
) -> Vec<String> {
    let ctx = human_tokens(context);
    let mut out = vec![
        String::new(),
        line(
            Some(Style::BoldYellow),
            format!("# 上下文 {ctx}/{}K —— 写交接准备换代", window / 1000),
            opts,
        ),
    ];
    if degraded {
        out.push(line(
            Some(Style::Red),
            "  交接没写成,用了降级版本 —— 接手的人会自己去现场看",
            opts,
        ));
    }
    // Labels aligned by display columns (现在在做 is two columns wider than 下一步).
    let labels: Vec<String> = sections.iter().map(|(l, _)| one_line(l)).collect();
    let pad = labels.iter().map(|l| layout_width(l)).max().unwrap_or(0);
    for (label, (_, body)) in labels.iter().zip(sections) {
        let body = one_line(body);
        if body.is_empty() {
            continue;
        }
        let first = format!("  - {label}{}    ", " ".repeat(pad - layout_width(label)));
        let rest = " ".repeat(layout_width(&first));
        out.extend(
            wrap(&body, opts.width, &first, &rest)
                .into_iter()
                .map(|l| line(None, l, opts)),
        );
    }
    if !path.is_empty() {
        let shown = shorten_home(Path::new(&one_line(path)), opts.home.as_deref());
        out.push(line(Some(Style::Dim), format!("<- 交接写在 {shown}"), opts));
    }
    out.push(line(
        Some(Style::Dim),
        format!("<- 新会话接手,上下文从 {ctx} 重新开始"),
        opts,
    ));
    out.push(String::new());
    out
}

/// `<- 在 ~/proj 接上上次  需求已确认 · 目标 7 条 · 干活上下文 71.4K · 第 3 次唤醒`.
pub fn wake_banner(info: &WakeInfo, opts: &RenderOptions) -> String {
    let mut bits = vec!["需求已确认".to_string()];
    if let Some(n) = info.checks.filter(|n| *n > 0) {
        bits.push(format!("目标 {n} 条"));
    }
    if let Some(c) = info.work_context {
        bits.push(format!("干活上下文 {}", human_tokens(c)));
    }
    bits.push(format!("第 {} 次唤醒", info.woke));
    let ws = one_line(&shorten_home(&info.workspace, opts.home.as_deref()));
    finish(
        vec![
            (Some(Style::Yellow), format!("<- 在 {ws} 接上上次")),
            (Some(Style::Dim), format!("  {}", bits.join(" · "))),
        ],
        opts,
    )
}

/// `总花费 $1.2345 · 清单 /abs/runs/manifest.json`; `总花费 ≥ $X` when some cost is unknown;
/// `总花费 未知` when no cost is known (never `$-0.0000`: unknown is not zero). Not cut to the
/// width: the path must stay whole for copying.
pub fn closing_line(
    cost_usd: f64,
    all_known: bool,
    any_known: bool,
    manifest: &Path,
    opts: &RenderOptions,
) -> String {
    // -0.0 (an empty float sum) and rounding noise print as $0.0000.
    let usd = if cost_usd > 0.0 { cost_usd } else { 0.0 };
    let cost = match (all_known, any_known) {
        (true, _) => format!("${usd:.4}"),
        (false, true) => format!("≥ ${usd:.4}"),
        (false, false) => "未知".to_string(),
    };
    let text = format!(
        "总花费 {cost} · 清单 {}",
        one_line(&manifest.display().to_string())
    );
    Style::Dim.paint_if(&text, opts.color)
}

/// The inbox receipt after the human typed a message (seed 000 "你敲的东西去哪了").
pub fn inbox_receipt(appended: bool, opts: &RenderOptions) -> String {
    let tail = if appended {
        "已追加进确认书"
    } else {
        "没有确认书可落盘 —— 它可能活不过下一个步骤"
    };
    finish(
        vec![
            (Some(Style::Green), "+ 收到".into()),
            (
                Some(Style::Dim),
                format!(" (它下次查收件箱时会看到;{tail})"),
            ),
        ],
        opts,
    )
}

/// The aside oracle's answer block: `# 旁路`, the answer indented, and its cost.
pub fn aside_answer(text: &str, cost_usd: Option<f64>, opts: &RenderOptions) -> Vec<String> {
    let text = if text.trim().is_empty() {
        "(没有回答)"
    } else {
        text
    };
    let mut out = vec![String::new(), line(Some(Style::Magenta), "# 旁路", opts)];
    out.extend(block(None, text, "  ", "  ", opts));
    out.push(line(
        Some(Style::Dim),
        format!("  ({},没有打扰正在跑的运行)", dollars(cost_usd)),
        opts,
    ));
    out
}

/// The aside oracle's failure line: `# 旁路问答失败:<类型>: <消息>` in red.
pub fn aside_failure(kind: &str, message: &str, opts: &RenderOptions) -> Vec<String> {
    let mut out = vec![String::new()];
    let text = format!("# 旁路问答失败:{}: {}", one_line(kind), one_line(message));
    out.extend(block(Some(Style::Red), &text, "", "  ", opts));
    out
}

/// Shown before waiting (up to 120 s) for pending aside answers at exit.
pub fn aside_waiting(n: usize, opts: &RenderOptions) -> String {
    line(Some(Style::Dim), format!("(等 {n} 条旁路问答收尾…)"), opts)
}

/// The first two lines of the Ctrl-C prompt; the third is [`INTERRUPT_INPUT_PROMPT`].
pub fn interrupt_prompt(opts: &RenderOptions) -> Vec<String> {
    vec![
        String::new(),
        line(
            Some(Style::Yellow),
            "! 已打断这一轮。正在跑的 subagent 会丢掉半成品。",
            opts,
        ),
        line(
            Some(Style::Dim),
            "  要说什么?(直接回车 = 什么都不说,接着跑;再按一次 Ctrl+C = 退出)",
            opts,
        ),
    ]
}

/// The extra line after an interrupt when questions are still waiting; `None` for zero.
pub fn interrupt_pending_note(pending: usize, opts: &RenderOptions) -> Option<String> {
    (pending > 0).then(|| {
        line(
            Some(Style::Dim),
            format!("  (有 {pending} 个提问还等着,打断不影响它们)"),
            opts,
        )
    })
}

/// The resident prompt, styled: [`ANSWER_PROMPT`] while a question is pending, otherwise
/// [`IDLE_PROMPT`]. Ends in `"> "`; measure it with [`super::sanitize::display_width`].
pub fn prompt_text(question_pending: bool, opts: &RenderOptions) -> String {
    let (style, text) = if question_pending {
        (Style::Yellow, ANSWER_PROMPT)
    } else {
        (Style::Dim, IDLE_PROMPT)
    };
    let body = text.trim_end_matches("> ");
    format!("{}> ", style.paint_if(body, opts.color))
}

/// The warning when stdin is not a terminal (seed 000 "管道喂 stdin").
pub fn stdin_not_tty_warning(opts: &RenderOptions) -> String {
    line(
        Some(Style::Yellow),
        "! 标准输入不是终端,没人能回答提问。想让它自己判断就加 --timeout 0",
        opts,
    )
}

/// Running totals for the status line under the main thread's text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Known cost so far, USD, from [`EventKind::Usage`] events of every depth.
    pub cost_usd: f64,
    /// Some call's cost was unknown: totals are "at least".
    pub cost_unknown: bool,
    /// Some call's cost was known (with `cost_unknown` and not this, the total is unknown).
    pub cost_known: bool,
    /// The main thread's context, tokens (reset by a handoff).
    pub context_tokens: u64,
}

impl Tally {
    /// Updates the totals from one event.
    pub fn observe(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::Usage {
                cost_usd,
                context_tokens,
                ..
            } => {
                match cost_usd {
                    Some(c) => {
                        self.cost_usd += c;
                        self.cost_known = true;
                    }
                    None => self.cost_unknown = true,
                }
                if ev.depth == 0 {
                    self.context_tokens = *context_tokens;
                }
            }
            EventKind::Handoff { .. } | EventKind::Compacted { .. } => self.context_tokens = 0,
            _ => {}
        }
    }

    /// `  - 上下文 71.4K · 累计 $0.1200 · 1:23` (`≥ $` when some cost is unknown; no context
    /// part before the first model call). Four decimals, as the step line and the closing line
    /// show cost: a `once` of $0.0015 must not say `累计 $0.00` under `$0.0015`.
    pub fn status_line(&self, run_time: Duration, opts: &RenderOptions) -> String {
        let mut bits = Vec::new();
        if self.context_tokens > 0 {
            bits.push(format!("上下文 {}", human_tokens(self.context_tokens)));
        }
        bits.push(match (self.cost_unknown, self.cost_known) {
            (false, _) => format!("累计 ${:.4}", self.cost_usd),
            (true, true) => format!("累计 ≥ ${:.4}", self.cost_usd),
            (true, false) => "累计 未知".to_string(),
        });
        bits.push(elapsed(run_time));
        line(Some(Style::Dim), format!("  - {}", bits.join(" · ")), opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Role, Usage};
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

    fn r(depth: u32, kind: EventKind, opts: &RenderOptions) -> Vec<String> {
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
        assert!(r(0, call("Agent", "worker"), &plain()).is_empty());
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
    }

    #[test]
    fn closing_line_says_at_least_when_cost_is_unknown() {
        let m = Path::new("/abs/path/runs/manifest.json");
        assert_eq!(
            closing_line(1.2345, true, true, m, &plain()),
            "总花费 $1.2345 · 清单 /abs/path/runs/manifest.json"
        );
        assert_eq!(
            closing_line(0.5, false, true, m, &plain()),
            "总花费 ≥ $0.5000 · 清单 /abs/path/runs/manifest.json"
        );
        // Every cost unknown (a local model): unknown, never `≥ $-0.0000` (an empty float sum
        // is -0.0).
        let empty: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(
            closing_line(empty, false, false, m, &plain()),
            "总花费 未知 · 清单 /abs/path/runs/manifest.json"
        );
        assert!(!closing_line(empty, true, true, m, &plain()).contains('-'));
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
        assert_eq!(prompt_text(true, &plain()), ANSWER_PROMPT);
        assert_eq!(prompt_text(false, &plain()), IDLE_PROMPT);
        let styled = prompt_text(
            true,
            &RenderOptions {
                color: true,
                ..plain()
            },
        );
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
                let rest = strip_sgr(&l);
                assert!(
                    !rest.contains('\x1b') && !rest.contains('\r'),
                    "{k:?} -> {l:?}"
                );
                // Only flowerbox's styles remain: the model's own `ESC[31m` is gone.
                assert!(!rest.contains("[31m") && !rest.contains("owned"), "{l:?}");
            }
        }
        assert_eq!(r(0, text(nasty), &plain()), vec!["  hi therered"]);
    }

    #[test]
    fn colour_is_per_line_and_only_when_asked() {
        let opts = RenderOptions {
            color: true,
            ..plain()
        };
        let lines = r(0, EventKind::Thinking { text: "想".into() }, &opts);
        assert_eq!(lines, vec!["\x1b[36m  ~ 想\x1b[0m"]);
        assert!(r(0, EventKind::Thinking { text: "想".into() }, &plain())[0]
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
}

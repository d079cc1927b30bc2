//! Screen lines (seed 000 "屏幕上都是什么"): [`render`] turns one [`Event`] into finished lines,
//! and the helpers below produce the lines that are not events (wake banner, closing line,
//! inbox receipt, aside answers, the Ctrl-C prompt, the two input prompts).
//!
//! Pure: no I/O, no clock, no terminal. Every line is sanitised (untrusted text through
//! [`sanitize`]), wrapped or cut to [`RenderOptions::width`], and only then given its styles:
//! a [`Line`] whose pieces carry a [`Style`], never an escape sequence, so the terminal
//! writer cleans every piece again and adds flowerbox's SGR itself, and a style never spans
//! two lines. Icons are ASCII
//! only (`= + ~ x > # * - ? <- ! . |`): emoji and box-drawing glyphs crashed terminals through
//! glyph fallback. What shows depends on `verbose` (seed 000 `-v`): by default subagent text,
//! non-error tool results and prompt events are hidden; subagent tool calls always show,
//! indented behind `|`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::sanitize::{fit, fit_tail, layout_width, sanitize, wrap, Style};
use crate::agent::{Event, EventKind};
use crate::flow::frontend::WakeInfo;
use crate::flow::goal::unverifiable_warning;
use crate::model::ToolName;
use crate::shown::Line;

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

/// Cuts a line of segments to `width` (conservative measure) and gives it its styles.
fn finish(segs: Vec<Seg>, opts: &RenderOptions) -> Line {
    let plain: String = segs.iter().map(|(_, s)| s.as_str()).collect();
    let segs = if layout_width(&plain) > opts.width {
        // Re-cut the whole line and keep the first segment's style: rare, a last guard.
        vec![(segs[0].0, fit(&plain, opts.width))]
    } else {
        segs
    };
    let mut line = Line::new();
    for (style, s) in &segs {
        line.push(*style, s);
    }
    line.trim_end()
}

/// A one-style line.
fn line(style: Option<Style>, text: impl Into<String>, opts: &RenderOptions) -> Line {
    finish(vec![(style, text.into())], opts)
}

/// Untrusted text wrapped with `first`/`rest` prefixes, one style per line.
fn block(
    style: Option<Style>,
    text: &str,
    first: &str,
    rest: &str,
    opts: &RenderOptions,
) -> Vec<Line> {
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
pub fn text_lines(text: &str, opts: &RenderOptions) -> Vec<Line> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    block(None, text, "  ", "  ", opts)
}

/// The lines for one event (possibly none). See the module doc for what shows when.
pub fn render(ev: &Event, opts: &RenderOptions) -> Vec<Line> {
    let sub = ev.depth > 0;
    // A subagent's lines name it: parallel workers' lines interleave.
    let named = format!("{GUTTER}{} ", one_line(&ev.agent));
    let pad = if sub { named.as_str() } else { "  " };
    match &ev.kind {
        EventKind::StepStart { step } => step_start(step, opts),
        EventKind::StepEnd { .. } => step_end(&ev.kind, opts),
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
        EventKind::ToolCall { name, summary, .. } => tool_call(name, summary, sub, pad, opts),
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
        } => question_lines(question, options, *remaining, opts),
        EventKind::Answer { outcome, text } => answer(outcome, text, opts),
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
        } => compacted(*context_tokens, *window, *folded, *kept, *degraded, opts),
        EventKind::Warning { text } => block(Some(Style::Yellow), text, "  ! ", "    ", opts),
        EventKind::Error { text } => block(Some(Style::Red), text, "  x ", "    ", opts),
        EventKind::Inbox { text } => vec![finish(
            vec![
                (Some(Style::Green), "  + 已送达".into()),
                (Some(Style::Dim), format!(" {}", one_line(text))),
            ],
            opts,
        )],
        EventKind::Checks {
            passed,
            total,
            line: text,
        } => {
            let style = if passed == total {
                Style::Green
            } else {
                Style::Red
            };
            vec![line(Some(style), format!("  {}", one_line(text)), opts)]
        }
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

/// A step's header: a blank line and `== name ====`, as wide as the screen.
fn step_start(step: &str, opts: &RenderOptions) -> Vec<Line> {
    let name = one_line(step);
    let used = layout_width("== ") + layout_width(&name) + 1;
    let bar = "=".repeat(opts.width.saturating_sub(used).max(4));
    vec![
        Line::new(),
        line(Some(Style::BoldCyan), format!("== {name} {bar}"), opts),
    ]
}

/// A step's closing line (`+ 完成` or `x 失败` with its books), and its error under it.
fn step_end(kind: &EventKind, opts: &RenderOptions) -> Vec<Line> {
    let EventKind::StepEnd {
        step,
        ok,
        cost_usd,
        turns,
        context_tokens,
        error,
    } = kind
    else {
        return Vec::new();
    };
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

/// A tool call: `* Name summary`, a subagent's dim and named by `pad`.
fn tool_call(name: &str, summary: &str, sub: bool, pad: &str, opts: &RenderOptions) -> Vec<Line> {
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

/// A question to the human, its numbered options and the asks left.
fn question_lines(
    question: &str,
    options: &[String],
    remaining: i64,
    opts: &RenderOptions,
) -> Vec<Line> {
    let mut out = vec![Line::new()];
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
    if remaining >= 0 {
        out.push(line(
            Some(Style::Dim),
            format!("     (还能问 {remaining} 次)"),
            opts,
        ));
    }
    out
}

/// A question's outcome.
fn answer(outcome: &str, text: &str, opts: &RenderOptions) -> Vec<Line> {
    match outcome {
        "answered" => block(Some(Style::Green), text, "  + ", "    ", opts),
        "timeout" => vec![line(
            Some(Style::Yellow),
            "  ! 无人应答 —— 它会自己判断,把假设记进「未知与假设」",
            opts,
        )],
        "over_budget" => vec![line(Some(Style::Yellow), "  ! 提问额度用完", opts)],
        "skipped" | "declined" => vec![line(Some(Style::Dim), "  . 已跳过", opts)],
        _ => Vec::new(),
    }
}

/// A compaction (handoffs off): what was folded, what was kept.
fn compacted(
    context_tokens: u64,
    window: u64,
    folded: usize,
    kept: usize,
    degraded: bool,
    opts: &RenderOptions,
) -> Vec<Line> {
    let mut out = vec![
        Line::new(),
        line(
            Some(Style::BoldYellow),
            format!(
                "# 上下文 {}/{}K —— 换代关着,压缩:较早的 {folded} 条消息换成一段摘要,最近 {kept} 条原样留着",
                human_tokens(context_tokens),
                window / 1000
            ),
            opts,
        ),
    ];
    if degraded {
        out.push(line(
            Some(Style::Red),
            "  摘要没写成,用了机械整理的调用清单",
            opts,
        ));
    }
    out
}

/// The handoff block (seed 000 "换代写完交接书时是一整块").
fn handoff(
    context: u64,
    window: u64,
    path: &str,
    degraded: bool,
    sections: &[(String, String)],
    opts: &RenderOptions,
) -> Vec<Line> {
    let ctx = human_tokens(context);
    let mut out = vec![
        Line::new(),
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
        // Not cut to the width, like the closing line: the path must stay whole for copying.
        out.push(Line::styled(Style::Dim, format!("<- 交接写在 {shown}")));
    }
    out.push(line(
        Some(Style::Dim),
        format!("<- 新会话接手,上下文从 {ctx} 重新开始"),
        opts,
    ));
    out.push(Line::new());
    out
}

/// `<- 在 ~/proj 接上上次  需求已确认 · 目标 7 条 · 干活上下文 71.4K · 第 3 次唤醒`.
pub fn wake_banner(info: &WakeInfo, opts: &RenderOptions) -> Line {
    let mut bits = vec!["需求已确认".to_string()];
    if let Some(n) = info.checks.filter(|n| *n > 0) {
        bits.push(format!("目标 {n} 条"));
    }
    if let Some(c) = info.work_context {
        bits.push(format!("干活上下文 {}", human_tokens(c)));
    }
    bits.push(format!("第 {} 次唤醒", info.woke));
    let ws = one_line(&shorten_home(&info.workspace, opts.home.as_deref()));
    let status = format!("  {}", bits.join(" · "));
    // A long path gives way, keeping its end, so the status after it stays whole.
    let room = opts
        .width
        .saturating_sub(layout_width(&format!("<- 在  接上上次{status}")));
    let ws = fit_tail(&ws, room.max(8));
    finish(
        vec![
            (Some(Style::Yellow), format!("<- 在 {ws} 接上上次")),
            (Some(Style::Dim), status),
        ],
        opts,
    )
}

/// `总花费 $1.2345 · 清单 /abs/runs/manifest.json`; `总花费 ≥ $X` when some cost is unknown;
/// `总花费 未知` when no cost is known (never `$-0.0000`: unknown is not zero). Not cut to the
/// width: the path must stay whole for copying.
pub fn closing_line(cost_usd: f64, all_known: bool, any_known: bool, manifest: &Path) -> Line {
    // -0.0 (an empty float sum) and rounding noise print as $0.0000.
    let usd = if cost_usd > 0.0 { cost_usd } else { 0.0 };
    let cost = match (all_known, any_known) {
        (true, _) => format!("${usd:.4}"),
        (false, true) => format!("≥ ${usd:.4}"),
        (false, false) => "未知".to_string(),
    };
    Line::styled(
        Style::Dim,
        format!(
            "总花费 {cost} · 清单 {}",
            one_line(&manifest.display().to_string())
        ),
    )
}

/// The inbox receipt after the human typed a message (seed 000 "你敲的东西去哪了").
pub fn inbox_receipt(appended: bool, opts: &RenderOptions) -> Line {
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
pub fn aside_answer(text: &str, cost_usd: Option<f64>, opts: &RenderOptions) -> Vec<Line> {
    let text = if text.trim().is_empty() {
        "(没有回答)"
    } else {
        text
    };
    let mut out = vec![Line::new(), line(Some(Style::Magenta), "# 旁路", opts)];
    out.extend(block(None, text, "  ", "  ", opts));
    out.push(line(
        Some(Style::Dim),
        format!("  ({},没有打扰正在跑的运行)", dollars(cost_usd)),
        opts,
    ));
    out
}

/// The aside oracle's failure line: `# 旁路问答失败:<类型>: <消息>` in red.
pub fn aside_failure(kind: &str, message: &str, opts: &RenderOptions) -> Vec<Line> {
    let mut out = vec![Line::new()];
    let text = format!("# 旁路问答失败:{}: {}", one_line(kind), one_line(message));
    out.extend(block(Some(Style::Red), &text, "", "  ", opts));
    out
}

/// Shown before waiting (up to 120 s) for pending aside answers at exit.
pub fn aside_waiting(n: usize, opts: &RenderOptions) -> Line {
    line(Some(Style::Dim), format!("(等 {n} 条旁路问答收尾…)"), opts)
}

/// The first two lines of the Ctrl-C prompt; the third is [`INTERRUPT_INPUT_PROMPT`].
pub fn interrupt_prompt(opts: &RenderOptions) -> Vec<Line> {
    vec![
        Line::new(),
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
pub fn interrupt_pending_note(pending: usize, opts: &RenderOptions) -> Option<Line> {
    (pending > 0).then(|| {
        line(
            Some(Style::Dim),
            format!("  (有 {pending} 个提问还等着,打断不影响它们)"),
            opts,
        )
    })
}

/// The resident prompt, styled: [`ANSWER_PROMPT`] while a question is pending, otherwise
/// [`IDLE_PROMPT`]. Ends in `"> "`, unstyled.
pub fn prompt_text(question_pending: bool) -> Line {
    let (style, text) = if question_pending {
        (Style::Yellow, ANSWER_PROMPT)
    } else {
        (Style::Dim, IDLE_PROMPT)
    };
    let body = text.trim_end_matches("> ");
    Line::styled(style, body).with(None, "> ")
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
    pub fn status_line(&self, run_time: Duration, opts: &RenderOptions) -> Line {
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
#[path = "render_tests.rs"]
mod tests;

//! The Console in-process, without a terminal: plain output into a buffer, lines handed in as
//! the input thread would, an echoing model behind the aside oracle.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod term_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowerbox::agent::human::AskOutcome;
use flowerbox::agent::{Event, EventKind, Runtime, RuntimeConfig};
use flowerbox::channel::{HumanChannel, HumanConfig};
use flowerbox::flow::aside::{AsideOracle, ASIDE_STEP};
use flowerbox::record::manifest::{read_manifest, Manifest};
use flowerbox::role::Role;
use flowerbox::sandbox::host::HostSandboxFactory;
use flowerbox::session::SessionStore;
use flowerbox::term::port::{OutputPort, PortConfig};
use flowerbox::term::{Console, ConsoleOptions};
use flowerbox_testkit::SharedBuf as Buf;
use term_support::{EchoOracle, MemStore};

struct Rig {
    console: Console,
    out: Buf,
    channel: HumanChannel,
    oracle: Arc<EchoOracle>,
    main_store: Arc<MemStore>,
    _dir: tempfile::TempDir,
}

fn rig(config: HumanConfig, aside: bool, delay: Duration) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let out = Buf::default();
    let channel = HumanChannel::new(config);
    let pending = channel.clone();
    let port = OutputPort::new(
        Box::new(out.clone()),
        PortConfig {
            screen: false,
            color: false,
            columns: Arc::new(|| 100),
            question_pending: Arc::new(move || pending.has_pending()),
        },
    );
    let opts = ConsoleOptions {
        verbose: false,
        color: false,
        screen: false,
        keyboard: false,
        read_input: false,
        home: None,
    };
    let console = Console::with_port(opts, port, tokio::runtime::Handle::current());
    console.start(channel.clone()).unwrap();
    let oracle = Arc::new(EchoOracle {
        delay,
        ..Default::default()
    });
    let main_store = Arc::new(MemStore::default());
    let main_manifest = Arc::new(Manifest::new(
        dir.path().join("runs").join("manifest.json"),
        "run-1",
    ));
    let rt = Arc::new(
        Runtime::new(
            RuntimeConfig::new(
                dir.path().to_path_buf(),
                "echo-model".into(),
                "run-1".into(),
            ),
            oracle.clone(),
            main_store.clone(),
            Arc::new(HostSandboxFactory::new()),
            None,
            Arc::new(flowerbox::agent::human::Absent),
            console.event_sink(),
        )
        .with_manifest(main_manifest),
    );
    console.set_interrupter(rt.clone());
    console.set_aside(Arc::new(AsideOracle::new(
        rt,
        None,
        aside.then(|| dir.path().join("runs")),
        tokio::runtime::Handle::current(),
    )));
    Rig {
        console,
        out,
        channel,
        oracle,
        main_store,
        _dir: dir,
    }
}

fn ev(kind: EventKind) -> Event {
    Event {
        agent: "coordinator".into(),
        role: Role::Coordinator,
        depth: 0,
        kind,
    }
}

async fn wait_for(out: &Buf, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = out.text();
        if t.contains(what) {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what:?} in:\n{t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aside_question_sees_the_window_and_keeps_its_own_books() {
    let r = rig(HumanConfig::default(), true, Duration::ZERO);
    let sink = r.console.event_sink();
    sink(ev(EventKind::Thinking {
        text: "秘密思考".into(),
    }));
    sink(ev(EventKind::Prompt {
        text: "给协调者的提示词".into(),
    }));
    sink(ev(EventKind::Text {
        text: "决定先写解析器".into(),
    }));
    sink(ev(EventKind::ToolCall {
        id: "t1".into(),
        name: "Bash".into(),
        summary: "Bash: cargo test".into(),
    }));
    r.console.handle_line("? 现在到哪了");
    let out = wait_for(&r.out, "旁路回答:现在到哪了").await;
    assert!(
        out.contains("# 旁路\n  旁路回答:现在到哪了\n  ($?,没有打扰正在跑的运行)"),
        "{out}"
    );
    let seen = r.oracle.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let prompt = seen[0].messages[0].text();
    assert!(
        prompt.contains("1. [coordinator] 说:决定先写解析器"),
        "{prompt}"
    );
    assert!(
        prompt.contains("2. [coordinator] 调用 Bash: cargo test"),
        "{prompt}"
    );
    assert!(!prompt.contains("秘密思考") && !prompt.contains("给协调者的提示词"));
    assert!(prompt.ends_with("问题:现在到哪了"));
    assert_eq!(seen[0].caller.role, Role::Oracle);
    // Read-only tools only.
    let mut tools: Vec<String> = seen[0].tools.iter().map(|t| t.name.clone()).collect();
    tools.sort();
    assert_eq!(tools, vec!["Glob", "Grep", "Read"]);
    // Its own store and manifest; nothing in the main store or manifest, nothing in the inbox.
    let runs = r._dir.path().join("runs");
    let aside_db =
        flowerbox::session::SqliteSessionStore::open(runs.join("aside/sessions.db")).unwrap();
    let row = read_manifest(&runs.join("aside/manifest.json")).unwrap();
    assert_eq!(row.len(), 1);
    assert_eq!(row[0].step, format!("{ASIDE_STEP}#1"));
    assert!(row[0].ok);
    let sid = row[0].session_id.clone().unwrap();
    assert!(aside_db.meta(&sid).unwrap().is_some());
    assert_eq!(r.main_store.count(), 0);
    assert!(!runs.join("manifest.json").exists());
    assert!(r.channel.pending_mail().is_empty());
    // Plain output: no escape sequence at all.
    assert!(!out.contains('\u{1b}'));
    r.console.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_waits_for_pending_aside_answers() {
    let r = rig(HumanConfig::default(), true, Duration::from_millis(600));
    r.console.handle_line("？还要多久");
    assert_eq!(r.console.asides_pending(), 1);
    let out = r.out.clone();
    r.console.finish().await;
    let text = out.text();
    let wait = text.find("(等 1 条旁路问答收尾…)").expect("waiting line");
    let answer = text
        .find("旁路回答:还要多久")
        .expect("answer after the wait");
    assert!(wait < answer, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_aside_store_the_failure_line_shows() {
    let r = rig(HumanConfig::default(), false, Duration::ZERO);
    r.console.handle_line("?在干嘛");
    wait_for(&r.out, "# 旁路问答失败:NotReady: 这次运行没有旁路会话存储").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_answer_skip_or_go_to_the_inbox_with_the_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let brief = dir.path().join("需求.md");
    std::fs::write(&brief, "## 目标\n做个 X\n").unwrap();
    let r = rig(
        HumanConfig {
            amend: Some(Arc::new(flowerbox::flow::brief::BriefAmendments::at(
                &brief,
            ))),
            ..HumanConfig::default()
        },
        true,
        Duration::ZERO,
    );
    // No question pending: the inbox, appended to the brief.
    r.console.handle_line("  顺便统计总字节数 ");
    wait_for(&r.out, "+ 收到 (它下次查收件箱时会看到;已追加进确认书)").await;
    assert_eq!(r.channel.pending_mail(), vec!["顺便统计总字节数"]);
    assert!(std::fs::read_to_string(&brief)
        .unwrap()
        .contains("顺便统计总字节数"));
    // A question: digits pick the option.
    let ch = r.channel.clone();
    let ask = tokio::spawn(async move {
        ch.ask_question(
            flowerbox::agent::human::Asker::new("clarifier", Role::Clarifier),
            "CLI 还是库?",
            &["CLI".into(), "库".into()],
        )
        .await
    });
    wait_for(&r.out, "  ? CLI 还是库?").await;
    r.console.handle_line("2");
    assert_eq!(ask.await.unwrap(), AskOutcome::Answered("库".into()));
    wait_for(&r.out, "  + 库").await;
    // Empty line skips.
    let ch = r.channel.clone();
    let ask = tokio::spawn(async move {
        ch.ask_question(
            flowerbox::agent::human::Asker::new("clarifier", Role::Clarifier),
            "再问一个?",
            &[],
        )
        .await
    });
    wait_for(&r.out, "  ? 再问一个?").await;
    r.console.handle_line("");
    assert_eq!(ask.await.unwrap(), AskOutcome::Skipped);
    wait_for(&r.out, "  . 已跳过").await;
    // EOF declines what is pending.
    let ch = r.channel.clone();
    let ask = tokio::spawn(async move {
        ch.ask_question(
            flowerbox::agent::human::Asker::new("clarifier", Role::Clarifier),
            "第三个?",
            &[],
        )
        .await
    });
    wait_for(&r.out, "  ? 第三个?").await;
    r.console.handle_eof();
    assert_eq!(ask.await.unwrap(), AskOutcome::Skipped);
    r.console.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_render_with_the_status_line_and_step_cost() {
    let r = rig(HumanConfig::default(), true, Duration::ZERO);
    let sink = r.console.event_sink();
    sink(ev(EventKind::StepStart {
        step: "干活".into(),
    }));
    sink(ev(EventKind::Usage {
        usage: Default::default(),
        cost_usd: Some(0.25),
        context_tokens: 71_400,
    }));
    sink(ev(EventKind::Text {
        text: "决定先写解析器".into(),
    }));
    sink(ev(EventKind::StepEnd {
        step: "干活".into(),
        ok: true,
        cost_usd: Some(0.25),
        turns: 3,
        context_tokens: 71_400,
        error: None,
    }));
    let out = r.out.text();
    assert!(out.contains("== 干活 ="), "{out}");
    assert!(
        out.contains("  决定先写解析器\n  - 上下文 71.4K · 累计 $0.2500 · 0:0"),
        "{out}"
    );
    assert!(
        out.contains("  + 完成 干活 · 3 轮 · $0.2500 · 上下文 71.4K"),
        "{out}"
    );
    // A model text full of escapes cannot reach the terminal.
    sink(ev(EventKind::Text {
        text: "clear\u{1b}[2J\u{1b}]0;pwned\u{7}done".into(),
    }));
    let out = r.out.text();
    // Each sequence is gone whole, a mark where it was.
    assert!(out.contains("  clear␛␛done"), "{out}");
    assert!(!out.contains('\u{1b}'));
    r.console
        .print_lines(&["ANTHROPIC_AUTH_TOKEN=sk-a…\u{1b}[31m"]);
    assert!(r.out.text().contains("ANTHROPIC_AUTH_TOKEN=sk-a…\n"));
    r.console.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_blocking_waits_for_asides_from_a_synchronous_caller() {
    let r = rig(HumanConfig::default(), true, Duration::from_millis(400));
    r.console.handle_line("? 还剩几步");
    let console = Arc::new(r.console);
    let c = console.clone();
    tokio::task::spawn_blocking(move || c.finish_blocking())
        .await
        .unwrap();
    let text = r.out.text();
    let wait = text.find("(等 1 条旁路问答收尾…)").expect("waiting line");
    let answer = text.find("旁路回答:还剩几步").expect("answer");
    assert!(wait < answer, "{text}");
    assert_eq!(console.asides_pending(), 0);
}

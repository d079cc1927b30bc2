//! Unit tests of [`super`] (moved out of the module so that file stays a readable size).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A channel whose events are collected.
fn channel(cfg: HumanConfig) -> (HumanChannel, Arc<Mutex<Vec<EventKind>>>) {
    let ch = HumanChannel::new(cfg);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    ch.set_on_event(Arc::new(move |ev: Event| lock(&s).push(ev.kind)));
    (ch, seen)
}

fn opts(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Waits (bounded) until a question is pending; catches hangs, asserts no timing.
async fn until_pending(ch: &HumanChannel) -> PendingQuestion {
    for _ in 0..500 {
        if let Some(p) = ch.oldest_pending() {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no question became pending");
}

fn kinds(seen: &Arc<Mutex<Vec<EventKind>>>) -> Vec<String> {
    lock(seen)
        .iter()
        .map(|k| match k {
            EventKind::Question { remaining, .. } => format!("question:{remaining}"),
            EventKind::Answer { outcome, .. } => format!("answer:{outcome}"),
            EventKind::Inbox { text } => format!("inbox:{text}"),
            _ => "other".into(),
        })
        .collect()
}

#[tokio::test]
async fn answered_with_a_number_maps_to_the_option() {
    let (ch, seen) = channel(HumanConfig {
        max_asks: Some(5),
        ..HumanConfig::default()
    });
    let asker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.ask_question(
                Asker::new("clarifier", Role::Clarifier),
                "CLI 还是库?",
                &opts(&["CLI", "库"]),
            )
            .await
        })
    };
    let p = until_pending(&ch).await;
    assert_eq!(p.options, opts(&["CLI", "库"]));
    assert!(ch.has_pending());
    assert!(ch.answer(&p.id, " 2 "));
    assert_eq!(asker.await.unwrap(), AskOutcome::Answered("库".into()));
    assert!(!ch.has_pending());
    assert!(!ch.answer(&p.id, "again"), "no longer waiting");
    assert_eq!(ch.remaining(), 4);
    assert_eq!(kinds(&seen), vec!["question:4", "answer:answered"]);
    let second = lock(&seen)[1].clone();
    match second {
        EventKind::Answer { text, .. } => assert_eq!(text, "库"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn numbers_outside_the_options_are_free_text() {
    let (ch, _) = channel(HumanConfig::default());
    let asker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.ask_question(
                Asker::new("coordinator", Role::Coordinator),
                "几个?",
                &opts(&["一", "二"]),
            )
            .await
        })
    };
    until_pending(&ch).await;
    assert!(ch.answer_oldest("7"));
    assert_eq!(asker.await.unwrap(), AskOutcome::Answered("7".into()));
}

#[tokio::test]
async fn over_budget_refuses_without_blocking_or_showing() {
    let (ch, seen) = channel(HumanConfig {
        max_asks: Some(0),
        timeout_s: None,
        ..HumanConfig::default()
    });
    assert_eq!(ch.remaining(), 0);
    assert_eq!(
        ch.ask_question(Asker::new("clarifier", Role::Clarifier), "问?", &[])
            .await,
        AskOutcome::OverBudget
    );
    assert!(!ch.has_pending());
    assert_eq!(kinds(&seen), vec!["answer:over_budget"]);

    let (ch, _) = channel(HumanConfig {
        max_asks: Some(1),
        timeout_s: Some(0.0),
        ..HumanConfig::default()
    });
    assert_eq!(
        ch.ask_question(Asker::new("a", Role::Coordinator), "一", &[])
            .await,
        AskOutcome::Timeout
    );
    assert_eq!(
        ch.ask_question(Asker::new("a", Role::Coordinator), "二", &[])
            .await,
        AskOutcome::OverBudget
    );
    assert_eq!(ch.remaining(), 0);
    assert_eq!(
        AskOutcome::OverBudget.tool_text(),
        crate::agent::human::OVER_BUDGET_TEXT
    );
}

#[tokio::test]
async fn unlimited_budget_reports_minus_one() {
    let (ch, seen) = channel(HumanConfig {
        timeout_s: Some(-1.0),
        ..HumanConfig::default()
    });
    for _ in 0..3 {
        ch.ask_question(Asker::new("a", Role::Coordinator), "q", &[])
            .await;
    }
    assert_eq!(ch.remaining(), -1);
    assert!(kinds(&seen).is_empty());
}

#[tokio::test]
async fn timeout_zero_settles_at_once_without_events_but_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notes/问答记录.md");
    for t in [0.0, -5.0, f64::NAN] {
        let (ch, seen) = channel(HumanConfig {
            timeout_s: Some(t),
            log_path: Some(log.clone()),
            ..HumanConfig::default()
        });
        let out = ch
            .ask_question(
                Asker::new("clarifier", Role::Clarifier),
                "要不要 Web?",
                &opts(&["要", "不要"]),
            )
            .await;
        assert_eq!(out, AskOutcome::Timeout, "timeout_s = {t}");
        assert!(kinds(&seen).is_empty(), "nothing shown for timeout_s = {t}");
        assert!(!ch.has_pending());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("问:要不要 Web?").count(), 3);
    assert!(text.contains("· clarifier · timeout\n"));
    assert!(text.contains("选项:1) 要 / 2) 不要"));
    assert!(text.contains("答:(无人应答)"));
}

#[tokio::test]
async fn timeout_expires_and_withdraws_the_question() {
    let (ch, seen) = channel(HumanConfig {
        timeout_s: Some(0.05),
        ..HumanConfig::default()
    });
    let out = ch
        .ask_question(Asker::new("judge-1", Role::Judge), "怎么办?", &[])
        .await;
    assert_eq!(out, AskOutcome::Timeout);
    assert!(!ch.has_pending());
    assert_eq!(kinds(&seen), vec!["question:-1", "answer:timeout"]);
    assert!(!ch.answer("q1", "late"), "a late answer is refused");
}

#[tokio::test]
async fn none_timeout_waits_until_answered() {
    let (ch, _) = channel(HumanConfig {
        timeout_s: None,
        ..HumanConfig::default()
    });
    let asker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.ask_question(Asker::new("a", Role::Coordinator), "等我", &[])
                .await
        })
    };
    until_pending(&ch).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ch.has_pending(), "still waiting with no timeout");
    assert!(ch.answer_oldest("好"));
    assert_eq!(asker.await.unwrap(), AskOutcome::Answered("好".into()));
}

#[tokio::test]
async fn skipped_by_decline_or_blank_answer() {
    let (ch, seen) = channel(HumanConfig::default());
    for how in ["decline", "blank"] {
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(Asker::new("a", Role::Coordinator), "跳吗?", &[])
                    .await
            })
        };
        let p = until_pending(&ch).await;
        match how {
            "decline" => assert!(ch.decline(&p.id)),
            _ => assert!(ch.answer(&p.id, "   ")),
        }
        assert_eq!(asker.await.unwrap(), AskOutcome::Skipped, "{how}");
    }
    assert_eq!(
        kinds(&seen),
        vec![
            "question:-1",
            "answer:skipped",
            "question:-1",
            "answer:skipped"
        ]
    );
    assert!(!ch.decline_oldest(), "nothing left to decline");
}

#[tokio::test]
async fn empty_question_is_refused_and_not_counted() {
    let (ch, seen) = channel(HumanConfig {
        max_asks: Some(1),
        ..HumanConfig::default()
    });
    assert_eq!(
        ch.ask_question(Asker::new("a", Role::Coordinator), "  \n", &[])
            .await,
        AskOutcome::Empty
    );
    assert_eq!(ch.remaining(), 1);
    assert!(kinds(&seen).is_empty());
}

#[tokio::test]
async fn answered_from_a_plain_std_thread() {
    let (ch, _) = channel(HumanConfig::default());
    let ui = {
        let ch = ch.clone();
        std::thread::spawn(move || {
            for _ in 0..500 {
                if let Some(p) = ch.oldest_pending() {
                    let digit = p.option_for("1").is_some();
                    return (ch.answer_oldest("1"), digit);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (false, false)
        })
    };
    let out = ch
        .ask_question(
            Asker::new("clarifier", Role::Clarifier),
            "选一个",
            &opts(&["纯命令行", "Web 界面"]),
        )
        .await;
    assert_eq!(ui.join().unwrap(), (true, true));
    assert_eq!(out, AskOutcome::Answered("纯命令行".into()));
}

#[tokio::test]
async fn cancelled_ask_withdraws_its_question() {
    let (ch, _) = channel(HumanConfig::default());
    let asker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.ask_question(Asker::new("a", Role::Coordinator), "会被取消", &[])
                .await
        })
    };
    until_pending(&ch).await;
    asker.abort();
    let _ = asker.await;
    assert!(!ch.has_pending());
}

#[tokio::test]
async fn panicking_ui_callback_is_recorded_and_the_run_goes_on() {
    let ch = HumanChannel::new(HumanConfig {
        timeout_s: Some(0.02),
        ..HumanConfig::default()
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    ch.set_on_event(Arc::new(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        panic!("前端炸了");
    }));
    assert_eq!(
        ch.ask_question(Asker::new("a", Role::Coordinator), "q", &[])
            .await,
        AskOutcome::Timeout
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(ch.ui_errors(), vec!["前端炸了", "前端炸了"]);
}

#[test]
fn connect_events_keeps_a_callback_set_by_the_caller() {
    let ch = HumanChannel::new(HumanConfig::default());
    assert!(ch.connect_events(crate::agent::event::null_sink()));
    assert!(!ch.connect_events(crate::agent::event::null_sink()));
}

/// Appends each text as one line (the workflows' brief amender is tested in `flow`).
struct Lines(PathBuf);

impl Amend for Lines {
    fn amend(&self, text: &str) -> std::io::Result<bool> {
        crate::fsroot::own::append(&self.0, format!("{text}\n").as_bytes()).map(|_| true)
    }
    fn target(&self) -> &Path {
        &self.0
    }
}

#[test]
fn send_queues_mail_appends_to_brief_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    let brief = dir.path().join("notes/需求.md");
    let log = dir.path().join("notes/问答记录.md");
    let (ch, seen) = channel(HumanConfig {
        amend: Some(Arc::new(Lines(brief.clone()))),
        log_path: Some(log.clone()),
        ..HumanConfig::default()
    });
    assert_eq!(ch.send("  "), None);
    let sent = std::thread::spawn({
        let ch = ch.clone();
        move || ch.send("顺便统计总字节数")
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(
        sent,
        Sent {
            id: "m1".into(),
            appended: true
        }
    );
    assert_eq!(ch.send("再加一条").unwrap().id, "m2");
    assert_eq!(ch.pending_mail(), vec!["顺便统计总字节数", "再加一条"]);

    assert_eq!(
        std::fs::read_to_string(&brief).unwrap(),
        "顺便统计总字节数\n再加一条\n"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("人主动说\n顺便统计总字节数\n(已追加进确认书)"),
        "{text}"
    );

    assert_eq!(Human::inbox(&ch), vec!["顺便统计总字节数", "再加一条"]);
    assert!(Human::inbox(&ch).is_empty(), "taken once");
    assert_eq!(
        kinds(&seen),
        vec!["inbox:顺便统计总字节数", "inbox:再加一条"]
    );
}

#[test]
fn send_without_amend_path_is_queued_but_not_appended() {
    let ch = HumanChannel::new(HumanConfig::default());
    let sent = ch.send("加需求").unwrap();
    assert!(!sent.appended);
    assert_eq!(ch.pending_mail(), vec!["加需求"]);
}

#[test]
fn unwritable_files_are_recorded_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let ch = HumanChannel::new(HumanConfig {
        amend: Some(Arc::new(Lines(file.join("需求.md")))), // parent is a file
        log_path: Some(file.join("log.md")),
        ..HumanConfig::default()
    });
    let sent = ch.send("说一句").unwrap();
    assert!(!sent.appended);
    assert_eq!(ch.io_errors().len(), 2);
}

#[tokio::test]
async fn every_outcome_lands_in_the_log_with_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("问答记录.md");
    let (ch, _) = channel(HumanConfig {
        max_asks: Some(2),
        timeout_s: Some(0.02),
        log_path: Some(log.clone()),
        ..HumanConfig::default()
    });
    let asker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.ask_question(
                Asker::new("clarifier", Role::Clarifier),
                "语言?",
                &opts(&["Rust", "Go"]),
            )
            .await
        })
    };
    // Answer it from the test while the 20 ms timeout may race: either outcome is logged.
    let answered = loop {
        if let Some(p) = ch.oldest_pending() {
            break ch.answer(&p.id, "1");
        }
        if asker.is_finished() {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let first = asker.await.unwrap();
    assert_eq!(answered, first == AskOutcome::Answered("Rust".into()));
    ch.ask_question(Asker::new("clarifier", Role::Clarifier), "第二个", &[])
        .await;
    ch.ask_question(Asker::new("clarifier", Role::Clarifier), "第三个", &[])
        .await;
    ch.ask_question(Asker::new("clarifier", Role::Clarifier), "", &[])
        .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("· clarifier · timeout\n问:第二个\n答:(无人应答)\n"),
        "{text}"
    );
    assert!(
        text.contains("· clarifier · over_budget\n问:第三个\n答:(提问额度用完)\n"),
        "{text}"
    );
    assert!(text.contains("· clarifier · empty\n"), "{text}");
    assert_eq!(ch.history().len(), 4);
    assert_eq!(ch.transcript().matches("### ").count(), 4);
}

#[tokio::test]
async fn events_carry_the_askers_role_and_depth() {
    let ch = HumanChannel::new(HumanConfig {
        timeout_s: Some(0.01),
        ..HumanConfig::default()
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    ch.set_on_event(Arc::new(move |ev: Event| {
        lock(&s).push((ev.role, ev.depth))
    }));
    let worker = Asker {
        agent: "worker-2",
        role: Role::Worker,
        depth: 1,
    };
    assert_eq!(ch.ask_question(worker, "q", &[]).await, AskOutcome::Timeout);
    assert_eq!(
        *lock(&seen),
        vec![(Role::Worker, 1), (Role::Worker, 1)],
        "question and answer"
    );
}

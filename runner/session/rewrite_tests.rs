//! Unit tests of prune, expiry and trim with exact expected outputs.

use super::*;
use serde_json::json;

/// An assistant message calling tool `name` with `input` as call `id`.
fn call(id: &str, name: &str, input: serde_json::Value) -> Message {
    Message {
        role: Speaker::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }],
    }
}

/// An assistant message calling `Bash` with `command` as call `id`.
fn bash(id: &str, command: &str) -> Message {
    call(id, BASH_TOOL, json!({ "command": command }))
}

/// A user message answering call `id` with the successful result `text`.
fn result(id: &str, text: &str) -> Message {
    Message {
        role: Speaker::User,
        content: vec![res(id, text)],
    }
}

fn policy(dir: &Path, trim_large: bool) -> TrimPolicy {
    TrimPolicy {
        trim_large,
        keep_recent: 2,
        min_chars: 50,
        keep_ephemeral: 2,
        spill_dir: dir.join("spill"),
    }
}

fn res(id: &str, text: &str) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: id.into(),
        content: text.into(),
        is_error: false,
    }
}

fn m(msg: Message) -> Entry {
    Entry::Message(msg)
}

#[test]
fn notices_never_enter_and_a_clean_history_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let history = vec![
        Message::user_text("go"),
        bash("a", "cargo test"),
        result("a", "ok"),
        Message::assistant_text("done"),
    ];
    let mut entries: Vec<Entry> = history.iter().cloned().map(Entry::Message).collect();
    entries.insert(
        2,
        Entry::Notice(NoticeKind::NetworkError, "503 while waiting".into()),
    );
    entries.push(Entry::Notice(NoticeKind::NetworkError, "ECONNRESET".into()));
    let (out, report) = for_resume(&entries, &policy(dir.path(), true)).unwrap();
    assert_eq!(out, history);
    assert_eq!(
        report,
        TrimReport {
            notices: 2,
            ..TrimReport::default()
        }
    );
    assert_eq!(report.summary(), "未裁剪");
}

#[test]
fn a_trailing_call_without_result_gets_the_interrupted_note() {
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![m(Message::user_text("go")), m(bash("a", "cargo build"))];
    let (out, report) = for_resume(&entries, &policy(dir.path(), true)).unwrap();
    assert_eq!(
        out,
        vec![
            Message::user_text("go"),
            bash("a", "cargo build"),
            result("a", INTERRUPTED_NOTE)
        ]
    );
    assert_eq!(report.interrupted, 1);
}

#[test]
fn partial_results_are_completed_in_call_order_after_the_existing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let two = Message {
        role: Speaker::Assistant,
        content: vec![
            ContentBlock::text("two calls"),
            ContentBlock::ToolUse {
                id: "a".into(),
                name: "Read".into(),
                input: json!({}),
            },
            ContentBlock::ToolUse {
                id: "b".into(),
                name: "Read".into(),
                input: json!({}),
            },
            ContentBlock::ToolUse {
                id: "c".into(),
                name: "Read".into(),
                input: json!({}),
            },
        ],
    };
    let answer = Message {
        role: Speaker::User,
        content: vec![res("b", "B"), ContentBlock::text("also this")],
    };
    let entries = vec![
        m(Message::user_text("go")),
        m(two.clone()),
        m(answer),
        m(Message::assistant_text("x")),
    ];
    let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
    assert_eq!(
        out[2],
        Message {
            role: Speaker::User,
            content: vec![
                res("b", "B"),
                res("a", INTERRUPTED_NOTE),
                res("c", INTERRUPTED_NOTE),
                ContentBlock::text("also this")
            ],
        }
    );
    assert_eq!(out.len(), 4);
}

#[test]
fn a_call_followed_by_an_assistant_message_gets_a_user_message_inserted() {
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![
        m(Message::user_text("go")),
        m(bash("a", "ls")),
        m(Message::assistant_text("hm")),
    ];
    let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
    assert_eq!(
        out,
        vec![
            Message::user_text("go"),
            bash("a", "ls"),
            result("a", INTERRUPTED_NOTE),
            Message::assistant_text("hm")
        ]
    );
}

#[test]
fn results_left_by_an_interruption_are_neutralised_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![
        m(Message::user_text("go")),
        m(bash("a", "cargo test")),
        Entry::Notice(NoticeKind::Interrupted, "Ctrl-C".into()),
        m(Message {
            role: Speaker::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "a".into(),
                    content: "killed".into(),
                    is_error: true,
                },
                ContentBlock::text("stop and look at X instead"),
            ],
        }),
        m(bash("b", "cargo test")),
        m(result("b", "ok")),
        // An interruption with nothing open touches nothing.
        Entry::Notice(NoticeKind::Interrupted, "Ctrl-C".into()),
    ];
    let (out, report) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
    assert_eq!(
        out[2],
        Message {
            role: Speaker::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "a".into(),
                    content: INTERRUPTED_NOTE.into(),
                    is_error: true
                },
                ContentBlock::text("stop and look at X instead"),
            ],
        }
    );
    assert_eq!(out[4], result("b", "ok"));
    assert_eq!(report.interrupted, 1);
    assert_eq!(report.notices, 2);
}

#[test]
fn stray_results_are_dropped_and_never_separate_a_call_from_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![
        m(Message::user_text("go")),
        m(Message::assistant_text("thinking")),
        m(result("ghost", "answers nothing")),
        m(bash("a", "cargo test")),
        m(Message {
            role: Speaker::User,
            content: vec![res("a", "first"), res("a", "duplicate")],
        }),
    ];
    let (out, _) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
    assert_eq!(
        out,
        vec![
            Message::user_text("go"),
            Message::assistant_text("thinking"),
            bash("a", "cargo test"),
            result("a", "first")
        ]
    );
}

/// A history of `n` ephemeral `git status` calls and one non-ephemeral call.
fn glance_history(n: usize) -> Vec<Entry> {
    let mut e = vec![m(Message::user_text("go"))];
    for i in 0..n {
        e.push(m(bash(&format!("g{i}"), "git status -s\ngit log -1")));
        e.push(m(result(&format!("g{i}"), &format!("M file{i}"))));
        if i == 0 {
            e.push(m(bash("t", "cargo test")));
            e.push(m(result("t", "test result: ok")));
        }
    }
    e
}

#[test]
fn expiry_keeps_the_most_recent_ephemeral_results_and_notes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // keep_ephemeral = 2 of 4: g0 and g1 expire with ages 4 and 3.
    let (out, report) = for_resume(&glance_history(4), &policy(dir.path(), false)).unwrap();
    let texts: Vec<String> = out
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            "[`git status -s` 的结果已过期(第 4 轮前),当前状态可能已变。需要请重新执行]"
                .to_string(),
            "test result: ok".to_string(),
            "[`git status -s` 的结果已过期(第 3 轮前),当前状态可能已变。需要请重新执行]"
                .to_string(),
            "M file2".to_string(),
            "M file3".to_string(),
        ]
    );
    assert_eq!(report.expired, 2);
    assert_eq!(report.summary(), "2 个时效性结果标记为过期");
    // Expiry never writes a spill file.
    assert!(!dir.path().join("spill").exists());
}

#[test]
fn flowers_default_note_reads_seven_turns_for_the_first_expired_result() {
    let dir = tempfile::tempdir().unwrap();
    let p = TrimPolicy::new(dir.path().join("spill"), false);
    let (out, report) = for_resume(&glance_history(7), &p).unwrap();
    assert_eq!(report.expired, 1);
    assert_eq!(
        out[2],
        result(
            "g0",
            "[`git status -s` 的结果已过期(第 7 轮前),当前状态可能已变。需要请重新执行]"
        )
    );
}

#[test]
fn expiry_and_the_glance_guard_are_the_same_set() {
    let dir = tempfile::tempdir().unwrap();
    let p = TrimPolicy {
        keep_ephemeral: 0,
        ..policy(dir.path(), false)
    };
    for cmd in [
        "git status",
        "git status && rm x",
        "ls -la",
        "ls $(pwd)",
        "cat a > b",
        "ps aux | grep x | head",
        "cargo test",
        "find . -delete",
        "git log --oneline | head",
    ] {
        let entries = vec![
            m(Message::user_text("go")),
            m(bash("a", cmd)),
            m(result("a", "short")),
        ];
        let (out, _) = for_resume(&entries, &p).unwrap();
        let expired = out[2] != result("a", "short");
        assert_eq!(expired, is_ephemeral(cmd), "{cmd}");
    }
    // Other tools are never expired, even with a glance-looking input.
    let entries = vec![
        m(Message::user_text("go")),
        m(call("a", "Read", json!({ "command": "ls" }))),
        m(result("a", "short")),
    ];
    assert_eq!(for_resume(&entries, &p).unwrap().0[2], result("a", "short"));
}

#[test]
fn trim_spills_old_large_results_and_keeps_the_recent_ones() {
    let dir = tempfile::tempdir().unwrap();
    let big = |c: char| c.to_string().repeat(60);
    let mut entries = vec![m(Message::user_text("go"))];
    for (i, c) in ['a', 'b', 'c', 'd'].into_iter().enumerate() {
        let id = format!("r{i}");
        entries.push(m(call(&id, "Read", json!({ "path": "/x" }))));
        entries.push(m(result(&id, &big(c))));
    }
    entries.push(m(call("s", "Read", json!({}))));
    entries.push(m(result("s", "small")));
    let p = policy(dir.path(), true);
    let (out, report) = for_resume(&entries, &p).unwrap();
    let path_a = p.spill_dir.join(format!(
        "{}.txt",
        &hex::encode(Sha256::digest(big('a').as_bytes()))[..16]
    ));
    let path_b = spill_path(&p.spill_dir, &big('b'));
    assert_eq!(
        out[2],
        result(
            "r0",
            &format!(
                "[工具结果已归档:60 字符。完整内容在 {},需要时用 Read 读取]",
                path_a.display()
            )
        )
    );
    assert_eq!(out[4], result("r1", &spill_pointer(&path_b, 60)));
    assert_eq!(out[6], result("r2", &big('c')));
    assert_eq!(out[8], result("r3", &big('d')));
    assert_eq!(out[10], result("s", "small"));
    assert_eq!(std::fs::read_to_string(&path_a).unwrap(), big('a'));
    assert_eq!(std::fs::read_to_string(&path_b).unwrap(), big('b'));
    assert_eq!(report.trimmed, 2);
    assert_eq!(report.kept_large, 2);
    assert_eq!(report.chars_saved, 120);
    assert_eq!(
        report.summary(),
        "裁掉 2 个工具结果(保留最近 2 个),省下 ~30 tokens"
    );

    // Off: nothing is trimmed and nothing is written.
    let other = tempfile::tempdir().unwrap();
    let (out, report) = for_resume(&entries, &policy(other.path(), false)).unwrap();
    assert_eq!(out[2], result("r0", &big('a')));
    assert_eq!(report.trimmed, 0);
    assert!(!other.path().join("spill").exists());
}

#[test]
fn size_is_counted_in_characters_and_the_boundary_is_inclusive() {
    let dir = tempfile::tempdir().unwrap();
    let p = TrimPolicy {
        keep_recent: 0,
        ..policy(dir.path(), true)
    };
    let exactly = "字".repeat(50); // 50 characters, 150 bytes
    let below = "字".repeat(49);
    let entries = vec![
        m(Message::user_text("go")),
        m(call("a", "Read", json!({}))),
        m(result("a", &exactly)),
        m(call("b", "Read", json!({}))),
        m(result("b", &below)),
    ];
    let (out, _) = for_resume(&entries, &p).unwrap();
    assert_eq!(
        out[2],
        result("a", &spill_pointer(&spill_path(&p.spill_dir, &exactly), 50))
    );
    assert_eq!(out[4], result("b", &below));
}

#[test]
fn large_ephemeral_results_are_trimmed_not_expired() {
    let dir = tempfile::tempdir().unwrap();
    let p = TrimPolicy {
        keep_recent: 0,
        keep_ephemeral: 0,
        ..policy(dir.path(), true)
    };
    let long = "x".repeat(80);
    let entries = vec![
        m(Message::user_text("go")),
        m(bash("a", "git diff")),
        m(result("a", &long)),
    ];
    let (out, report) = for_resume(&entries, &p).unwrap();
    assert_eq!(
        out[2],
        result("a", &spill_pointer(&spill_path(&p.spill_dir, &long), 80))
    );
    assert_eq!((report.expired, report.trimmed), (0, 1));
}

#[test]
fn notes_written_by_prune_are_neither_expired_nor_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let p = TrimPolicy {
        keep_recent: 0,
        keep_ephemeral: 0,
        min_chars: 5,
        ..policy(dir.path(), true)
    };
    let entries = vec![m(Message::user_text("go")), m(bash("a", "git status"))];
    let (out, report) = for_resume(&entries, &p).unwrap();
    assert_eq!(out[2], result("a", INTERRUPTED_NOTE));
    assert_eq!((report.expired, report.trimmed), (0, 0));
}

#[test]
fn expiry_note_shortens_the_command() {
    let long = format!("git log --format='{}'", "x".repeat(100));
    let note = expiry_note(&long, 9);
    let shown: String = long.chars().take(60).collect();
    assert_eq!(
        note,
        format!("[`{shown}` 的结果已过期(第 9 轮前),当前状态可能已变。需要请重新执行]")
    );
}

#[test]
fn an_empty_message_stored_by_an_older_flowerbox_is_repaired_on_load() {
    // A turn cut off by max_tokens inside its only tool call was stored as an empty assistant
    // message; the real API refuses that history, so every resume of it failed.
    let dir = tempfile::tempdir().unwrap();
    let entries = vec![
        m(Message::user_text("写个大文件")),
        m(Message {
            role: Speaker::Assistant,
            content: vec![],
        }),
        m(Message::user_text("[被截断]")),
        m(Message {
            role: Speaker::Assistant,
            content: vec![ContentBlock::text("")],
        }),
        m(Message::user_text("继续")),
    ];
    let (out, report) = for_resume(&entries, &policy(dir.path(), false)).unwrap();
    assert_eq!(report.repaired, 2);
    assert_eq!(
        out,
        vec![Message {
            role: Speaker::User,
            content: vec![
                ContentBlock::text("写个大文件"),
                ContentBlock::text("[被截断]"),
                ContentBlock::text("继续")
            ],
        }]
    );
}

//! Unit tests of the handoff document and the window arithmetic.

use super::*;

#[test]
fn window_for_follows_the_seed_table() {
    let cases: &[(&str, Option<i64>, u64)] = &[
        ("claude-opus-5[1m]", None, 1_000_000),
        ("claude-haiku[1m]", None, 1_000_000),
        ("claude-3-5-haiku-20241022", None, 200_000),
        ("Claude-Haiku-4", None, 200_000),
        ("claude-sonnet-4-5", None, 1_000_000),
        ("", None, 1_000_000),
        ("gpt-41mini-haiku", None, 200_000), // `1m` inside a word is not the 1m marker
        ("claude-haiku-4", Some(0), 200_000),
        ("claude-haiku-4", Some(300_000), 300_000),
        ("claude-opus-5[1m]", Some(200_000), 200_000),
        ("claude-opus", Some(-5), 10_000),
        ("claude-opus", Some(5_000), 5_000),
    ];
    for &(model, flag, want) in cases {
        assert_eq!(window_for(model, flag), want, "{model} {flag:?}");
    }
}

#[test]
fn the_window_comes_from_the_flag_then_the_catalogue_then_the_server_then_the_name() {
    // The catalogue knows claude-sonnet-4-5's window (200k without the 1M beta header): the
    // name rule's 1M is only for models it does not know.
    assert_eq!(context_window("claude-sonnet-4-5", None, None), 200_000);
    assert_eq!(
        context_window("claude-sonnet-4-5-20250929", None, Some(5)),
        200_000
    );
    assert_eq!(context_window("gpt-4-1", None, None), 1_047_576);
    assert_eq!(
        context_window("claude-sonnet-4-5", Some(300_000), None),
        300_000
    );
    assert_eq!(context_window("local-llama", None, Some(32_768)), 32_768);
    assert_eq!(context_window("local-llama", None, None), 1_000_000);
    assert_eq!(context_window("claude-opus-5[1m]", None, None), 1_000_000);
    assert_eq!(context_window("claude-haiku-9", None, None), 200_000);
}

#[test]
fn thresholds() {
    assert_eq!(handoff_threshold(1_000_000), 950_000);
    assert_eq!(handoff_threshold(200_000), 150_000);
    assert_eq!(handoff_threshold(60_000), 10_000);
    assert_eq!(handoff_threshold(10_000), 10_000);
    assert_eq!(warn_threshold(200_000), 130_000);
    assert_eq!(warn_threshold(10_000), 1_000);
    assert_eq!(fmt_tokens(950_000), "950.0K");
}

fn full() -> Handoff {
    Handoff {
        step: "干活".into(),
        doing: "在给 Makefile 加 macOS 垫片头。".into(),
        decided: "不改业务源码 —— 用户明确说过边界。".into(),
        deadends: "-D_ANSI_SOURCE 会把别的宏一起关掉;\n改 include 顺序无效。".into(),
        next: "在干净 clone 上跑一次 make。".into(),
        scene: "Makefile\n.flower/artifacts/build.log".into(),
    }
}

#[test]
fn markdown_has_five_sections_and_parses_back() {
    let h = full();
    let md = h.to_markdown();
    assert!(md.starts_with("# 交接书 · 干活\n"));
    for title in [
        "## 现在在做",
        "## 已定的事",
        "## 走不通的",
        "## 下一步",
        "## 现场",
    ] {
        assert!(md.contains(title), "{title}");
    }
    assert_eq!(Handoff::parse("干活", &md), h);
    let sparse = Handoff {
        decided: String::new(),
        deadends: String::new(),
        scene: String::new(),
        ..h
    };
    let md = sparse.to_markdown();
    assert_eq!(md.matches("(空)").count(), 3);
    assert_eq!(Handoff::parse("干活", &md), sparse);
}

#[test]
fn parse_tolerates_the_ways_models_write() {
    let bold = "好的,交接如下。\n\n**现在在做**:修 shim\n\n**下一步:** 跑 make\n**走不通的**\n- 改 include 顺序\n";
    let h = Handoff::parse("s", bold);
    assert_eq!(h.doing, "修 shim");
    assert_eq!(h.next, "跑 make");
    assert_eq!(h.deadends, "- 改 include 顺序");
    assert!(h.is_complete());

    let english =
        "# Doing\nfixing\n\n### Next steps\n1. run make\n2. check\n\n### Dead ends\nnone\n";
    let h = Handoff::parse("s", english);
    assert_eq!(
        (h.doing.as_str(), h.next.as_str(), h.deadends.as_str()),
        ("fixing", "1. run make\n2. check", "none")
    );

    let numbered = "1. 现在在做:A\n2. 下一步:B\n";
    let h = Handoff::parse("s", numbered);
    assert_eq!((h.doing.as_str(), h.next.as_str()), ("A", "B"));

    let json = "```json\n{\"doing\": \"A\", \"next\": [\"B\", \"C\"], \"scene\": null}\n```";
    let h = Handoff::parse("s", json);
    assert_eq!(
        (h.doing.as_str(), h.next.as_str(), h.scene.as_str()),
        ("A", "B\nC", "")
    );

    let glossed = "## 现在在做(doing)\nA\n## 下一步 (next)\nB";
    let h = Handoff::parse("s", glossed);
    assert_eq!((h.doing.as_str(), h.next.as_str()), ("A", "B"));

    // Prose that merely starts with a label word is not a heading.
    let prose = "## 现在在做\nA\n下一步我们应该先读代码\n";
    let h = Handoff::parse("s", prose);
    assert_eq!(h.doing, "A\n下一步我们应该先读代码");
    assert_eq!(h.missing(), vec!["next"]);
}

#[test]
fn missing_required_sections_are_reported() {
    let h = Handoff::parse("s", "我写不出来");
    assert_eq!(h.missing(), vec!["doing", "next"]);
    assert!(!h.is_complete());
    let h = Handoff::parse("s", "## 走不通的\n很多\n## 现场\nsrc/");
    assert_eq!(h.missing(), vec!["doing", "next"]);
    assert_eq!(h.deadends, "很多");
}

#[test]
fn degraded_document_says_so_and_carries_the_task_head() {
    let task = "写".repeat(1500);
    let h = Handoff::degraded("干活", &task, "网络断了");
    assert!(h.is_degraded());
    assert!(h.is_complete());
    assert!(h.doing.starts_with("[降级:交接没写成]"));
    assert!(h.doing.contains("网络断了"));
    assert!(h.scene.contains(&"写".repeat(1200)));
    assert!(!h.scene.contains(&"写".repeat(1201)));
    assert!(h.successor_prompt().contains("降级"));
    assert!(!full().is_degraded());
    assert!(!full().successor_prompt().contains("降级"));
    // It survives a round trip through the file.
    assert!(Handoff::parse("干活", &h.to_markdown()).is_degraded());
}

#[test]
fn request_prompt_names_the_headings_parse_reads() {
    let p = Handoff::request_prompt(950_000, 1_000_000);
    assert!(p.contains("950.0K/1000K"), "{p}");
    let echoed: String = p
        .lines()
        .filter(|l| l.starts_with("## "))
        .map(|l| format!("{l}\nx\n"))
        .collect();
    let h = Handoff::parse("s", &echoed);
    assert_eq!(
        [h.doing, h.decided, h.deadends, h.next, h.scene],
        ["x", "x", "x", "x", "x"].map(String::from)
    );
}

#[test]
fn write_archives_the_previous_generation() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join(".flower/notes");
    let first = full();
    let p1 = first.write(&notes).unwrap();
    assert_eq!(p1, notes.join("交接-干活.md"));
    assert_eq!(std::fs::read_to_string(&p1).unwrap(), first.to_markdown());
    let second = Handoff {
        doing: "第二代".into(),
        ..full()
    };
    let p2 = second.write(&notes).unwrap();
    let third = Handoff {
        doing: "第三代".into(),
        ..full()
    };
    third.write(&notes).unwrap();
    assert_eq!(p1, p2);
    assert_eq!(
        Handoff::parse("干活", &std::fs::read_to_string(&p2).unwrap()).doing,
        "第三代"
    );
    let mut archived: Vec<String> = std::fs::read_dir(notes.join("archive/交接"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    archived.sort();
    assert_eq!(archived.len(), 2);
    assert!(archived.iter().any(|a| a.contains("垫片头")));
    assert!(archived.iter().any(|a| a.contains("第二代")));
    let names: Vec<String> = std::fs::read_dir(notes.join("archive/交接"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("干活-") && n.ends_with(".md")),
        "{names:?}"
    );
}

#[test]
fn step_names_become_safe_file_names() {
    let notes = Path::new("/n");
    assert_eq!(
        handoff_path(notes, "干活"),
        PathBuf::from("/n/交接-干活.md")
    );
    assert_eq!(
        handoff_path(notes, "a/b:c"),
        PathBuf::from("/n/交接-abc.md")
    );
    assert_eq!(
        handoff_path(notes, "../.."),
        PathBuf::from("/n/交接-step.md")
    );
    assert_eq!(
        handoff_path(notes, "干活#round2"),
        PathBuf::from("/n/交接-干活#round2.md")
    );
}

#[test]
fn a_handoff_is_written_clean_and_its_file_name_has_no_hidden_characters() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes");
    let h = Handoff {
        step: "干\u{202e}活\x1b[2J".into(),
        doing: "在改\x1b]52;c;aGk=\x07 Makefile\r覆盖".into(),
        ..full()
    };
    let p = h.write(&notes).unwrap();
    assert_eq!(p, notes.join("交接-干活[2J.md"));
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains("在改␛ Makefile␍覆盖"), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
}

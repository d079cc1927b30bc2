use super::*;

#[test]
fn a_skill_and_an_agent_front_matter_as_claude_code_writes_them() {
    let skill = front_matter(
        "---\nname: pdf-tools\ndescription: \"Fill PDF forms: use when a PDF is involved\"\n---\n# PDF\nSteps.\n",
    )
    .unwrap();
    assert_eq!(skill.get("name"), Some("pdf-tools"));
    assert_eq!(
        skill.get("description"),
        Some("Fill PDF forms: use when a PDF is involved")
    );
    assert_eq!(skill.body, "# PDF\nSteps.\n");

    let agent = front_matter(
        "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep, Bash\nmodel: inherit\n---\nYou review.\n",
    )
    .unwrap();
    assert_eq!(agent.list("tools").unwrap(), ["Read", "Grep", "Bash"]);
    assert_eq!(agent.get("model"), Some("inherit"));
    assert_eq!(agent.body.trim(), "You review.");

    // YAML lists, both ways.
    let listed = front_matter("---\ntools: [Read, \"Grep\"]\n---\n").unwrap();
    assert_eq!(listed.list("tools").unwrap(), ["Read", "Grep"]);
    let dashed = front_matter("---\ntools:\n  - Read\n  - Glob\n---\nbody").unwrap();
    assert_eq!(dashed.list("tools").unwrap(), ["Read", "Glob"]);
    assert_eq!(dashed.body, "body");
}

#[test]
fn markdown_without_front_matter_is_refused() {
    assert!(matches!(
        front_matter("# just text"),
        Err(ParseError::NoFrontMatter)
    ));
    assert!(matches!(
        front_matter("---\nname: x\nnever closed"),
        Err(ParseError::NoFrontMatter)
    ));
}

#[test]
fn hooks_json_with_matchers_timeouts_and_the_outer_key_optional() {
    let text = r#"{"description": "guards", "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "check.sh", "timeout": 5}]},
                       {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "fmt.sh"}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": "hello"}]}]
    }}"#;
    let hooks = hooks_json(text).unwrap();
    assert_eq!(hooks.len(), 3);
    let bash = &hooks[0];
    assert_eq!(bash.event, HookEvent::PreToolUse);
    assert_eq!(bash.timeout, Duration::from_secs(5));
    assert!(bash.applies_to("Bash") && !bash.applies_to("BashX") && !bash.applies_to("Read"));
    assert!(hooks[1].applies_to("Write") && hooks[1].applies_to("Edit"));
    assert_eq!(hooks[1].timeout, HOOK_TIMEOUT);
    assert_eq!(hooks[2].event, HookEvent::SessionStart);
    assert!(hooks[2].applies_to("anything"));
    // Without the outer key, as in a settings file.
    let bare =
        hooks_json(r#"{"PostToolUse": [{"matcher": "*", "hooks": [{"command": "x"}]}]}"#).unwrap();
    assert!(bare[0].applies_to("Read"));
}

#[test]
fn broken_hooks_json_says_why() {
    assert!(matches!(hooks_json("{"), Err(ParseError::Json(_))));
    assert!(matches!(
        hooks_json(r#"{"hooks": {"BeforeEverything": []}}"#).unwrap_err(),
        ParseError::UnknownEvent(e) if e == "BeforeEverything"
    ));
    assert!(matches!(
        hooks_json(r#"{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}"#).unwrap_err(),
        ParseError::BadMatcher(m) if m == "("
    ));
    assert!(matches!(
        hooks_json(
            r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "prompt", "command": "x"}]}]}}"#
        ),
        Err(ParseError::Shape(_))
    ));
    assert!(matches!(
        hooks_json(r#"{"hooks": {"PreToolUse": [{"hooks": [{"command": ""}]}]}}"#),
        Err(ParseError::Shape(_))
    ));
}

#[test]
fn exit_codes_and_json_output_as_claude_code_reads_them() {
    assert_eq!(
        outcome(Some(2), false, "", "no rm -rf here\n"),
        HookOutcome::Block {
            reason: "no rm -rf here".into()
        }
    );
    // A timeout is an error, never a block, whatever the code.
    assert!(matches!(
        outcome(Some(2), true, "", "x"),
        HookOutcome::Error { .. }
    ));
    assert!(matches!(
        outcome(Some(1), false, "", "oops"),
        HookOutcome::Error { .. }
    ));
    assert!(matches!(
        outcome(None, false, "", ""),
        HookOutcome::Error { .. }
    ));
    assert_eq!(
        outcome(Some(0), false, "fine", ""),
        HookOutcome::Proceed {
            stdout: "fine".into()
        }
    );
    let deny = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "not here"}}"#;
    assert_eq!(
        outcome(Some(0), false, deny, ""),
        HookOutcome::Block {
            reason: "not here".into()
        }
    );
    assert_eq!(
        outcome(
            Some(0),
            false,
            r#"{"decision": "block", "reason": "r"}"#,
            ""
        ),
        HookOutcome::Block { reason: "r".into() }
    );
}

#[test]
fn manifest_name_is_optional() {
    assert_eq!(
        manifest_name(r#"{"name": "guards", "version": "1.0.0"}"#).unwrap(),
        Some("guards".into())
    );
    assert_eq!(manifest_name("{}").unwrap(), None);
    assert!(manifest_name("[]").is_err());
}

use super::*;
use std::os::unix::fs::symlink;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_repository_plugin_and_a_plugin_dir_load_and_problems_say_why() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let guard = ws.join(DEFAULT_DIR).join("guard");
    write(
        &guard.join(".claude-plugin/plugin.json"),
        r#"{"name": "guards"}"#,
    );
    write(
        &guard.join("skills/deploy/SKILL.md"),
        "---\nname: deploy\ndescription: How to deploy\n---\nRun make deploy.\n",
    );
    write(
        &guard.join("agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep\nmodel: sonnet\n---\nReview it.\n",
    );
    write(
        &guard.join("hooks/hooks.json"),
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]}}"#,
    );
    // A skill without a description, and a SKILL.md that is a link out of the workspace.
    write(
        &guard.join("skills/vague/SKILL.md"),
        "---\nname: vague\n---\n",
    );
    write(&root.join("secret.md"), "---\ndescription: stolen\n---\n");
    std::fs::create_dir_all(guard.join("skills/leak")).unwrap();
    symlink(root.join("secret.md"), guard.join("skills/leak/SKILL.md")).unwrap();
    // A --plugin-dir outside the workspace (the user's own) and one that does not exist.
    let own = root.join("mine");
    write(
        &own.join("skills/notes/SKILL.md"),
        "---\ndescription: Take notes\n---\nbody",
    );
    let p = load(&ws, &[own.clone(), root.join("nowhere")], &[]);
    assert_eq!(
        p.plugins
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["guards", "mine"]
    );
    let skills: Vec<_> = p.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(skills, ["deploy", "notes"]);
    assert_eq!(
        p.skill("guards:deploy").unwrap().description,
        "How to deploy"
    );
    assert_eq!(p.agents.len(), 1);
    assert_eq!(p.agents[0].tools.as_deref().unwrap(), ["Read", "Grep"]);
    assert_eq!(p.agents[0].prompt, "Review it.");
    assert_eq!(p.agents[0].model.as_deref(), Some("sonnet"));
    assert_eq!(p.hooks_for(HookEvent::PreToolUse, "Bash").len(), 1);
    assert!(p.hooks_for(HookEvent::PreToolUse, "Read").is_empty());
    let problems = p.problems.join("\n");
    assert!(
        problems.contains("vague/SKILL.md") && problems.contains("description"),
        "{problems}"
    );
    assert!(
        problems.contains("leak/SKILL.md") && problems.contains("符号链接"),
        "{problems}"
    );
    assert!(
        problems.contains("nowhere") && problems.contains("不存在"),
        "{problems}"
    );
    assert!(!skills.contains(&"leak"));
    // The run-end configuration list follows the plugin's files.
    let watched = watched_files(&p);
    for f in [
        "hooks/hooks.json",
        ".mcp.json",
        "agents/reviewer.md",
        "skills/deploy/SKILL.md",
    ] {
        assert!(watched.contains(&guard.join(f)), "{f}: {watched:?}");
    }
}

#[test]
fn a_plugin_dir_holding_home_or_the_workspace_is_never_mounted() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let (home, ws, own) = (root.join("home"), root.join("ws"), root.join("plugins/p"));
    for d in [&home, &ws, &own] {
        std::fs::create_dir_all(d).unwrap();
    }
    assert_eq!(mountable(&own, Some(&home), &ws), Some(own.clone()));
    assert_eq!(mountable(&root, Some(&home), &ws), None, "holds both");
    assert_eq!(mountable(&home, Some(&home), &ws), None);
    assert_eq!(mountable(Path::new("/"), None, &ws), None);
    assert_eq!(mountable(&ws.join("x"), None, &ws), None, "missing");
    std::fs::create_dir_all(ws.join("x")).unwrap();
    assert_eq!(
        mountable(&ws.join("x"), None, &ws),
        None,
        "inside the workspace"
    );
}

#[test]
fn the_default_place_as_a_link_out_of_the_workspace_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join(".flowerbox")).unwrap();
    let outside = root.join("outside");
    write(
        &outside.join("p/skills/s/SKILL.md"),
        "---\ndescription: from outside\n---\n",
    );
    symlink(&outside, ws.join(DEFAULT_DIR)).unwrap();
    let p = load(&ws, &[], &[]);
    assert!(p.plugins.is_empty() && p.skills.is_empty());
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
}

//! Plugins end to end (issue 28): a repository carrying `.flowerbox/plugins/guard` with one
//! skill, one agent type and a `PreToolUse` hook that blocks `rm -rf`, run by the real binary
//! against the scripted model on a real Docker engine, under `once` and `go`. The model sees
//! the skill's description and reads the skill on demand; the coordinator dispatches the
//! plugin's agent type (narrowed to the worker's tools); the hook blocks the command from inside
//! the agent's container (its hostname and uid reach the model) and nothing of it runs on the
//! host.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "docker_support/mod.rs"]
mod docker_support;
mod flow_support;

use docker_support::{engine_ready as engine, Sweep};
use flow_support::model_support::tool_results;
use flow_support::{requests_with, Project, Ran, ScriptedModel};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Writes the plugin into `ws`; returns the host path its hook would touch if it ran on the
/// host.
fn plant_plugin(ws: &Path) -> PathBuf {
    let marker = format!("/tmp/fbx-plugin-hook-{}", uuid::Uuid::new_v4().simple());
    let root = ws.join(".flowerbox/plugins/guard");
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(".claude-plugin/plugin.json", r#"{"name": "guard"}"#);
    write(
        "skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: 部署说明:要部署时先读它\n---\nDEPLOY-STEPS: make ship\n",
    );
    write("skills/deploy/checklist.md", "CHECKLIST-BESIDE\n");
    write(
        "agents/cleaner.md",
        "---\nname: cleaner\ndescription: 清理临时文件\ntools: Read, Bash, Agent\n---\nPLUGIN-CLEANER-PROMPT\n",
    );
    // The blocking hook is a script beside hooks.json, run as Claude Code plugins do.
    write(
        "hooks/block.sh",
        &format!(
            "#!/bin/sh\ninput=$(cat)\ntouch {marker}\ncase \"$input\" in *'rm -rf'*) echo \"rm -rf 不许跑 host=$(hostname) uid=$(id -u) root=$CLAUDE_PLUGIN_ROOT\" >&2; exit 2;; esac\nexit 0\n"
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("hooks/block.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let hook = "\"${CLAUDE_PLUGIN_ROOT}\"/hooks/block.sh";
    write(
        "hooks/hooks.json",
        &json!({"hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]},
                           {"matcher": "Glob", "hooks": [{"type": "command", "command": "sleep 30", "timeout": 1}]},
                           {"matcher": "Read", "hooks": [{"type": "command", "command": "echo broken-hook >&2; exit 1"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": "echo \"SESSION-CONTEXT from $(hostname)\""}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "grep -q 照部署说明 && echo PROMPT-CONTEXT; exit 0"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": STOP_HOOK}]}]
        }})
        .to_string(),
    );
    std::fs::write(ws.join("victim"), "keep me").unwrap();
    PathBuf::from(marker)
}

/// Keeps the main agent going once: exit 2 while `stop_hook_active` is false.
const STOP_HOOK: &str = "case \"$(cat)\" in *'\"stop_hook_active\":false'*) echo 'STOP-REASON 先写一句总结' >&2; exit 2;; esac";

fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// A `go --no-goal` scenario whose coordinator dispatches the plugin's agent type `cleaner`,
/// which tries `rm -rf victim`.
fn cleaner_scenario() -> Value {
    let brief =
        "## 目标\n清理\n\n## 验收标准\n- victim 不见了\n\n## 边界\n无\n\n## 未知与假设\n无\n";
    json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": brief}]}]},
        {"role": "coordinator", "turns": [
            {"content": [tool("Agent", json!({"description": "清理", "prompt": "删掉 victim", "subagent_type": "cleaner"}))]},
            {"content": [{"type": "text", "text": "cleaner 被拦下了。"}]},
            {"content": [{"type": "text", "text": "总结:cleaner 被拦下了。"}]}
        ]},
        {"role": "worker", "prompt": "PLUGIN-CLEANER-PROMPT", "turns": [
            {"content": [tool("Bash", json!({"command": "rm -rf victim"}))]},
            {"content": [{"type": "text", "text": "结论:没删成\n依据:钩子拦下了 rm -rf\n产出:无\n未验证:无"}]}
        ]}
    ]})
}

/// The blocked Bash call's result says where the hook ran: not here, as the invoking user.
fn assert_blocked_in_container(results: &[(String, String, bool)], ran: &Ran) {
    let (_, text, is_error) = results
        .iter()
        .find(|(n, t, _)| n == "Bash" && t.contains("rm -rf 不许跑"))
        .unwrap_or_else(|| panic!("no blocked Bash result: {results:?}\n{ran:?}"));
    assert!(is_error, "{text}");
    assert!(text.contains("PreToolUse"), "{text}");
    let host = nix::unistd::gethostname().unwrap();
    let hostname = text
        .split("host=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(!hostname.is_empty());
    assert_ne!(hostname, host.to_string_lossy(), "the hook ran on the host");
    assert!(
        text.contains(&format!("uid={}", nix::unistd::getuid().as_raw())),
        "{text}"
    );
    // Shown on screen.
    let screen = format!("{}\n{}", ran.out, ran.err);
    assert!(screen.contains("钩子拦下了 Bash"), "{screen}");
}

#[test]
fn once_sees_the_skill_reads_it_and_the_hook_blocks_rm_rf_in_the_container() {
    let test = "once_sees_the_skill_reads_it_and_the_hook_blocks_rm_rf_in_the_container";
    if !engine(test) {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let marker = plant_plugin(&p.ws);
    let skill = p.ws.join(".flowerbox/plugins/guard/skills/deploy/SKILL.md");
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("Skill", json!({"skill": "deploy"})),
                     tool("Skill", json!({"skill": "guard:deploy", "file": "checklist.md"})),
                     tool("Bash", json!({"command": "rm -rf victim"})),
                     tool("Bash", json!({"command": "echo fine"})),
                     tool("Glob", json!({"pattern": "victim"})),
                     tool("Read", json!({"file_path": p.ws.join("victim").display().to_string()})),
                     tool("Bash", json!({"command": format!("echo changed >> {}", skill.display())})),
                     tool("Bash", json!({"command": format!("mkdir -p {}/.flowerbox/plugins/planted", p.ws.display())}))]},
        {"content": [{"type": "text", "text": "看过了"}]},
        {"content": [{"type": "text", "text": "总结:看过了"}]}
    ]}]}));
    let r = p.run_in(
        "docker",
        &model,
        &["once", "-t", "Read,Bash,Glob", "照部署说明清理"],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let reqs = model.recorded();
    // The skill's name and description are in the system prompt; the body is not.
    let system = reqs[0]["system"].to_string();
    assert!(
        system.contains("deploy") && system.contains("部署说明:要部署时先读它"),
        "{system}"
    );
    assert!(!system.contains("DEPLOY-STEPS"), "{system}");
    assert!(tool_names(&reqs[0]).contains(&"Skill".to_string()));
    let results = tool_results(&reqs);
    let skills: Vec<_> = results.iter().filter(|(n, _, _)| n == "Skill").collect();
    assert!(
        skills[0].1.contains("DEPLOY-STEPS") && !skills[0].2,
        "{skills:?}"
    );
    assert!(skills[0].1.contains("checklist.md"), "{skills:?}");
    assert!(
        skills[1].1.contains("CHECKLIST-BESIDE") && !skills[1].2,
        "{skills:?}"
    );
    assert_blocked_in_container(&results, &r);
    assert!(
        results
            .iter()
            .any(|(n, t, e)| n == "Bash" && t.contains("fine") && !e),
        "{results:?}"
    );
    assert_eq!(
        std::fs::read_to_string(p.ws.join("victim")).unwrap(),
        "keep me"
    );
    assert!(!marker.exists(), "the hook ran on the host");
    // SessionStart and UserPromptSubmit print into the first prompt, from the container.
    let first = reqs[0]["messages"][0].to_string();
    assert!(first.contains("PROMPT-CONTEXT"), "{first}");
    let host = nix::unistd::gethostname().unwrap();
    let from = first
        .split("SESSION-CONTEXT from ")
        .nth(1)
        .unwrap_or_else(|| panic!("{first}"));
    assert!(!from.starts_with(&*host.to_string_lossy()), "{first}");
    // Stop kept it going once with its reason; the second stop was let through.
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert!(reqs[2].to_string().contains("STOP-REASON 先写一句总结"));
    assert!(r.out.contains("Stop 钩子不让它停"), "{r:?}");
    // A hook that times out or fails is shown and never blocks.
    for (name, needle) in [("Glob", "victim"), ("Read", "keep me")] {
        assert!(
            results
                .iter()
                .any(|(n, t, e)| n == name && t.contains(needle) && !e),
            "{name}: {results:?}"
        );
    }
    let screen = format!("{}\n{}", r.out, r.err);
    assert!(
        screen.contains("PreToolUse 钩子出错了") && screen.contains("超时"),
        "{screen}"
    );
    assert!(screen.contains("退出码 1:broken-hook"), "{screen}");
    // The plugin file an agent changed is named at the end of the run.
    let screen = format!("{}\n{}", r.out, r.err);
    assert!(
        screen.contains("下次运行会读的配置被改了")
            && screen.contains("改了 ")
            && screen.contains("skills/deploy/SKILL.md"),
        "{screen}"
    );
    assert!(screen.contains("插件 新增 planted"), "{screen}");
}

#[test]
fn go_dispatches_the_plugin_agent_type_and_its_rm_rf_is_blocked_in_its_container() {
    let test = "go_dispatches_the_plugin_agent_type_and_its_rm_rf_is_blocked_in_its_container";
    if !engine(test) {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let marker = plant_plugin(&p.ws);
    let model = ScriptedModel::start(&cleaner_scenario());
    let r = p.run_in(
        "docker",
        &model,
        &["go", "--timeout", "0", "--no-goal", "清理"],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    // The coordinator is offered the plugin's agent type, and sees the skills.
    let coord = &requests_with(&model, "你是协调者")[0];
    let agent_tool = coord["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Agent")
        .unwrap()
        .to_string();
    assert!(agent_tool.contains("cleaner: 清理临时文件"), "{agent_tool}");
    assert!(coord["system"].to_string().contains("部署说明"));
    // The worker got the type's prompt before the worker rules, and only the worker's tools
    // among those it asked for (Agent is not a worker's), never Write, which it did not ask for.
    let worker = requests_with(&model, "PLUGIN-CLEANER-PROMPT");
    assert!(
        !worker.is_empty(),
        "the plugin's agent type never ran: {r:?}"
    );
    let mut tools = tool_names(&worker[0]);
    tools.sort();
    // TaskOutput and TaskStop come with a Bash that may run in the background.
    assert_eq!(tools, ["Bash", "Read", "Skill", "TaskOutput", "TaskStop"]);
    assert_blocked_in_container(&tool_results(&worker), &r);
    assert_eq!(
        std::fs::read_to_string(p.ws.join("victim")).unwrap(),
        "keep me"
    );
    assert!(!marker.exists(), "the hook ran on the host");
}

#[test]
fn doctor_lists_what_loaded_and_what_did_not_with_the_reason() {
    let p = Project::new();
    plant_plugin(&p.ws);
    std::fs::write(
        p.ws.join(".flowerbox/plugins/guard/agents/vague.md"),
        "no front matter",
    )
    .unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mine = outside.path().join("mine");
    std::fs::create_dir_all(mine.join("skills/notes")).unwrap();
    std::fs::write(
        mine.join("skills/notes/SKILL.md"),
        "---\ndescription: 记笔记\n---\n",
    )
    .unwrap();
    let model = ScriptedModel::start(&json!({"agents": []}));
    let mut c = p.command_in("host", &model, &["--plugin-dir"]);
    c.arg(&mine).arg("doctor");
    let r = flow_support::finish(c.spawn().unwrap());
    let out = format!("{}\n{}", r.out, r.err);
    assert!(
        out.contains("插件 guard(")
            && out.contains("技能 deploy")
            && out.contains("agent 类型 cleaner")
            && out.contains("PreToolUse(Bash)"),
        "{out}"
    );
    assert!(
        out.contains("插件 mine(") && out.contains("技能 notes"),
        "{out}"
    );
    assert!(
        out.contains("vague.md") && out.contains("front matter"),
        "{out}"
    );
}

#[test]
fn with_sandbox_host_no_hook_runs_and_the_run_says_so() {
    let p = Project::new();
    let marker = plant_plugin(&p.ws);
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("Bash", json!({"command": "echo on-host"}))]},
        {"content": [{"type": "text", "text": "好了"}]}
    ]}]}));
    let r = p.run_in("host", &model, &["once", "-t", "Read,Bash", "看一眼"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let screen = format!("{}\n{}", r.out, r.err);
    assert!(
        screen.contains("--sandbox host:没有容器,插件的钩子这次一个都不跑"),
        "{screen}"
    );
    assert_eq!(
        screen
            .matches("没有自己的容器,插件的钩子不在它身上跑")
            .count(),
        1,
        "{screen}"
    );
    assert!(!marker.exists(), "a hook ran on the host");
    // No SessionStart output reached the model either.
    assert!(!model.recorded()[0].to_string().contains("SESSION-CONTEXT"));
}

#[test]
fn with_isolate_the_workers_hook_runs_from_its_worktrees_copy_of_the_plugin() {
    let test = "with_isolate_the_workers_hook_runs_from_its_worktrees_copy_of_the_plugin";
    if !engine(test) {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let marker = plant_plugin(&p.ws);
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&p.ws)
            .env("HOME", &p.home)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.name", "Test User"]);
    git(&["config", "user.email", "test@example.invalid"]);
    std::fs::write(p.ws.join(".gitignore"), "runs/\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "plugin"]);
    let model = ScriptedModel::start(&cleaner_scenario());
    let r = p.run_in(
        "docker",
        &model,
        &["go", "--isolate", "--timeout", "0", "--no-goal", "清理"],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let worker = requests_with(&model, "PLUGIN-CLEANER-PROMPT");
    let results = tool_results(&worker);
    assert_blocked_in_container(&results, &r);
    let (_, text, _) = results.iter().find(|(n, _, _)| n == "Bash").unwrap();
    let root = text.split("root=").nth(1).unwrap().trim();
    assert!(
        root.ends_with(".flowerbox/plugins/guard") && !root.starts_with(&*p.ws.to_string_lossy()),
        "the worker's hook should run from its worktree's copy: {root}"
    );
    assert_eq!(
        std::fs::read_to_string(p.ws.join("victim")).unwrap(),
        "keep me"
    );
    assert!(!marker.exists(), "the hook ran on the host");
}

#[test]
fn a_plugin_dir_outside_the_workspace_is_mounted_read_only_so_its_hook_scripts_run() {
    let test = "a_plugin_dir_outside_the_workspace_is_mounted_read_only_so_its_hook_scripts_run";
    if !engine(test) {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let outside = tempfile::tempdir().unwrap();
    let own = outside.path().canonicalize().unwrap().join("own plugin");
    std::fs::create_dir_all(own.join("hooks")).unwrap();
    std::fs::write(
        own.join("hooks/deny.sh"),
        "#!/bin/sh\ncase \"$(cat)\" in *forbidden*) echo \"outside-plugin host=$(hostname) uid=$(id -u)\" >&2; exit 2;; esac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        own.join("hooks/deny.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        own.join("hooks/hooks.json"),
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "\"${CLAUDE_PLUGIN_ROOT}/hooks/deny.sh\""}]}]}})
        .to_string(),
    )
    .unwrap();
    let planted = own.join("planted");
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("Bash", json!({"command": "echo forbidden"})),
                     tool("Bash", json!({"command": format!("touch '{}'", planted.display())}))]},
        {"content": [{"type": "text", "text": "好了"}]}
    ]}]}));
    let own_arg = own.to_string_lossy().into_owned();
    let r = p.run_in(
        "docker",
        &model,
        &["--plugin-dir", &own_arg, "once", "-t", "Read,Bash", "试试"],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let results = model.tool_results();
    let (_, text, is_error) = results
        .iter()
        .find(|(n, t, _)| n == "Bash" && t.contains("outside-plugin"))
        .unwrap_or_else(|| panic!("{results:?}\n{r:?}"));
    assert!(is_error, "{text}");
    let host = nix::unistd::gethostname().unwrap();
    assert!(
        !text.contains(&format!("host={} ", host.to_string_lossy())),
        "{text}"
    );
    // Read-only for the agent.
    assert!(
        !planted.exists(),
        "an agent wrote into the plugin directory"
    );
}

#[test]
fn a_user_prompt_submit_block_stops_the_step_and_post_tool_use_tells_the_model() {
    let test = "a_user_prompt_submit_block_stops_the_step_and_post_tool_use_tells_the_model";
    if !engine(test) {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let root = p.ws.join(".flowerbox/plugins/gate");
    std::fs::create_dir_all(root.join("hooks")).unwrap();
    std::fs::write(
        root.join("hooks/hooks.json"),
        json!({"hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command",
                "command": "if grep -q 禁止; then echo 'prompt refused' >&2; exit 2; fi"}]}],
            "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
                "command": "grep -q '\"tool_response\":\"seen' && { echo 'post-check: output noted' >&2; exit 2; }; exit 0"}]}]
        }})
        .to_string(),
    )
    .unwrap();
    // A blocked prompt never reaches the model, and the step fails saying why.
    let model = ScriptedModel::start(&json!({"agents": []}));
    let r = p.run_in("docker", &model, &["once", "-t", "Read,Bash", "做禁止的事"]);
    assert_ne!(r.code(), 0, "{r:?}");
    let screen = format!("{}\n{}", r.out, r.err);
    assert!(screen.contains("prompt refused"), "{screen}");
    assert!(model.recorded().is_empty(), "the model was asked");
    // PostToolUse exit 2: the call ran, and the model reads the hook's reason with its result.
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("Bash", json!({"command": "echo seen"}))]},
        {"content": [{"type": "text", "text": "好了"}]}
    ]}]}));
    let r = p.run_in("docker", &model, &["once", "-t", "Read,Bash", "看一眼"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let results = model.tool_results();
    let (_, text, is_error) = &results[0];
    assert!(
        !is_error && text.contains("seen") && text.contains("post-check: output noted"),
        "{results:?}"
    );
}

//! Running a plugin's hook commands: always through the agent's own [`Sandbox`] (its
//! container: its mounts, uid, seccomp and egress policy), never as a host process. The caller
//! decides whether the agent has a container at all (an agent without one gets no hooks).
//!
//! Claude Code's contract: the event's JSON on stdin (`session_id`, `cwd`, `hook_event_name`,
//! `tool_name`, `tool_input`, …), `CLAUDE_PROJECT_DIR` and `CLAUDE_PLUGIN_ROOT` in the
//! environment; exit 0 proceeds (stdout may be JSON), exit 2 blocks with stderr as the reason,
//! anything else (and a timeout) is a hook error that is shown and logged but never blocks.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

use super::parse::{outcome, HookOutcome};
use super::Hook;
use crate::sandbox::{AgentBox, ExecRequest, Sandbox};

/// Environment variable carrying the event's JSON into the container (piped to the hook's
/// stdin there).
const INPUT_VAR: &str = "FLOWERBOX_HOOK_INPUT";
/// Environment variable carrying the hook's command.
const COMMAND_VAR: &str = "FLOWERBOX_HOOK_COMMAND";
/// Largest JSON passed (an environment string is capped at 128 KiB by the kernel): longer
/// string values of the tool input are cut.
const INPUT_CAP: usize = 96 * 1024;
/// Output of a hook kept.
const OUTPUT_CAP: usize = 16 * 1024;

/// One hook's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    /// The plugin it belongs to.
    pub plugin: String,
    /// Its command.
    pub command: String,
    /// What it said.
    pub outcome: HookOutcome,
}

/// Where the agent of `abox` sees the plugin at `root` (`CLAUDE_PLUGIN_ROOT`): through the
/// mount that holds it (the most specific), else, for a plugin of `workspace` and an agent
/// working in its own worktree, the same place in that worktree when it is there; else `root`
/// as it is (a command using it then fails, and the hook error is shown).
pub fn plugin_root_in(root: &Path, workspace: &Path, abox: &AgentBox) -> PathBuf {
    let held = abox
        .mounts
        .iter()
        .filter(|m| root.starts_with(&m.host))
        .max_by_key(|m| m.host.components().count());
    if let Some(m) = held {
        if let Ok(rel) = root.strip_prefix(&m.host) {
            return m.inside.join(rel);
        }
    }
    if let Ok(rel) = root.strip_prefix(workspace) {
        let mapped = abox.workdir.join(rel);
        if mapped.is_dir() {
            return mapped;
        }
    }
    root.to_path_buf()
}

/// Runs `hooks` one after another in `sandbox` with `input` (the event's JSON without the
/// common fields, which are added here); stops at the first block. `workspace` is the run's
/// (see [`plugin_root_in`]).
pub async fn run(
    hooks: &[&Hook],
    event: super::HookEvent,
    mut input: serde_json::Map<String, Value>,
    session: &str,
    workspace: &Path,
    sandbox: &dyn Sandbox,
    cancel: &CancellationToken,
) -> Vec<HookResult> {
    let cwd = sandbox.agent_box().workdir.clone();
    input.insert("session_id".into(), Value::String(session.into()));
    input.insert("transcript_path".into(), Value::String(String::new()));
    input.insert("cwd".into(), Value::String(cwd.display().to_string()));
    input.insert(
        "hook_event_name".into(),
        Value::String(event.as_str().into()),
    );
    let json = bounded_json(Value::Object(input));
    let mut out = Vec::new();
    for hook in hooks {
        let root = plugin_root_in(&hook.root, workspace, sandbox.agent_box());
        let result = run_one(hook, &root, &json, &cwd, sandbox, cancel).await;
        let blocked = matches!(result, HookOutcome::Block { .. });
        if let HookOutcome::Error { why } = &result {
            tracing::warn!(plugin = %hook.plugin, command = %hook.spec.command, "hook failed: {why}");
        }
        out.push(HookResult {
            plugin: hook.plugin.clone(),
            command: hook.spec.command.clone(),
            outcome: result,
        });
        if blocked {
            break;
        }
    }
    out
}

async fn run_one(
    hook: &Hook,
    root: &Path,
    json: &str,
    cwd: &Path,
    sandbox: &dyn Sandbox,
    cancel: &CancellationToken,
) -> HookOutcome {
    let req = ExecRequest {
        // The pipeline's status is the hook's: `eval` runs the command as written.
        command: format!("printf '%s' \"${INPUT_VAR}\" | {{ eval \"${COMMAND_VAR}\"; }}"),
        cwd: cwd.to_path_buf(),
        env: vec![
            (INPUT_VAR.into(), json.to_string()),
            (COMMAND_VAR.into(), hook.spec.command.clone()),
            ("CLAUDE_PROJECT_DIR".into(), cwd.display().to_string()),
            ("CLAUDE_PLUGIN_ROOT".into(), root.display().to_string()),
        ],
        timeout: hook.spec.timeout,
        output_cap: OUTPUT_CAP,
        spill_dir: None,
        cancel: cancel.child_token(),
    };
    match sandbox.exec(req).await {
        Ok(o) if o.interrupted => HookOutcome::Error {
            why: "被打断".into(),
        },
        Ok(o) => outcome(o.exit_code, o.timed_out, &o.stdout, &o.stderr),
        Err(e) => HookOutcome::Error {
            why: format!("在容器里起不来:{e}"),
        },
    }
}

/// `value` as JSON of at most [`INPUT_CAP`] bytes: long strings of `tool_input` and
/// `tool_response` cut (marked) until it fits.
fn bounded_json(mut value: Value) -> String {
    let mut text = value.to_string();
    let mut cap = 16 * 1024;
    while text.len() > INPUT_CAP && cap >= 64 {
        for key in ["tool_input", "tool_response", "prompt"] {
            if let Some(v) = value.get_mut(key) {
                cut_strings(v, cap);
            }
        }
        text = value.to_string();
        cap /= 2;
    }
    text
}

fn cut_strings(v: &mut Value, cap: usize) {
    match v {
        Value::String(s) if s.len() > cap => {
            let mut end = cap;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push_str("…[flowerbox: cut]");
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cut_strings(x, cap)),
        Value::Object(o) => o.values_mut().for_each(|x| cut_strings(x, cap)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::sandbox::Mount;

    #[test]
    fn the_plugin_root_is_where_the_agent_sees_it() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let tree = t.path().join("trees/worker-1");
        std::fs::create_dir_all(tree.join(".flowerbox/plugins/p")).unwrap();
        let abox = |mounts: Vec<Mount>, workdir: &Path| AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts,
            masked: Vec::new(),
            workdir: workdir.to_path_buf(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        let root = ws.join(".flowerbox/plugins/p");
        // Mounted at its own path (the coordinator, `once`): as it is.
        let b = abox(vec![Mount::same(&ws, false)], &ws);
        assert_eq!(plugin_root_in(&root, &ws, &b), root);
        // Shown elsewhere: where the container sees it.
        let b = abox(
            vec![Mount::shadow(&ws, "/inside", true)],
            Path::new("/inside"),
        );
        assert_eq!(
            plugin_root_in(&root, &ws, &b),
            Path::new("/inside/.flowerbox/plugins/p")
        );
        // A worker in its worktree: the worktree's copy.
        let b = abox(vec![Mount::same(&tree, false)], &tree);
        assert_eq!(
            plugin_root_in(&root, &ws, &b),
            tree.join(".flowerbox/plugins/p")
        );
        // A --plugin-dir nobody mounts: as it is.
        let own = t.path().join("mine");
        assert_eq!(plugin_root_in(&own, &ws, &b), own);
    }

    #[test]
    fn a_huge_tool_input_is_cut_to_fit_an_environment_string() {
        let big = "x".repeat(1024 * 1024);
        let json = bounded_json(serde_json::json!({
            "tool_name": "Write",
            "tool_input": {"file_path": "/w/a", "content": big}
        }));
        assert!(json.len() <= INPUT_CAP, "{}", json.len());
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["tool_input"]["file_path"], "/w/a");
        assert!(v["tool_input"]["content"]
            .as_str()
            .unwrap()
            .ends_with("[flowerbox: cut]"));
    }
}

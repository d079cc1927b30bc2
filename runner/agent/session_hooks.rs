//! A session's plugin parts: the worker types and skills a spec gains from the run's plugins,
//! and the `PreToolUse` / `PostToolUse` hooks around each tool call. Hook commands run only in
//! the agent's own container (`plugin::hooks`); an agent without one (no command tools, or
//! `--sandbox host`) gets no hooks, and is told so once on screen.

use serde_json::{Map, Value};
use std::sync::Arc;

use super::super::event::EventKind;
use super::super::roles;
use super::super::spec::AgentSpec;
use super::super::tools::{ToolContext, SKILL_TOOL};
use super::AgentRun;
use crate::model::{ToolCall, ToolName};
use crate::plugin::hooks::HookResult;
use crate::plugin::parse::HookOutcome;
use crate::plugin::{HookEvent, Plugins};
use crate::sandbox::{AgentBox, CommandsRun, Mount, Sandbox};
use std::path::Path;

/// `spec` with the plugins' agent types among its workers (when it dispatches) and the `Skill`
/// tool (when it can read); the system block listing the skills, if any.
pub(crate) fn with_plugins(mut spec: AgentSpec, plugins: &Plugins) -> (AgentSpec, Option<String>) {
    if spec.has(ToolName::Agent) && !plugins.agents.is_empty() {
        let mut workers = super::super::dispatch::workers_of(&spec);
        for a in &plugins.agents {
            if !workers.iter().any(|w| w.kind == a.name) {
                workers.push(roles::plugin_worker(a));
            }
        }
        spec.workers = workers;
    }
    if plugins.skills.is_empty() || !spec.has(ToolName::Read) {
        return (spec, None);
    }
    if !spec.allows(SKILL_TOOL) {
        spec.tools.push(SKILL_TOOL.into());
    }
    let mut block = String::from(
        "插件提供的技能(任务和哪个技能的用途对得上,就先用 Skill 工具读它的完整说明,再照着做):",
    );
    for s in &plugins.skills {
        block.push_str(&format!(
            "\n- {}(插件 {}):{}",
            s.name, s.plugin, s.description
        ));
    }
    (spec, Some(block))
}

/// `abox` with each `--plugin-dir` outside the workspace that holds hooks mounted read-only at
/// its own path, so its hook commands find their scripts (`CLAUDE_PLUGIN_ROOT`) in the
/// container. Plugins in the workspace are reached through the agent's own mounts (a worker's
/// worktree holds its copy); nothing is mounted for an agent without hooks to run.
pub(crate) fn with_plugin_mounts(
    mut abox: AgentBox,
    plugins: &Plugins,
    workspace: &Path,
) -> AgentBox {
    for plugin in &plugins.plugins {
        if plugin.root.starts_with(workspace)
            || !plugins.hooks.iter().any(|h| h.root == plugin.root)
        {
            continue;
        }
        let Ok(root) = plugin.root.canonicalize() else {
            continue;
        };
        let covered = abox.mounts.iter().any(|m| root.starts_with(&m.host));
        if plugins.mounts.contains(&root) && !covered {
            abox.mounts.push(Mount::same(root, true));
        }
    }
    abox
}

impl AgentRun {
    /// Runs the hooks of `event` for `call` (with `response` for PostToolUse); the reason of
    /// the first block, if one blocked.
    pub(super) async fn tool_hooks(
        &self,
        event: HookEvent,
        call: &ToolCall,
        response: Option<&str>,
        ctx: &ToolContext,
    ) -> Option<String> {
        let plugins = self.rt.plugins.clone();
        let hooks = plugins.hooks_for(event, &call.name);
        if hooks.is_empty() {
            return None;
        }
        let sandbox = self.hook_sandbox(ctx).await?;
        let mut input = Map::new();
        input.insert("tool_name".into(), Value::String(call.name.clone()));
        input.insert("tool_input".into(), call.input.clone());
        if let Some(r) = response {
            input.insert("tool_response".into(), Value::String(r.to_string()));
        }
        let results = crate::plugin::hooks::run(
            &hooks,
            event,
            input,
            &self.session,
            &self.rt.config.workspace,
            sandbox.as_ref(),
            &ctx.cancel,
        )
        .await;
        self.said(event, &call.name, &results)
    }

    /// Runs the hooks of an event without a tool (`SessionStart`, `UserPromptSubmit`, `Stop`,
    /// `SubagentStop`): (what their stdout adds to the context, the reason of a block).
    pub(super) async fn event_hooks(
        &self,
        event: HookEvent,
        input: Map<String, Value>,
        ctx: &ToolContext,
    ) -> (Vec<String>, Option<String>) {
        let plugins = self.rt.plugins.clone();
        let hooks = plugins.hooks_for(event, "");
        if hooks.is_empty() {
            return (Vec::new(), None);
        }
        // A hook's command can read the spill files a resumed history points to, as a tool can.
        if let Err(e) = self.rt.store.spill_written() {
            self.rt.not_saved("会话", &e);
        }
        let Some(sandbox) = self.hook_sandbox(ctx).await else {
            return (Vec::new(), None);
        };
        let results = crate::plugin::hooks::run(
            &hooks,
            event,
            input,
            &self.session,
            &self.rt.config.workspace,
            sandbox.as_ref(),
            &ctx.cancel,
        )
        .await;
        let added = results
            .iter()
            .filter_map(|r| match &r.outcome {
                HookOutcome::Proceed { stdout } if !stdout.trim().is_empty() => {
                    Some(stdout.trim().to_string())
                }
                _ => None,
            })
            .collect();
        (added, self.said(event, "", &results))
    }

    /// Shows what the hooks said; the reason of a block.
    fn said(&self, event: HookEvent, tool: &str, results: &[HookResult]) -> Option<String> {
        for r in results {
            match &r.outcome {
                HookOutcome::Block { reason } => {
                    let what = match event {
                        HookEvent::SessionStart => "说".to_string(),
                        HookEvent::UserPromptSubmit => "拦下了提示".to_string(),
                        HookEvent::Stop | HookEvent::SubagentStop => "不让它停".to_string(),
                        HookEvent::PreToolUse | HookEvent::PostToolUse => format!("拦下了 {tool}"),
                    };
                    self.emit(EventKind::Warning {
                        text: format!(
                            "插件 {} 的 {} 钩子{what}:{reason}",
                            r.plugin,
                            event.as_str()
                        ),
                    });
                    return Some(reason.clone());
                }
                HookOutcome::Error { why } => self.emit(EventKind::Warning {
                    text: format!(
                        "插件 {} 的 {} 钩子出错了(没拦,照常继续):{why}",
                        r.plugin,
                        event.as_str()
                    ),
                }),
                HookOutcome::Proceed { .. } => {}
            }
        }
        None
    }

    /// The agent's container for its hooks; `None` (said once a run per role) when it has none.
    async fn hook_sandbox(&self, ctx: &ToolContext) -> Option<Arc<dyn Sandbox>> {
        let in_container = self.rt.sandboxes.commands_run() == CommandsRun::InContainer;
        if ctx.sandboxes.is_none() || !in_container {
            let first = self
                .rt
                .no_hooks_said
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(format!("{:?}", self.spec.role));
            if first {
                self.emit(EventKind::Warning {
                    text: format!(
                        "{} 没有自己的容器,插件的钩子不在它身上跑(钩子只在 agent 的容器里跑,从不在宿主机上)",
                        self.agent
                    ),
                });
            }
            return None;
        }
        match ctx.sandbox().await {
            Ok(s) => Some(s),
            Err(e) => {
                self.emit(EventKind::Warning {
                    text: format!("插件钩子跑不了({} 的容器起不来):{e}", self.agent),
                });
                None
            }
        }
    }
}

//! The `Agent` tool's dispatcher: runs a worker (subagent) one level down, in its place (its own
//! worktree with `--isolate`), and reports what it did and how its work was integrated.

use async_trait::async_trait;
use std::sync::{Arc, Mutex};

use super::event::EventKind;
use super::fanout::{ScopeClaim, Slot};
use super::place::{WorkerPlace, WorkerSandbox};
use super::result::{Meter, StepError};
use super::roles;
use super::runtime::Runtime;
use super::scope::WriteScope;
use super::session_loop::{AgentRun, LoopEnd};
use super::spec::{AgentSpec, WorkerDef};
use super::speculate::{undo, Prepared, Speculations};
use super::tools::{DispatchRequest, Dispatcher, ToolContext, ToolError};
use crate::model::price::Cost;
use crate::model::{ToolCall, ToolName};
use crate::sandbox::{AgentBox, CommandsRun};
use crate::session::SessionMeta;

/// The workers an agent may dispatch; a general worker when none are declared.
pub(crate) fn workers_of(spec: &AgentSpec) -> Vec<WorkerDef> {
    if spec.workers.is_empty() {
        vec![roles::worker(
            "worker",
            "通用执行者:写代码、跑命令、做验证",
            "你负责实现。每改一处就跑一次验证,别攒到最后。",
        )]
    } else {
        spec.workers.clone()
    }
}

/// Runs workers for one agent's `Agent` tool.
pub(crate) struct SubDispatch {
    /// The runtime the workers run on.
    pub(crate) rt: Arc<Runtime>,
    /// The workers it may dispatch.
    pub(crate) workers: Vec<WorkerDef>,
    /// The dispatching agent's session (the workers' sessions' parent).
    pub(crate) parent_session: String,
    /// The dispatching agent.
    pub(crate) parent_agent: String,
    /// Its depth.
    pub(crate) parent_depth: u32,
    /// Its role.
    pub(crate) parent_role: crate::role::Role,
    /// What its workers spent, added to its own.
    pub(crate) children: Arc<Mutex<Cost>>,
    /// The step's running total.
    pub(crate) meter: Option<Arc<Meter>>,
    /// Workers prepared while the dispatching agent's message streamed, not yet dispatched.
    pub(crate) speculations: Speculations,
}

impl SubDispatch {
    fn place_note(&self, place: &super::place::WorkerPlace) -> String {
        place_note_for(&self.rt, place)
    }
}

/// Where a worker is, for the head of its first message: its working directory (its own
/// worktree and branch with `--isolate`, and where that branch goes), the main workspace and
/// the workbench. Kept out of the system prompt, which stays the same for every worker.
pub(crate) fn place_note_for(rt: &Runtime, place: &super::place::WorkerPlace) -> String {
    {
        let ws = rt.config.workspace.display();
        let mut lines = vec!["你的位置:".to_string()];
        match &place.branch {
            Some(branch) => {
                lines.push(format!(
                    "- 工作目录(Bash 的起点):{},这是你自己的 git worktree,分支 {branch}。",
                    place.workdir.display()
                ));
                lines.push(format!(
                    "- 只在这个 worktree 里改文件。你结束时,runner 把这里的改动提交到分支 {branch},\
                     再合并进主工作区 {ws} 当前的分支;主工作区本身你改不了。"
                ));
            }
            None => lines.push(format!(
                "- 工作目录(Bash 的起点):{},即主工作区,其他执行者也在这里改文件。",
                place.workdir.display()
            )),
        }
        if let Some(note) = &place.note {
            lines.push(format!("- {note}"));
        }
        if let Some(wb) = &rt.workbench {
            lines.push(format!(
                "- 工作台:{}(scripts/ 放脚本,artifacts/ 放长产出,notes/ 放记录;所有 agent 共享)。",
                wb.root().display()
            ));
        }
        lines.join("\n")
    }
}

/// What a scoped worker is told about its scope (in its first message).
fn scope_note(scope: &WriteScope) -> String {
    format!(
        "写权限范围:你只能写 {}(相对工作目录);其余文件只读,写了会报 Read-only file system。\
         范围外要改的,在报告里说清楚,交给派你的人。",
        scope.describe()
    )
}

impl SubDispatch {
    /// The worker type `req` names (the first one when it names none).
    fn worker_def(&self, req: &DispatchRequest) -> Result<&WorkerDef, ToolError> {
        match &req.subagent_type {
            Some(k) => self.workers.iter().find(|w| &w.kind == k).ok_or_else(|| {
                ToolError::Failed(format!(
                    "没有叫 {k} 的执行者;可用:{}",
                    self.workers
                        .iter()
                        .map(|w| w.kind.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }),
            None => Ok(&self.workers[0]),
        }
    }

    /// A warning line of the dispatching agent.
    fn warn(&self, text: String) {
        self.rt.emit(
            &self.parent_agent,
            self.parent_role,
            self.parent_depth,
            EventKind::Warning { text },
        );
    }

    /// Workers whose write scopes overlap never run at once (`scope`): the later one waits,
    /// before it takes a slot, so no worker holding a slot waits for a scope. Only depth 0
    /// claims. The claim, and what the coordinator is told when it waited.
    async fn claim_scope(
        &self,
        agent: &str,
        scope: Option<WriteScope>,
    ) -> (Option<ScopeClaim>, String) {
        if self.parent_depth != 0 {
            return (None, String::new());
        }
        let claim = self
            .rt
            .workers
            .claim(scope, || {
                self.warn(format!(
                    "{agent} 的写权限范围和正在跑的执行者重叠,先等它们结束再开工;\
                     之后再等不另说"
                ))
            })
            .await;
        let waited = claim.waited.map(|w| {
            format!(
                "\n\n(执行者 {agent} 先等了 {} 秒才开工:它的写权限范围和正在跑的执行者重叠,\
                 重叠的执行者不同时跑;不写 writes 的执行者和任何有范围的都算重叠。)",
                w.as_secs()
            )
        });
        (Some(claim), waited.unwrap_or_default())
    }

    /// Past the run's limit, a worker waits for a slot before anything is made for it
    /// (`fanout`); only depth 0 takes slots, so no dispatch waits on its own parent. The slot,
    /// and what the coordinator is told when it queued.
    async fn take_slot(&self, agent: &str) -> (Option<Slot>, String) {
        if self.parent_depth != 0 {
            return (None, String::new());
        }
        let limit = self.rt.workers.limit();
        let slot = self
            .rt
            .workers
            .acquire(|| {
                self.warn(format!(
                    "同时最多跑 {limit} 个执行者(--max-workers),\
                     {agent} 先排队,有空位再开工;之后再排队不另说"
                ))
            })
            .await;
        let queued = slot.waited.map(|w| {
            format!(
                "\n\n(执行者 {agent} 先排队等了 {} 秒才开工:同时最多跑 {limit} 个执行者,\
                 多派的按顺序等空位。)",
                w.as_secs()
            )
        });
        (Some(slot), queued.unwrap_or_default())
    }

    /// The worker's run in a new session of its own, in its place, and its sandbox's spec.
    fn worker_run(
        &self,
        def: &WorkerDef,
        agent: &str,
        place: &WorkerPlace,
        scope: Option<&WriteScope>,
    ) -> Result<(AgentRun, AgentBox), ToolError> {
        let meta = SessionMeta {
            agent: agent.to_string(),
            role: def.spec.role,
            step: None,
            parent: Some(self.parent_session.clone()),
            run: self.rt.config.run_id.clone(),
        };
        let session = self
            .rt
            .store
            .create(&meta)
            .map_err(|e| ToolError::Failed(StepError::from(e).to_string()))?;
        let abox = worker_box(&self.rt, def, agent, place);
        self.rt.note_agent(agent);
        let run = AgentRun::new(
            self.rt.clone(),
            def.spec.clone(),
            agent.to_string(),
            self.parent_depth + 1,
            session,
            Vec::new(),
            abox.clone(),
        )
        .with_meter(self.meter.clone())
        .with_write_scope(scope.map(WriteScope::describe));
        Ok((run, abox))
    }
}

/// The place of worker `agent`, narrowed to its write scope.
async fn place_for(
    rt: &Runtime,
    agent: &str,
    scope: Option<&WriteScope>,
) -> Result<WorkerPlace, ToolError> {
    let mut place = rt
        .placement
        .prepare(agent)
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let Some(scope) = scope else {
        return Ok(place);
    };
    let workbench = rt.workbench.as_ref().map(|w| w.root().to_path_buf());
    let root = place.workdir.clone();
    if let Err(e) = super::scope::narrow(&root, scope, &mut place.mounts, workbench.as_deref()) {
        // The place goes back as a worker that never ran (its worktree, if any).
        let _ = rt.placement.finish(agent, &place, false, None).await;
        return Err(ToolError::InvalidInput(e.to_string()));
    }
    place.note = Some(match place.note.take() {
        Some(n) => format!("{n}\n- {}", scope_note(scope)),
        None => scope_note(scope),
    });
    Ok(place)
}

/// The box of worker `agent` of type `def` in `place`: what its sandbox is made for, the same
/// whether it is made at its dispatch or before ([`super::speculate`]).
fn worker_box(rt: &Runtime, def: &WorkerDef, agent: &str, place: &WorkerPlace) -> AgentBox {
    AgentBox {
        agent: agent.to_string(),
        role: def.spec.role,
        mounts: place.mounts.clone(),
        masked: rt.config.masked.clone(),
        workdir: place.workdir.clone(),
        policy: super::place::role_policy(def.spec.role),
    }
}

/// Prepares worker `agent` of type `def` before its dispatch: its place, then its container's
/// start (when it runs commands), left running for the worker to join.
pub(super) async fn prepare_early(
    rt: Arc<Runtime>,
    def: WorkerDef,
    agent: String,
    scope: Option<WriteScope>,
) -> Result<Prepared, ToolError> {
    let place = place_for(&rt, &agent, scope.as_ref()).await?;
    let abox = worker_box(&rt, &def, &agent, &place);
    let started = rt.runs_commands(&def.spec).then(|| {
        let (factory, spec) = (rt.sandboxes.clone(), abox.clone());
        tokio::spawn(async move { factory.sandbox(&spec).await })
    });
    Ok(Prepared {
        agent,
        place,
        started,
    })
}

/// What the coordinator is told of a worker that ended with `end` (before the integration's
/// report); `Err` when it failed in a way that leaves nothing to report.
fn worker_report(
    agent: &str,
    end: &LoopEnd,
    run: &AgentRun,
    integration: Option<&str>,
) -> Result<String, ToolError> {
    Ok(match end {
        LoopEnd::Done => run.final_text(),
        LoopEnd::Interrupted => {
            // Where its half-done work went (its branch, the worktree kept) is said too.
            let kept = integration.map(|i| format!("\n\n{i}")).unwrap_or_default();
            return Err(ToolError::Failed(format!(
                "执行者 {agent} 被打断了,半成品没有回报{kept}"
            )));
        }
        LoopEnd::HandoffDue { .. } | LoopEnd::CompactDue => {
            return Err(ToolError::Failed(format!(
                "执行者 {agent} 的上下文满了,没做完:{}",
                run.final_text()
            )))
        }
        LoopEnd::Failed(error) => format!(
            "执行者 {agent} 没做完:{error}\n它最后说:{}",
            run.final_text()
        ),
        LoopEnd::Stopped(error) => format!(
            "执行者 {agent} 没做完:{error}\n它最后说:{}",
            run.final_text()
        ),
    })
}

#[async_trait]
impl Dispatcher for SubDispatch {
    fn speculate(&self, call: &ToolCall) {
        if !ToolName::Agent.is(&call.name)
            || self.rt.sandboxes.commands_run() != CommandsRun::InContainer
        {
            return;
        }
        let Ok(req) = serde_json::from_value::<DispatchRequest>(call.input.clone()) else {
            return;
        };
        let Ok(def) = self.worker_def(&req) else {
            return;
        };
        let scope = match &req.writes {
            Some(w) => match WriteScope::parse(w) {
                Ok(s) => Some(s),
                Err(_) => return,
            },
            None => None,
        };
        if req.prompt.trim().is_empty()
            || (self.parent_depth == 0
                && !self
                    .rt
                    .workers
                    .would_start_now(scope.as_ref(), &self.speculations.scopes()))
        {
            return;
        }
        let next = self
            .rt
            .next_worker(def.spec.role, &def.kind, req.writes.as_ref());
        let agent = next.agent;
        let task = match next.warm {
            Some(warm) => warm,
            None => {
                let (rt, def, agent, scope) =
                    (self.rt.clone(), def.clone(), agent.clone(), scope.clone());
                let stale = next.stale;
                tokio::spawn(async move {
                    if let Some(stale) = stale {
                        undo(&rt, stale).await;
                    }
                    prepare_early(rt, def, agent, scope).await
                })
            }
        };
        self.speculations
            .hold(&def.kind, req.writes.clone(), scope, agent, task);
    }

    async fn settle(&self) {
        self.speculations.settle(&self.rt).await;
    }

    async fn dispatch(
        &self,
        _parent: &ToolContext,
        req: DispatchRequest,
    ) -> Result<String, ToolError> {
        let def = self.worker_def(&req)?;
        let scope = match &req.writes {
            Some(w) => {
                Some(WriteScope::parse(w).map_err(|e| ToolError::InvalidInput(e.to_string()))?)
            }
            None => None,
        };
        // Prepared while the message streamed, or while the run clarified: its name and place
        // are the worker's, its container the one already starting.
        let (agent, early) = match self.speculations.take(&def.kind, req.writes.as_ref()) {
            Some((agent, task)) => (agent, Some(task)),
            None => {
                let next = self
                    .rt
                    .next_worker(def.spec.role, &def.kind, req.writes.as_ref());
                if let Some(stale) = next.stale {
                    undo(&self.rt, stale).await;
                }
                (next.agent, next.warm)
            }
        };
        // Scope and slot first, in the calls' order, as without a preparation: a prepared
        // worker awaiting its place must not let a later call take its slot.
        let (claim, scope_waited) = self.claim_scope(&agent, scope.clone()).await;
        let (slot, queued) = self.take_slot(&agent).await;
        let early = match early {
            Some(task) => match task.await {
                Ok(prepared) => Some(prepared?),
                // The preparation died: the dispatch makes the place itself.
                Err(_) => None,
            },
            None => None,
        };
        let place = match early {
            Some(p) => p.place,
            None => place_for(&self.rt, &agent, scope.as_ref()).await?,
        };
        self.rt.emit(
            &self.parent_agent,
            self.parent_role,
            self.parent_depth,
            EventKind::Dispatch {
                child: agent.clone(),
                description: req.description.clone(),
            },
        );
        let (mut run, abox) = self.worker_run(def, &agent, &place, scope.as_ref())?;
        let prompt = format!("{}\n\n---\n\n{}", self.place_note(&place), req.prompt);
        let end = run.turn(&prompt).await;
        *self.children.lock().unwrap_or_else(|e| e.into_inner()) += run.spend();
        let ok = end == LoopEnd::Done;
        let sandbox = WorkerSandbox {
            factory: self.rt.sandboxes.as_ref(),
            spec: &abox,
        };
        let integration = self
            .rt
            .placement
            .finish(&agent, &place, ok, Some(sandbox))
            .await;
        for text in self.rt.placement.take_notices() {
            self.rt.emit(
                "runner",
                crate::role::Role::Coordinator,
                0,
                EventKind::Warning { text },
            );
        }
        let mut text = worker_report(&agent, &end, &run, integration.as_deref())?;
        if let Some(i) = integration {
            text.push_str("\n\n");
            text.push_str(&i);
        }
        text.push_str(&scope_waited);
        text.push_str(&queued);
        drop(slot);
        drop(claim);
        if ok {
            Ok(format!("[{agent}]\n{text}"))
        } else {
            Err(ToolError::Failed(text))
        }
    }
}

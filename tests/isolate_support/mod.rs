//! Shared setup of the isolation tests on the real engine: a git workspace (odd name, repo
//! identity configured), its workbench outside the repository, a runtime over the Docker
//! sandbox, the worktree placement and the scripted model, torn down in `Drop`.
#![allow(dead_code)]

#[path = "../docker_support/mod.rs"]
pub mod docker_support;
#[path = "../model_support/mod.rs"]
pub mod model_support;
pub mod plain;
pub mod user_git;

use docker_support::{agent_image, run_id};
use flowerbox::agent::human::Absent;
use flowerbox::agent::{Event, EventKind, Placement, Runtime, RuntimeConfig, Workbench};
use flowerbox::isolate::{IsolateOptions, WorktreePlacement};
use flowerbox::record::manifest::Manifest;
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::session::SqliteSessionStore;
pub use flowerbox_testkit::git;
pub use model_support::ScriptedModel;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A repository at `<tmp>/wö rk space` with an identity in its own config (git inside the
/// containers sees the repository's config, not the host user's global one), `runs/` ignored,
/// and one commit: `a.txt` (`one two three`, a line each).
pub fn repo(dir: &Path) -> PathBuf {
    let ws = dir.canonicalize().unwrap().join("wö rk space");
    std::fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["config", "user.name", "Test User"]);
    git(&ws, &["config", "user.email", "test@example.invalid"]);
    std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "runs/\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    ws
}

/// One `--isolate` run: runtime, sandboxes, placement, model.
pub struct IsoRun {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub wb: PathBuf,
    pub run_id: String,
    pub model: ScriptedModel,
    pub rt: Arc<Runtime>,
    pub factory: Arc<DockerSandboxFactory>,
    pub placement: Arc<WorktreePlacement>,
    pub events: Arc<Mutex<Vec<Event>>>,
}

impl IsoRun {
    /// A run over a fresh repository; `scenario` is built from the workspace and workbench
    /// paths.
    pub async fn new(
        engine: &Engine,
        test: &str,
        scenario: impl FnOnce(&Path, &Path) -> Value,
    ) -> IsoRun {
        let dir = tempfile::tempdir().unwrap();
        let ws = repo(dir.path());
        Self::in_repo(engine, test, dir, ws, scenario).await
    }

    /// A run over the repository `ws` (inside `dir`).
    pub async fn in_repo(
        engine: &Engine,
        test: &str,
        dir: tempfile::TempDir,
        ws: PathBuf,
        scenario: impl FnOnce(&Path, &Path) -> Value,
    ) -> IsoRun {
        Self::in_repo_with_run(engine, test, dir, ws, |ws, wb, _| scenario(ws, wb)).await
    }

    /// [`IsoRun::in_repo`] whose scenario also gets the run id (branch and worktree names).
    pub async fn in_repo_with_run(
        engine: &Engine,
        test: &str,
        dir: tempfile::TempDir,
        ws: PathBuf,
        scenario: impl FnOnce(&Path, &Path, &str) -> Value,
    ) -> IsoRun {
        Self::build(engine, test, dir, ws, false, scenario).await
    }

    /// [`IsoRun::in_repo_with_run`] as the driver sets it up: the run directory `runs/` masked
    /// from every agent and planted repositories moved into `runs/quarantine/<run>`.
    pub async fn guarded(
        engine: &Engine,
        test: &str,
        dir: tempfile::TempDir,
        ws: PathBuf,
        scenario: impl FnOnce(&Path, &Path, &str) -> Value,
    ) -> IsoRun {
        Self::build(engine, test, dir, ws, true, scenario).await
    }

    async fn build(
        engine: &Engine,
        test: &str,
        dir: tempfile::TempDir,
        ws: PathBuf,
        guarded: bool,
        scenario: impl FnOnce(&Path, &Path, &str) -> Value,
    ) -> IsoRun {
        let image = agent_image(engine).await;
        let wb_path = Workbench::locate(&ws, true);
        let wb = Workbench::at(wb_path.clone()).ensure().unwrap();
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let run_id = run_id(test);
        let mut opts = DockerOptions::new(run_id.clone(), &ws);
        opts.image = Some(image);
        opts.show_progress = false;
        let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
        let mut iso = IsolateOptions::new(&ws, &wb_path);
        iso.exclude = vec![runs.clone()];
        let placement = Arc::new(WorktreePlacement::open(iso).expect("placement"));
        placement.bind_run(&run_id);
        let model = ScriptedModel::start(&scenario(&ws, &wb_path, &run_id));
        let provider = model.provider(model_support::fast());
        let mut cfg = RuntimeConfig::new(ws.clone(), "claude-sonnet-4-5".into(), run_id.clone());
        if guarded {
            guard(&mut cfg, &runs, &run_id);
        }
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let rt = Runtime::new(
            cfg,
            provider,
            Arc::new(SqliteSessionStore::open(runs.join("sessions.db")).unwrap()),
            factory.clone(),
            Some(wb),
            Arc::new(Absent),
            Arc::new(move |e| ev.lock().unwrap().push(e)),
        )
        .with_manifest(Arc::new(Manifest::new(
            runs.join("manifest.json"),
            run_id.clone(),
        )))
        .with_placement(placement.clone() as Arc<dyn Placement>);
        IsoRun {
            dir,
            ws,
            wb: wb_path,
            run_id,
            model,
            rt: Arc::new(rt),
            factory,
            placement,
            events,
        }
    }

    /// The warning lines shown so far.
    pub fn warnings(&self) -> Vec<String> {
        warnings(&self.events)
    }

    /// The end of the run as the driver does it: the step's containers released (the step-end
    /// sweep), every container removed, the final sweep, the worktrees closed and the kept
    /// ones swept. Returns the closing lines.
    pub async fn end_like_the_driver(&self) -> Vec<String> {
        use flowerbox::sandbox::SandboxFactory;
        self.rt.release_agents().await;
        self.factory.teardown().await.expect("teardown");
        self.rt.sweep_plants(&[]).await;
        let lines = self.placement.close();
        self.rt.sweep_plants(&self.placement.kept_worktrees()).await;
        lines
    }

    /// Tool results `(agent, tool, is_error, text)` in event order.
    pub fn results(&self) -> Vec<(String, String, bool, String)> {
        tool_results(&self.events.lock().unwrap())
    }

    /// The result `(is_error, text)` of the tool call with id `id`.
    pub fn result(&self, id: &str) -> (bool, String) {
        result(&self.events, id)
    }

    /// Results of `tool` called by `agent`.
    pub fn results_of(&self, agent: &str, tool: &str) -> Vec<(bool, String)> {
        results_of(&self.events.lock().unwrap(), agent, tool)
    }

    /// `(agent label, mounts as (path, read-write))` of every agent container of the run.
    pub async fn container_mounts(&self, engine: &Engine) -> Vec<(String, Vec<(String, bool)>)> {
        let mut out = Vec::new();
        for id in docker_support::run_containers(engine, &self.run_id).await {
            let c = engine
                .docker()
                .inspect_container(&id, None)
                .await
                .expect("inspect");
            let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
            let agent = labels.get("flowerbox.agent").cloned().unwrap_or_default();
            if agent == "pod" {
                continue;
            }
            let mounts = c
                .mounts
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m.typ.as_ref().map(|t| t.to_string()) == Some("bind".into()))
                .map(|m| (m.destination.unwrap_or_default(), m.rw.unwrap_or(false)))
                .collect();
            out.push((agent, mounts));
        }
        out.sort();
        out
    }
}

impl Drop for IsoRun {
    fn drop(&mut self) {
        docker_support::teardown_blocking(&self.factory);
    }
}

/// Tool results `(agent, tool, is_error, text)` among `events`, in order.
pub fn tool_results(events: &[Event]) -> Vec<(String, String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult {
                name,
                is_error,
                text,
                ..
            } => Some((e.agent.clone(), name.clone(), *is_error, text.clone())),
            _ => None,
        })
        .collect()
}

/// Results `(is_error, text)` of `tool` called by `agent` among `events`.
pub fn results_of(events: &[Event], agent: &str, tool: &str) -> Vec<(bool, String)> {
    tool_results(events)
        .into_iter()
        .filter(|(a, t, _, _)| a == agent && t == tool)
        .map(|(_, _, e, t)| (e, t))
        .collect()
}

/// The driver's guard of a run: the run directory `runs` masked from every agent and planted
/// repositories moved into `runs/quarantine/<run>`.
fn guard(cfg: &mut RuntimeConfig, runs: &Path, run_id: &str) {
    cfg.masked = vec![runs.to_path_buf()];
    cfg.masked_ids = flowerbox::fsroot::own::identity(runs).into_iter().collect();
    cfg.quarantine = Some(runs.join("quarantine").join(run_id));
}

/// The warning lines among `events`.
fn warnings(events: &Mutex<Vec<Event>>) -> Vec<String> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The result `(is_error, text)` of the tool call with id `id` among `events`.
fn result(events: &Mutex<Vec<Event>>, id: &str) -> (bool, String) {
    events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult {
                id: i,
                is_error,
                text,
                ..
            } if i == id => Some((*is_error, text.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for tool call {id}"))
}

/// The coordinator's run of `task` on `rt`; it must end well.
pub async fn coordinate(rt: &Arc<Runtime>, task: &str) {
    use flowerbox::agent::{roles, RunOptions};
    let r = rt
        .run(
            &roles::coordinator("协调者", "", vec![]),
            task,
            RunOptions::default(),
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
}

/// Judge round `n` of the step `干活` (`干活·判定#n`) on `rt`, the judge allowed to run
/// commands when `can_run`; it must end well.
pub async fn judge_round(rt: &Arc<Runtime>, n: u32, can_run: bool) {
    use flowerbox::agent::{roles, RunOptions};
    let judged = rt
        .run(
            &roles::judge("判定", "", can_run),
            "判定这一轮",
            RunOptions {
                step: Some(format!("干活·判定#{n}")),
                ..Default::default()
            },
        )
        .await;
    assert!(judged.ok, "{:?}", judged.error);
}

/// A `tool_use` block.
pub fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

/// A `text` block.
pub fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// A worker's four-part report.
pub const REPORT: &str =
    "## 结论\n做完了\n## 依据\ngit log 看到提交\n## 产出\n见分支\n## 未验证\n无";

/// Every file and directory under `root` whose owner is not `uid:gid`, as paths.
pub fn foreign_owned(root: &Path, uid: u32, gid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut bad = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.uid() != uid || md.gid() != gid {
                bad.push(format!(
                    "{} ({}:{})",
                    e.path().display(),
                    md.uid(),
                    md.gid()
                ));
            }
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    bad
}

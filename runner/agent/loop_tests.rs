//! Unit tests of the agent loop with an in-process fake provider, an in-memory session store and
//! the host sandbox. (The same behaviour over real HTTP is in `tests/agent_*.rs`.)

use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::event::{Event, EventKind};
use super::roles;
use super::runtime::{RunOptions, Runtime, RuntimeConfig};
use super::workbench::Workbench;
use crate::agent::human::Absent;
use crate::model::*;
use crate::sandbox::host::HostSandboxFactory;
use crate::testkit::{replay, MemStore};

/// Replays turns by agent-name prefix; the k-th turn is chosen by the number of assistant
/// messages in the request (like the scripted server).
struct Fake {
    turns: HashMap<String, Vec<Vec<ContentBlock>>>,
    seen: Mutex<Vec<Request>>,
}

#[async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn default_model(&self) -> &str {
        "fake-model"
    }
    async fn stream_turn(
        &self,
        req: &Request,
        _sink: EventSink<'_>,
        _c: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        self.seen.lock().unwrap().push(req.clone());
        let script = self
            .turns
            .iter()
            .find(|(p, _)| req.caller.agent.starts_with(p.as_str()))
            .map(|(_, t)| t.as_slice());
        replay(req, script, &req.caller.agent)
    }
}

fn tool(id: &str, name: &str, input: serde_json::Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    rt: Arc<Runtime>,
    fake: Arc<Fake>,
    events: Arc<Mutex<Vec<Event>>>,
}

fn setup(turns: Vec<(&str, Vec<Vec<ContentBlock>>)>) -> Setup {
    setup_with(turns, |_| {})
}

fn setup_with(
    turns: Vec<(&str, Vec<Vec<ContentBlock>>)>,
    adjust: impl FnOnce(&mut RuntimeConfig),
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let wb = Workbench::at(ws.join(".flower")).ensure().unwrap();
    let fake = Arc::new(Fake {
        turns: turns.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        seen: Mutex::new(vec![]),
    });
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let mut config = RuntimeConfig::new(
        ws.clone(),
        "fake-model".into(),
        "20260101-000000-abcdef".into(),
    );
    adjust(&mut config);
    let rt = Runtime::new(
        config,
        fake.clone(),
        Arc::new(MemStore::default()),
        Arc::new(HostSandboxFactory::new()),
        Some(wb),
        Arc::new(Absent),
        Arc::new(move |e| ev.lock().unwrap().push(e)),
    );
    Setup {
        _dir: dir,
        ws,
        rt: Arc::new(rt),
        fake,
        events,
    }
}

fn results_of(req: &Request) -> Vec<(String, bool)> {
    req.messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn tool_loop_with_parallel_calls_and_errors() {
    let s = setup(vec![(
        "ad-hoc",
        vec![
            vec![
                ContentBlock::text("先干活"),
                tool(
                    "a",
                    "Write",
                    json!({"file_path": "x.txt", "content": "hello\n"}),
                ),
                tool("b", "Bash", json!({"command": "sleep 0.3; echo one"})),
                tool("c", "Bash", json!({"command": "sleep 0.3; echo two"})),
                tool("d", "Nope", json!({})),
                tool("e", "Read", json!({"path": "x"})),
                tool("f", "Read", json!({"file_path": "../../etc/passwd"})),
            ],
            vec![tool("g", "Read", json!({"file_path": "x.txt"}))],
            vec![ContentBlock::text("完成")],
        ],
    )]);
    let spec = roles::once(
        "",
        ["Read", "Write", "Bash"].map(String::from).to_vec(),
        None,
    );
    let t = std::time::Instant::now();
    let r = s.rt.run(&spec, "做事", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.text, "完成");
    assert_eq!(r.num_turns, 3);
    // Two 0.3 s commands ran concurrently.
    assert!(
        t.elapsed() < std::time::Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    let seen = s.fake.seen.lock().unwrap();
    let res = results_of(&seen[1]);
    assert_eq!(res.len(), 6);
    assert!(!res[0].1 && res[0].0.contains("已创建"));
    assert_eq!(res[1], ("one".into(), false));
    assert_eq!(res[2], ("two".into(), false));
    assert!(res[3].1 && res[3].0.contains("白名单"), "{:?}", res[3]);
    assert!(res[4].1 && res[4].0.contains("输入不合法"), "{:?}", res[4]);
    assert!(
        res[5].1 && res[5].0.contains("越过了根目录") || res[5].0.contains("不在"),
        "{:?}",
        res[5]
    );
    assert!(results_of(&seen[2])[0].0.contains("hello"));
    assert_eq!(
        std::fs::read_to_string(s.ws.join("x.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn coordinator_dispatches_a_worker_whose_report_returns() {
    let report = "## 结论\n写好了\n## 依据\ncat 看过\n## 产出\nout.txt\n## 未验证\n无";
    let s = setup(vec![
        (
            "协调者",
            vec![
                vec![
                    tool("1", "Bash", json!({"command": "git status && rm x"})),
                    tool("2", "Write", json!({"file_path": "y", "content": "z"})),
                    tool(
                        "3",
                        "Agent",
                        json!({"description": "写文件", "prompt": "写 out.txt"}),
                    ),
                ],
                vec![ContentBlock::text("都好了")],
            ],
        ),
        (
            "worker",
            vec![
                vec![tool(
                    "w1",
                    "Write",
                    json!({"file_path": "out.txt", "content": "ok"}),
                )],
                vec![ContentBlock::text("写完了")],
                vec![ContentBlock::text(report)],
            ],
        ),
    ]);
    let spec = roles::coordinator("协调者", "", vec![]);
    let r = s.rt.run(&spec, "派活", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    let seen = s.fake.seen.lock().unwrap();
    let coord_second = seen
        .iter()
        .filter(|q| q.caller.agent == "协调者")
        .nth(1)
        .unwrap();
    let res = results_of(coord_second);
    assert!(res[0].1 && res[0].0.contains("只读命令"), "{:?}", res[0]);
    assert!(res[1].1 && res[1].0.contains("白名单"));
    assert!(
        !res[2].1 && res[2].0.contains("写好了") && res[2].0.starts_with("[worker-1]"),
        "{:?}",
        res[2]
    );
    // The worker was asked once to fix its report format.
    assert!(seen.iter().any(|q| q.caller.agent == "worker-1"
        && q.messages.last().unwrap().text().contains("回话格式不对")));
    assert_eq!(std::fs::read_to_string(s.ws.join("out.txt")).unwrap(), "ok");
    // The coordinator's system prompt carries the workbench index (as flower's), its first
    // message does not.
    let first = &seen[0];
    assert!(!first.messages[0].text().contains("工作台索引"));
    assert!(first.system.join("").contains("工作台索引"));
    let ev = s.events.lock().unwrap();
    assert!(ev
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Dispatch { child, .. } if child == "worker-1")));
    assert!(ev.iter().any(|e| e.depth == 1 && e.agent == "worker-1"));
}

#[tokio::test]
async fn large_bash_output_is_spilled() {
    let s = setup(vec![(
        "ad-hoc",
        vec![
            vec![tool(
                "a",
                "Bash",
                json!({"command": "yes 0123456789 | head -c 50000"}),
            )],
            vec![ContentBlock::text("ok")],
        ],
    )]);
    let spec = roles::once("", vec!["Bash".into()], None);
    let r = s.rt.run(&spec, "跑", RunOptions::default()).await;
    assert!(r.ok);
    let seen = s.fake.seen.lock().unwrap();
    let res = results_of(&seen[1]);
    assert!(
        res[0]
            .0
            .starts_with("[输出共 50000 字节,太长不放进上下文;全文落盘在 "),
        "{}",
        &res[0].0[..100]
    );
    assert!(res[0].0.len() < 2000);
    // One file: the full output the pointer names (not a second spill of the capped text).
    let spill = s.ws.join(".flower/spill");
    let files: Vec<_> = std::fs::read_dir(spill)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(res[0].0.contains(&files[0].display().to_string()));
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 50_000);
}

#[tokio::test]
async fn a_paused_step_waits_for_the_human_and_resumes_with_the_words() {
    let s = setup(vec![(
        "ad-hoc",
        vec![
            vec![tool("a", "Bash", json!({"command": "sleep 30"}))],
            vec![ContentBlock::text("好,不改 Makefile")],
        ],
    )]);
    let spec = roles::once("", vec!["Bash".into()], None);
    let rt = s.rt.clone();
    let run = tokio::spawn(async move { rt.run(&spec, "做事", RunOptions::default()).await });
    for _ in 0..200 {
        if !s.fake.seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    s.rt.pause();
    // The sleep is killed at once, but nothing is asked of the model until the human answers.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(
        s.fake.seen.lock().unwrap().len(),
        1,
        "resumed before the answer"
    );
    assert!(!run.is_finished());
    s.rt.resume("别改 Makefile");
    let r = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("resumed after the answer")
        .unwrap();
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.text, "好,不改 Makefile");
    let seen = s.fake.seen.lock().unwrap();
    let last = serde_json::to_string(seen[1].messages.last().unwrap()).unwrap();
    assert!(last.contains("别改 Makefile"), "{last}");
    assert!(last.contains("不是环境故障"), "{last}");
}

#[test]
fn a_multi_line_command_keeps_its_lines_in_the_summary() {
    let call = |command: &str| crate::model::ToolCall {
        id: "t".into(),
        name: "Bash".into(),
        input: json!({ "command": command }),
    };
    assert_eq!(
        super::session_loop::summarize(&call("pkill -x httpd || true\nnohup ./httpd > log 2>&1 &")),
        "Bash: pkill -x httpd || true\nnohup ./httpd > log 2>&1 &"
    );
    assert_eq!(
        super::session_loop::summarize(&call("a\n\n  b   c\nd\ne\nf\ng")),
        "Bash: a\nb c\nd\ne\n…(共 6 行)"
    );
    assert_eq!(
        super::session_loop::summarize(&call("make  -j4")),
        "Bash: make -j4"
    );
    // Nothing to show is empty, not the name again (`* Bash Bash` on the screen).
    let bare = crate::model::ToolCall {
        id: "t".into(),
        name: "Bash".into(),
        input: json!({}),
    };
    assert_eq!(super::session_loop::summarize(&bare), "");
}

#[tokio::test]
async fn workers_past_the_limit_queue_and_the_coordinator_and_the_screen_are_told() {
    let report = "## 结论\n做完了\n## 依据\n跑过\n## 产出\n无\n## 未验证\n无";
    let dispatch = |id: &str| {
        tool(
            id,
            "Agent",
            json!({"description": "干活", "prompt": "干活"}),
        )
    };
    // Each worker holds a directory while it runs: a second one at the same time fails.
    let solo = "mkdir running && sleep 0.3 && rmdir running && echo SOLO";
    let s = setup_with(
        vec![
            (
                "协调者",
                vec![
                    vec![dispatch("1"), dispatch("2"), dispatch("3")],
                    vec![ContentBlock::text("都好了")],
                ],
            ),
            (
                "worker",
                vec![
                    vec![tool("w1", "Bash", json!({ "command": solo }))],
                    vec![ContentBlock::text(report)],
                ],
            ),
        ],
        |c| c.max_workers = 1,
    );
    let spec = roles::coordinator("协调者", "", vec![]);
    let r = s.rt.run(&spec, "派活", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    let seen = s.fake.seen.lock().unwrap();
    let solos = seen
        .iter()
        .filter(|q| q.caller.agent.starts_with("worker-"))
        .flat_map(results_of)
        .filter(|(text, _)| text.contains("SOLO"))
        .count();
    assert_eq!(solos, 3, "two workers ran at once");
    let coord = seen
        .iter()
        .filter(|q| q.caller.agent == "协调者")
        .nth(1)
        .unwrap();
    let res = results_of(coord);
    assert_eq!(res.len(), 3);
    assert!(res.iter().all(|(_, err)| !err), "{res:?}");
    let queued = res.iter().filter(|(t, _)| t.contains("先排队等了")).count();
    assert_eq!(queued, 2, "{res:?}");
    let told: Vec<String> = s
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { text } if text.contains("--max-workers") => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
}

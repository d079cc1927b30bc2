//! The file tools against hostile inputs: special files, malformed input, escapes.

use super::*;
use crate::agent::human::Absent;
use crate::sandbox::Mount;
use serde_json::json;
use std::path::PathBuf;

/// A context whose only mount is a fresh writable directory (no sandbox, no workbench).
fn ctx() -> (tempfile::TempDir, ToolContext, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let abox = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.clone(), false)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: crate::sandbox::SandboxPolicy::writer(),
    };
    let c = ToolContext::new(
        "worker-1".into(),
        Role::Worker,
        0,
        abox,
        None,
        None,
        Arc::new(Absent),
        CancellationToken::new(),
        None,
        ToolLimits::default(),
    );
    (dir, c, ws)
}

async fn call(name: &str, input: Value, c: &ToolContext) -> Result<String, ToolError> {
    let tool = ToolRegistry::standard().get(name).unwrap();
    // A hang is the bug being tested for: fail instead of waiting forever.
    tokio::time::timeout(Duration::from_secs(10), tool.call(&input, c))
        .await
        .unwrap_or_else(|_| panic!("{name} {input} hung"))
}

#[tokio::test]
async fn fifos_are_refused_not_waited_on() {
    // A container can mkfifo in the workspace; opening it on the host blocks until a writer
    // (or reader) shows up, which is never.
    let (_d, c, ws) = ctx();
    nix::unistd::mkfifo(&ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    for (tool, input) in [
        ("Read", json!({"file_path": "fifo"})),
        (
            "Edit",
            json!({"file_path": "fifo", "old_string": "a", "new_string": "b"}),
        ),
        ("Write", json!({"file_path": "fifo", "content": "x"})),
    ] {
        let e = call(tool, input, &c).await.unwrap_err();
        assert!(e.to_string().contains("不是普通文件"), "{tool}: {e}");
    }
}

#[tokio::test]
async fn a_symlink_out_of_the_mounts_is_never_followed() {
    // The container put a link where a file was; the tools resolve it as the container would,
    // find it lands outside every mount, and touch nothing there.
    let (d, c, ws) = ctx();
    let outside = d.path().join("outside.txt");
    std::os::unix::fs::symlink(&outside, ws.join("f")).unwrap();
    for (tool, input) in [
        ("Write", json!({"file_path": "f", "content": "x"})),
        ("Read", json!({"file_path": "f"})),
        (
            "Edit",
            json!({"file_path": "f", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let e = call(tool, input, &c).await.unwrap_err();
        assert!(e.to_string().contains("符号链接"), "{tool}: {e}");
    }
    assert!(!outside.exists());
}

#[tokio::test]
async fn write_then_edit_then_read_a_regular_file() {
    let (_d, c, ws) = ctx();
    call(
        "Write",
        json!({"file_path": "a/b.txt", "content": "one\ntwo\n"}),
        &c,
    )
    .await
    .unwrap();
    call(
        "Edit",
        json!({"file_path": "a/b.txt", "old_string": "two", "new_string": "2"}),
        &c,
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("a/b.txt")).unwrap(),
        "one\n2\n"
    );
    let r = call("Read", json!({"file_path": "a/b.txt"}), &c)
        .await
        .unwrap();
    assert!(r.contains("     2\t2"), "{r}");
    // Shorter content really truncates.
    call("Write", json!({"file_path": "a/b.txt", "content": "z"}), &c)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("a/b.txt")).unwrap(), "z");
}

#[tokio::test]
async fn a_huge_sparse_file_is_refused_without_reading_it_whole() {
    // `truncate -s 100G big` in a container costs nothing; loading it would kill the runner.
    let (_d, c, ws) = ctx();
    let f = std::fs::File::create(ws.join("big")).unwrap();
    f.set_len(100 * 1024 * 1024 * 1024).unwrap();
    for (tool, input) in [
        ("Read", json!({"file_path": "big"})),
        (
            "Edit",
            json!({"file_path": "big", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let e = call(tool, input, &c).await.unwrap_err();
        assert!(e.to_string().contains("太大"), "{tool}: {e}");
    }
}

/// A factory whose every start fails, counting the starts.
struct FailingStarts(std::sync::atomic::AtomicUsize);

#[async_trait]
impl SandboxFactory for FailingStarts {
    fn commands_run(&self) -> crate::sandbox::CommandsRun {
        crate::sandbox::CommandsRun::InContainer
    }
    async fn sandbox(&self, _spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(SandboxError::Container(
            "creating fbx-test-worker-1: no space left".into(),
        ))
    }
    async fn release(&self, _agent: &str) -> Result<(), SandboxError> {
        Ok(())
    }
    async fn teardown(&self) -> Result<(), SandboxError> {
        Ok(())
    }
}

/// Issue 17: a start begun early that fails is reported by the first command, with the error
/// and tool result a start on demand gives, and is not started twice.
#[tokio::test]
async fn an_early_start_that_fails_is_reported_by_the_first_command() {
    let (_d, plain, _ws) = ctx();
    let factory = Arc::new(FailingStarts(Default::default()));
    let c = ToolContext::new(
        plain.agent.clone(),
        plain.role,
        0,
        plain.agent_box.clone(),
        Some(factory.clone() as Arc<dyn SandboxFactory>),
        None,
        Arc::new(Absent),
        CancellationToken::new(),
        None,
        ToolLimits::default(),
    );
    c.start_sandbox_early();
    c.start_sandbox_early(); // once is enough
    let early = call("Bash", json!({"command": "true"}), &c)
        .await
        .unwrap_err();
    let on_demand = call("Bash", json!({"command": "true"}), &c)
        .await
        .unwrap_err();
    assert_eq!(early, on_demand);
    assert_eq!(
        early,
        ToolError::Failed(
            "沙箱启动失败:container: creating fbx-test-worker-1: no space left".into()
        )
    );
    assert_eq!(factory.0.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// An agent that may not execute commands starts nothing early.
#[tokio::test]
async fn no_early_start_without_commands() {
    let (_d, c, _ws) = ctx();
    c.start_sandbox_early();
    assert!(c.early.lock().unwrap().is_none());
}

//! Judges on the real engine with `--isolate`: a judge with `--judge-can-run` runs in its own
//! container in the run's pod with the workspace and workbench read-only — its `touch`, `rm`
//! and `git commit` fail while `file ./app`, `lsof -p`, `lsof -i :PORT`, `ps` and `curl` see
//! the artifact a worker integrated and the server it left running. A judge without can_run
//! gets no container at all.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod isolate_support;

use flowerbox::role::Role;
use flowerbox::sandbox::service::channel::SOCKET_PATH;
use flowerbox::sandbox::service::SERVICE_PATH;
use flowerbox::sandbox::SandboxFactory;
use isolate_support::docker_support::{engine_or_skip, SERIAL};
use isolate_support::*;
use serde_json::json;

const PORT: u16 = 18765;

fn bash(id: &str, command: &str) -> serde_json::Value {
    json!({"type": "tool_use", "name": "Bash", "id": id, "input": {"command": command}})
}

#[tokio::test]
async fn a_judge_sees_live_artifacts_and_cannot_write() {
    let Some(engine) = engine_or_skip("isolate_judge").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = IsoRun::new(&engine, "iso-judge", |_, wb| {
        let pid_file = wb.join("artifacts/server.pid");
        let serve = format!(
            "printf '#!/bin/sh\\necho app\\n' > app && chmod +x app\n\
             nohup python3 -m http.server {PORT} --bind 127.0.0.1 > /dev/null 2>&1 &\n\
             echo $! > '{pid}'\n\
             for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:{PORT}/ && break; sleep 0.1; done; echo up",
            pid = pid_file.display()
        );
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "起服务", "prompt": "做 app 并起服务"}))]},
                {"content": [text("服务起好了")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": serve}))]},
                {"content": [text(REPORT)]}]},
            {"role": "judge", "agent": "judge-1", "turns": [
                {"content": [
                    bash("touch", "touch judged.txt"),
                    bash("rm", "rm app"),
                    bash("commit", "git commit --allow-empty -q -m judge"),
                    bash("file", "file ./app"),
                    bash("lsof_p", &format!("lsof -p $(cat '{}')", pid_file.display())),
                    bash("lsof_i", &format!("lsof -i :{PORT}")),
                    bash("ps", "ps -eo pid,args"),
                    bash("curl", &format!("curl -s http://127.0.0.1:{PORT}/"))]},
                {"content": [text("## 结论\nACHIEVED\n## 理由\n都看到了\n## 未通过\n无")]}]},
            {"role": "judge", "agent": "judge-2", "turns": [
                {"content": [bash("denied", "touch x")]},
                {"content": [text("## 结论\nNOT_YET\n## 理由\n跑不了命令\n## 未通过\n无")]}]}]})
    })
    .await;
    coordinate(&run.rt, "起服务").await;
    let agent = run.results_of("协调者", "Agent");
    assert!(agent[0].1.contains("已合入 main"), "{agent:?}");
    assert!(run.ws.join("app").is_file());

    judge_round(&run.rt, 1, true).await;

    // An image without the judge's tools is reported as such, not as odd command output.
    let sb = run
        .factory
        .sandbox(&run.rt.main_box("judge-1", Role::Judge))
        .await
        .unwrap();
    let missing = sb
        .missing_tools(&["file", "lsof", "ps", "curl"])
        .await
        .unwrap();
    assert!(missing.is_empty(), "the agent image lacks {missing:?}");

    // Writes fail: the workspace (with its .git) is read-only in the judge's container.
    for id in ["touch", "rm", "commit"] {
        let (is_error, out) = run.result(id);
        assert!(is_error, "{id} succeeded: {out}");
        assert!(out.to_lowercase().contains("read-only"), "{id}: {out}");
    }
    assert!(run.ws.join("app").is_file() && !run.ws.join("judged.txt").exists());
    // Reads see the integrated artifact and the worker's live server.
    let ok = |id: &str| {
        let (is_error, out) = run.result(id);
        assert!(!is_error, "{id}: {out}");
        out
    };
    let file = ok("file");
    assert!(file.contains("shell script"), "{file}");
    let lsof_p = ok("lsof_p");
    let (_, worktree) = run.placement.worktree_of("worker-1").unwrap();
    assert!(lsof_p.contains("python3"), "{lsof_p}");
    assert!(lsof_p.contains(&worktree.display().to_string()), "{lsof_p}");
    let lsof_i = ok("lsof_i");
    assert!(
        lsof_i.contains("python3") && lsof_i.contains("LISTEN"),
        "{lsof_i}"
    );
    assert!(ok("ps").contains(&format!("http.server {PORT}")));
    assert!(ok("curl").contains("app"));

    // The judge's container: in the pod, read-only mounts of workspace and workbench only (and
    // the exec service's binary and the host's socket for its frames, read-only too, when the
    // run has them).
    let mounts = run.container_mounts(&engine).await;
    let judge = &mounts.iter().find(|(a, _)| a == "judge-1").unwrap().1;
    let mut paths: Vec<&str> = judge.iter().map(|(p, _)| p.as_str()).collect();
    paths.sort();
    let (ws, wb) = (run.ws.display().to_string(), run.wb.display().to_string());
    let mut want = vec![ws.as_str(), wb.as_str()];
    if paths.contains(&SERVICE_PATH) {
        want.push(SERVICE_PATH);
    }
    if paths.contains(&SOCKET_PATH) {
        want.push(SOCKET_PATH);
    }
    want.sort();
    assert_eq!(paths, want);
    assert!(judge.iter().all(|(_, rw)| !rw), "{judge:?}");

    // A judge without can_run: Bash refused, and no container made for it.
    judge_round(&run.rt, 2, false).await;
    assert!(run.result("denied").0);
    let agents: Vec<String> = run
        .container_mounts(&engine)
        .await
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert!(!agents.iter().any(|a| a == "judge-2"), "{agents:?}");
    assert!(agents.iter().any(|a| a == "judge-1"), "{agents:?}");
}

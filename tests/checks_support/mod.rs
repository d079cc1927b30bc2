//! Shared pieces of the tests of flowerbox's own checks before the judge (`flow_checks`,
//! `flow_probes`): the hello.sh ask and its brief, scenario building blocks (a round's
//! dispatch, its worker, one judge per round), and what the tests read back: a judge round's
//! manifest row, the judge's prompt, the containers left.
//!
//! Included with `mod` by crates that also include `docker_support` and `flow_support` at
//! their root.
#![allow(dead_code)]

use crate::docker_support::{engine_or_skip, SERIAL};
use crate::flow_support::{requests_with, Project, Ran, ScriptedModel};
use serde_json::{json, Value};

pub const ASK: &str = "写个 hello.sh";

pub const BRIEF: &str = "## 目标\n写一个 hello.sh,运行它打印 hello\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n";

pub const VERDICT_ACHIEVED: &str = "## 结论\nACHIEVED\n\n## 理由\n都看到了\n\n## 未通过\n无\n";

/// The worker command that writes a working hello.sh.
pub const HELLO: &str = "printf 'echo hello\\n' > hello.sh && chmod +x hello.sh";

/// The engine (or `None`: the test skips; `CI=true`: fails), the serialising lock held, and a
/// fresh project.
pub async fn begin(test: &str) -> Option<(tokio::sync::MutexGuard<'static, ()>, Project)> {
    engine_or_skip(test).await?;
    Some((SERIAL.lock().await, Project::new()))
}

/// The run's stdout contains `text`.
pub fn shows(r: &Ran, text: &str) {
    assert!(r.out.contains(text), "{}", r.out);
}

/// A turn that only says `t`.
pub fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}

/// A turn that calls `name` with `input`.
pub fn tool(name: &str, input: Value) -> Value {
    json!({"content": [{"type": "tool_use", "name": name, "input": input}]})
}

/// The clarifier's [`BRIEF`] and the goal setter's `goal`.
pub fn opening(goal: &str) -> Vec<Value> {
    vec![
        json!({"role": "clarifier", "turns": [text(BRIEF)]}),
        json!({"role": "judge", "prompt": "变成可判定的目标", "turns": [text(goal)]}),
    ]
}

/// Round `n`'s work (`第n件活`, running `cmd`): the coordinator's dispatch turn, and the
/// worker that runs it and reports.
pub fn round(n: usize, cmd: &str) -> (Value, Value) {
    let task = format!("第{n}件活");
    let dispatch = tool(
        "Agent",
        json!({"description": task, "prompt": format!("{task}:{cmd}"), "subagent_type": "coder"}),
    );
    let worker = json!({"role": "worker", "prompt": task, "turns": [
        tool("Bash", json!({"command": cmd})),
        text("结论:做了\n依据:跑了命令\n产出:hello.sh\n未验证:无")]});
    (dispatch, worker)
}

/// One judge per round (`judge-2`, … as the goal setter is `judge-1`), saying `verdicts[i]`.
pub fn judges(verdicts: &[&str]) -> Vec<Value> {
    verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({"role": "judge", "agent": format!("judge-{}", i + 2),
                   "prompt": "判定这一轮", "turns": [text(v)]})
        })
        .collect()
}

/// The judge row of round `n` in the manifest.
pub fn judge_row(p: &Project, n: u32) -> Value {
    p.manifest()
        .into_iter()
        .find(|r| r["step"] == format!("干活·判定#{n}"))
        .unwrap_or_else(|| panic!("no row 干活·判定#{n}: {:?}", p.manifest()))
}

/// The judge's prompt of round 1.
pub fn judge_prompt(model: &ScriptedModel) -> String {
    requests_with(model, "")
        .into_iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("判定这一轮"))
        .expect("a judge request")
}

/// No container of this test's runs is left (every run's teardown and every gate's release).
/// The last run's containers go in its detached cleanup: waited for.
pub fn no_containers_left(p: &Project) {
    let left = crate::docker_support::cleanup::once_cleaned(|| {
        let out = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", "label=flowerbox.run"])
            .args([
                "--filter",
                &format!("label=flowerbox.workspace={}", p.ws.display()),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    assert!(left.trim().is_empty(), "containers left: {left}");
}

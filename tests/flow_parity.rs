//! flower parity and honest records (issue 20), end to end: the real binary against the strict
//! `scripted-model`. Each test names the input that showed the gap.
//!
//! Sandbox: `--sandbox host` by default (`FLOWERBOX_TEST_SANDBOX=docker` for containers).

mod flow_support;

use flow_support::*;
use serde_json::json;

/// A brief with all four sections.
const BRIEF: &str = "## 目标\n写一个 hello.sh\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n不做 Web 界面\n\n## 未知与假设\n- 无\n";

/// The clarifier has flower's WebFetch, under the run's egress policy: a fetch of the host's
/// loopback is refused like an agent's.
#[test]
fn the_clarifier_fetches_under_the_egress_policy() {
    let p = Project::new();
    let model = ScriptedModel::start(&json!({"agents": [{"role": "clarifier", "turns": [
        {"content": [{"type": "tool_use", "name": "WebFetch",
                      "input": {"url": "http://127.0.0.1:9/spec.html"}}]},
        {"content": [{"type": "text", "text": BRIEF}]}]}]}));
    let r = p.run(
        &model,
        &[
            "--timeout",
            "0",
            "--clarify-only",
            "照 http://127.0.0.1:9/spec.html 写",
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let first = &requests_with(&model, "你是确认者")[0];
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"WebFetch"), "{tools:?}");
    assert!(!tools.contains(&"WebSearch"), "{tools:?}");
    let second = &requests_with(&model, "你是确认者")[1];
    let result = second["messages"][2]["content"][0].clone();
    assert_eq!(result["type"], "tool_result", "{result}");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"].to_string().contains("127.0.0.1"),
        "refused by the egress policy: {result}"
    );
}

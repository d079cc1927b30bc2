//! Red team, attack class 1 (DESIGN.md "Threat model" 1, issue 14): the host-side file tools
//! and every host access of the workbench and the run directory, attacked from inside a
//! worker's container on the real engine, through the real `flowerbox` binary and the scripted
//! model over HTTP. Each test counts its attempts and fails if a single one succeeds:
//!
//! - a swap loop (`renameat2(RENAME_EXCHANGE)` of a directory `d` and a link `d -> <host
//!   directory with a decoy secret>`) runs while the model drives hundreds of
//!   Read/Write/Edit/Glob/Grep calls through `d`: the decoy never reaches a request, nothing
//!   outside the mounts is created or changed;
//! - workbench files replaced by links to host files (the API key's `.env`, files to be
//!   created) and by FIFOs: the host neither leaks, writes through, nor hangs, in this run or
//!   the next one that reads them;
//! - the run directory (also `-r` deep in the workspace, and `--isolate`): masked in every
//!   container, so nothing can be planted there, and an ancestor renamed under it does not
//!   redirect the host's writes.
//!
//! `FLOWERBOX_REDTEAM_BIN` runs another build of `flowerbox` against the same attacks (to
//! measure a baseline); the tests then report what got through.

#[path = "docker_support/mod.rs"]
mod docker_support;
#[path = "flow_support/mod.rs"]
mod flow_support;

use flow_support::{Project, ScriptedModel};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Each run must end well within this (a FIFO that hangs the host shows up here).
const BOUND: Duration = Duration::from_secs(90);

/// The engine is there (and the agent image built), or the test is skipped (`CI=true`: fails).
fn engine(test: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match docker_support::engine_or_skip(test).await {
            Some(e) => {
                docker_support::agent_image(&e).await;
                true
            }
            None => false,
        }
    })
}

fn bin() -> PathBuf {
    std::env::var_os("FLOWERBOX_REDTEAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_flowerbox")))
}

/// `flowerbox --sandbox docker ARGS` in the project against `model`, bounded by [`BOUND`].
fn run(p: &Project, model: &ScriptedModel, args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &p.home)
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .current_dir(&p.ws)
        .args(["--sandbox", "docker"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = c.spawn().expect("spawn flowerbox");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return (status.code(), text, t.elapsed());
        }
        if t.elapsed() > BOUND {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "flowerbox ran over {BOUND:?} (hung?):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes whatever the runs of `ws` left on the engine (only this workspace's).
struct Sweep(PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_flowerbox"))
            .args(["--sandbox", "docker", "-w"])
            .arg(&self.0)
            .arg("gc")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Every file under `dir` (not following links) with its content or link target.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(p.clone(), "<dir>".into());
                stack.push(p);
            } else if t.is_symlink() {
                out.insert(p.clone(), format!("-> {:?}", std::fs::read_link(&p).unwrap()));
            } else {
                out.insert(p.clone(), std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// Every tool result of the last request the model received, by tool name: (text, is_error).
fn tool_results(model: &ScriptedModel) -> Vec<(String, String, bool)> {
    let reqs = model.recorded();
    let Some(last) = reqs.last() else {
        return Vec::new();
    };
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for m in last["messages"].as_array().unwrap() {
        for b in m["content"].as_array().into_iter().flatten() {
            match b["type"].as_str() {
                Some("tool_use") => {
                    names.insert(
                        b["id"].as_str().unwrap().to_string(),
                        b["name"].as_str().unwrap().to_string(),
                    );
                }
                Some("tool_result") => {
                    let id = b["tool_use_id"].as_str().unwrap();
                    out.push((
                        names.get(id).cloned().unwrap_or_default(),
                        b["content"].to_string(),
                        b["is_error"].as_bool().unwrap_or(false),
                    ));
                }
                _ => {}
            }
        }
    }
    out
}

/// How many recorded requests contain `needle` anywhere.
fn requests_containing(model: &ScriptedModel, needle: &str) -> usize {
    model
        .recorded()
        .iter()
        .filter(|r| r.to_string().contains(needle))
        .count()
}

fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

fn bash(command: &str) -> Value {
    tool("Bash", json!({"command": command}))
}

/// The swap loop, run in the worker's container: exchanges `d` and `dl` until `stop` exists
/// (at most a minute), then writes how many exchanges it made.
const SWAP: &str = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
open(".swapping", "w").close()
n, t0 = 0, time.time()
while not os.path.exists("stop") and time.time() - t0 < 60:
    for _ in range(200):
        if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"dl", RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        n += 1
open("swaps.txt", "w").write(str(n))
"#;

#[test]
fn a_directory_swapped_with_a_link_to_the_host_never_leaks_or_lets_a_write_out() {
    if !engine("redteam_swap") {
        return;
    }
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let root = p.ws.parent().unwrap().to_path_buf();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let decoy_secret = format!("DECOY-SECRET-{tag}");
    let decoy_name = format!("decoy-only-{tag}.txt");
    // The host directory no container mounts, and what the workspace holds.
    let decoy = root.join("decoy");
    std::fs::create_dir_all(&decoy).unwrap();
    std::fs::write(decoy.join("secret.txt"), &decoy_secret).unwrap();
    std::fs::write(decoy.join("edit.txt"), format!("{decoy_secret} END\n")).unwrap();
    std::fs::write(decoy.join(&decoy_name), &decoy_secret).unwrap();
    std::fs::create_dir_all(p.ws.join("d")).unwrap();
    std::fs::write(p.ws.join("d/secret.txt"), "inside\n").unwrap();
    std::fs::write(p.ws.join("d/edit.txt"), "inside END\n").unwrap();
    std::os::unix::fs::symlink(&decoy, p.ws.join("dl")).unwrap();
    std::fs::write(p.ws.join("swap.py"), SWAP).unwrap();
    let top = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let root_before = top(&root);
    let decoy_before = snapshot(&decoy);

    // The scenario: start the loop, wait until it runs, then 40 turns of 10 file-tool calls
    // through `d` (the runtime runs a turn's calls concurrently), then stop the loop.
    const TURNS: usize = 40;
    let mut turns = vec![
        json!({"content": [bash("nohup python3 swap.py >swap.log 2>&1 &")]}),
        json!({"content": [bash("for i in $(seq 50); do test -e .swapping && break; sleep 0.1; done; ls -a")]}),
    ];
    for t in 0..TURNS {
        let mut calls = Vec::new();
        for k in 0..10 {
            let i = t * 10 + k;
            calls.push(match k {
                0 | 1 | 2 => tool("Read", json!({"file_path": "d/secret.txt"})),
                3 | 4 => tool(
                    "Write",
                    json!({"file_path": format!("d/w-{i}.txt"), "content": "w\n"}),
                ),
                5 | 6 => tool(
                    "Edit",
                    json!({"file_path": "d/edit.txt", "old_string": "END", "new_string": "xEND"}),
                ),
                7 => tool("Glob", json!({"pattern": "**/*", "path": "d"})),
                8 => tool(
                    "Grep",
                    json!({"pattern": "DECOY|inside", "path": "d", "output_mode": "content"}),
                ),
                _ => tool("Read", json!({"file_path": "d/edit.txt"})),
            });
        }
        turns.push(json!({ "content": calls }));
    }
    turns.push(json!({"content": [bash("touch stop; for i in $(seq 50); do test -e swaps.txt && break; sleep 0.1; done; cat swaps.txt swap.log")]}));
    turns.push(json!({"content": [{"type": "text", "text": "完成"}]}));
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": turns}]}));

    let (code, out, took) = run(
        &p,
        &model,
        &["once", "-t", "Read,Write,Edit,Glob,Grep,Bash", "读写 d 里的文件"],
    );

    let results = tool_results(&model);
    let file_calls: Vec<&(String, String, bool)> =
        results.iter().filter(|(n, _, _)| n != "Bash").collect();
    let leaked: Vec<&&(String, String, bool)> = file_calls
        .iter()
        .filter(|(_, text, _)| text.contains(&decoy_secret) || text.contains(&decoy_name))
        .collect();
    let errors = file_calls.iter().filter(|(_, _, e)| *e).count();
    let swaps: u64 = std::fs::read_to_string(p.ws.join("swaps.txt"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let decoy_after = snapshot(&decoy);
    let writes_out = decoy_after.len() as i64 - decoy_before.len() as i64;
    let changed_out = decoy_before
        .iter()
        .filter(|(k, v)| decoy_after.get(*k) != Some(v))
        .count();
    eprintln!(
        "swap attack: {} file-tool calls during {swaps} exchanges ({errors} refused or failed), \
         {} leaked the decoy, {writes_out} files created and {changed_out} changed outside the \
         mounts; {:.1} s",
        file_calls.len(),
        leaked.len(),
        took.as_secs_f64()
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(file_calls.len(), TURNS * 10, "every call ran");
    assert!(swaps > 1000, "the swap loop did not run: {swaps}\n{out}");
    assert!(leaked.is_empty(), "leaked: {leaked:?}");
    assert_eq!(requests_containing(&model, &decoy_secret), 0);
    assert_eq!(requests_containing(&model, &decoy_name), 0);
    assert_eq!(decoy_after, decoy_before, "the decoy directory changed");
    assert_eq!(top(&root), root_before, "created beside the workspace");
    // Calls did land inside (the attack was not simply refused wholesale).
    assert!(errors < file_calls.len(), "every call failed");
}

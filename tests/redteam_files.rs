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
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "docker_support/mod.rs"]
mod docker_support;
#[path = "flow_support/mod.rs"]
mod flow_support;

mod redteam_support;

use docker_support::{engine_ready as engine, Sweep};
use flow_support::{Project, ScriptedModel};
use redteam_support::{bash, model_command, repository, text, tool, PLANT_X};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Each run must end well within this (a FIFO that hangs the host shows up here).
const BOUND: Duration = Duration::from_secs(90);

/// `flowerbox --sandbox docker ARGS` in the project against `model`, bounded by [`BOUND`].
fn run(p: &Project, model: &ScriptedModel, args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut c = model_command(p, model);
    c.args(["--sandbox", "docker"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let child = c.spawn().expect("spawn flowerbox");
    match flowerbox_testkit::wait_bounded(child, BOUND) {
        Ok(out) => {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), text, t.elapsed())
        }
        Err(out) => panic!(
            "flowerbox ran over {BOUND:?} (hung?):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
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
                out.insert(
                    p.clone(),
                    format!("-> {:?}", std::fs::read_link(&p).unwrap()),
                );
            } else {
                out.insert(p.clone(), std::fs::read_to_string(&p).unwrap_or_default());
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
    let _serial = docker_support::SERIAL.blocking_lock();
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

    // The scenario: start the loop, wait until it runs, then 100 turns of 10 file-tool calls
    // through `d` (the runtime runs a turn's calls concurrently), then stop the loop.
    const TURNS: usize = 100;
    let mut turns = vec![
        json!({"content": [bash("nohup python3 swap.py >swap.log 2>&1 &")]}),
        json!({"content": [bash("for i in $(seq 50); do test -e .swapping && break; sleep 0.1; done; ls -a")]}),
    ];
    for t in 0..TURNS {
        let mut calls = Vec::new();
        for k in 0..10 {
            let i = t * 10 + k;
            calls.push(match k {
                0..=2 => tool("Read", json!({"file_path": "d/secret.txt"})),
                3..=4 => tool(
                    "Write",
                    json!({"file_path": format!("d/w-{i}.txt"), "content": "w\n"}),
                ),
                5..=6 => tool(
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
        &[
            "once",
            "-t",
            "Read,Write,Edit,Glob,Grep,Bash",
            "读写 d 里的文件",
        ],
    );

    let results = model.tool_results();
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

/// A `go` scenario whose worker runs `worker_turns` to plant.
fn go_scenario(worker_turns: Vec<Value>) -> Value {
    redteam_support::go_scenario(&PLANT_X, worker_turns, vec![])
}

/// The count of `PLANTED`/`REFUSED` lines in the Bash results the model received.
fn plant_counts(model: &ScriptedModel) -> (usize, usize) {
    let mut planted = 0;
    let mut refused = 0;
    for (name, text, _) in model.tool_results() {
        if name == "Bash" {
            planted += text.matches("PLANTED").count();
            refused += text.matches("REFUSED").count();
        }
    }
    (planted, refused)
}

#[test]
fn workbench_files_replaced_by_links_and_fifos_are_neither_followed_nor_waited_on() {
    if !engine("redteam_workbench") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let secret_text = format!("HOST-SECRET-{tag}");
    let secret = p.home.join(".config/flower/.env");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, format!("FLOWERBOX_DECOY={secret_text}\n")).unwrap();
    let planted = |name: &str| p.home.join(format!("planted-{name}"));
    // A Read result large enough to be spilled: its spill file's name is predictable.
    let lines: Vec<String> = (0..100)
        .map(|i| format!("line {i} {}", "x".repeat(60)))
        .collect();
    std::fs::write(p.ws.join("big.txt"), lines.join("\n") + "\n").unwrap();
    let read_result: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>6}\t{l}\n", i + 1))
        .collect();
    let spill_name = flowerbox::agent::spill::spill_name(&read_result);
    let wb = p.ws.join(".flower");
    let runs = p.ws.join("runs");
    // The worker: links from every note the host reads (now or on the next wake) to the host
    // secret, links from every file the host writes to host paths, FIFOs where it reads, then
    // a Write (the host refreshes INDEX.md) and file-tool calls at the run directory.
    let plant = format!(
        "cd '{wb}'; \
         mv notes/需求.md notes/需求.orig && mkfifo notes/需求.md; \
         mv notes/目标.md notes/目标.orig && ln -s '{secret}' notes/目标.md; \
         rm -f INDEX.md; ln -s '{pi}' INDEX.md; \
         ln -s '{pr}' notes/判定记录.md; \
         mkfifo scripts/hang.sh notes/fifo.md; \
         ln -s '{secret}' scripts/key.sh; \
         ln -s '{ps}' spill/.{spill_name}.partial; ln -s '{ps}' spill/{spill_name}.tmp; \
         ls -la . notes scripts",
        wb = wb.display(),
        secret = secret.display(),
        pi = planted("index").display(),
        pr = planted("record").display(),
        ps = planted("spill").display(),
    );
    let run_plants = format!(
        "cd '{ws}'; for f in manifest.json lineage.json go.lock flowerbox.log sessions.db \
         sessions.db-wal aside new; do \
           if ln -sf '{pr}' runs/$f 2>/dev/null; then echo PLANTED $f; else echo REFUSED $f; fi; \
         done; \
         if mv runs runs.moved 2>/dev/null; then echo PLANTED mv; else echo REFUSED mv; fi; \
         if rm -rf runs 2>/dev/null && ! test -d runs; then echo PLANTED rm; else echo REFUSED rm; fi; \
         if cat runs/manifest.json 2>/dev/null; then echo PLANTED read; else echo REFUSED read; fi",
        ws = p.ws.display(),
        pr = planted("run").display(),
    );
    let turns = vec![
        json!({"content": [bash(&plant)]}),
        json!({"content": [
            bash(&run_plants),
            tool("Write", json!({"file_path": ".flower/artifacts/report.md", "content": "r\n"})),
            tool("Read", json!({"file_path": "runs/manifest.json"})),
            tool("Write", json!({"file_path": "runs/manifest.json", "content": "[]"})),
            tool("Glob", json!({"pattern": "runs/**"})),
            tool("Read", json!({"file_path": ".flower/notes/目标.md"})),
            tool("Write", json!({"file_path": "x.txt", "content": "x\n"})),
            tool("Read", json!({"file_path": "big.txt"})),
        ]}),
        json!({"content": [{"type": "text",
            "text": "结论:埋好了\n依据:无\n产出:x.txt\n未验证:无"}]}),
    ];
    let model = ScriptedModel::start(&go_scenario(turns));
    let (code, out, took) = run(&p, &model, &["--timeout", "0", "做 X"]);
    let (planted_n, refused_n) = plant_counts(&model);
    let file_calls: Vec<(String, String, bool)> = model
        .tool_results()
        .into_iter()
        .filter(|(n, _, _)| !matches!(n.as_str(), "Bash" | "Agent"))
        .collect();
    eprintln!(
        "first run: exit {code:?} in {:.1} s\n{out}",
        took.as_secs_f64()
    );
    eprintln!("file tools: {file_calls:?}");

    // The next wake reads the notes the worker replaced.
    let model2 = ScriptedModel::start(&go_scenario(vec![json!({"content": [{"type": "text",
        "text": "结论:好\n依据:无\n产出:无\n未验证:无"}]})]));
    let (code2, out2, took2) = run(&p, &model2, &["--timeout", "0", "再做一次 X"]);
    eprintln!(
        "wake: exit {code2:?} in {:.1} s\n{out2}",
        took2.as_secs_f64()
    );

    let leaks =
        requests_containing(&model, &secret_text) + requests_containing(&model2, &secret_text);
    let written_out: Vec<String> = std::fs::read_dir(&p.home)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("planted-"))
        .collect();
    eprintln!(
        "workbench/run-dir attack: {} container plants refused, {planted_n} succeeded; \
         {} file-tool calls at the run directory and the replaced notes; {leaks} requests \
         carried the host secret; host files written through links: {written_out:?}",
        refused_n,
        file_calls.len()
    );
    assert!(refused_n >= 11, "the plants did not run: {refused_n}");
    assert_eq!(planted_n, 0, "a plant in the run directory succeeded");
    assert_eq!(leaks, 0, "the host secret reached the model");
    assert!(written_out.is_empty(), "{written_out:?}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        format!("FLOWERBOX_DECOY={secret_text}\n")
    );
    // The file tools refused the run directory and the linked note; a glob there finds
    // nothing.
    for i in [1, 2, 4] {
        let (name, text, is_error) = &file_calls[i];
        assert!(is_error, "{name}: {text}");
    }
    assert!(!file_calls[3].1.contains("manifest"), "{:?}", file_calls[3]);
    assert!(!std::fs::symlink_metadata(runs.join("manifest.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!std::fs::symlink_metadata(wb.join("INDEX.md"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(p.ws.join("x.txt")).unwrap(), "x\n");
    // The large result was spilled, into the workbench.
    assert!(file_calls[6].1.contains("已落盘"), "{:?}", file_calls[6]);
    assert_eq!(
        std::fs::read_to_string(wb.join("spill").join(&spill_name)).unwrap(),
        read_result
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(code2, Some(0), "{out2}");
}

#[test]
fn a_run_directory_deep_in_the_workspace_stays_masked_when_its_parent_is_renamed() {
    if !engine("redteam_rundir") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let planted_dir = p.home.join("planted-dir");
    std::fs::create_dir_all(&planted_dir).unwrap();
    // The worker: plants in the masked run directory (refused), then renames its parent
    // (allowed: only the mount point itself is busy) and puts a link to a host directory where
    // the run directory was, for the host's next writes (manifest, lineage, log).
    let attack = format!(
        "cd '{ws}'; ls -la deep/records; \
         for f in manifest.json lineage.json go.lock flowerbox.log sessions.db x; do \
           if ln -sf '{pd}/$f' deep/records/$f 2>/dev/null; then echo PLANTED $f; \
           else echo REFUSED $f; fi; done; \
         if cat deep/records/manifest.json 2>/dev/null; then echo PLANTED read; \
         else echo REFUSED read; fi; \
         mv deep deep.moved && mkdir deep && ln -s '{pd}' deep/records && echo REDIRECTED",
        ws = p.ws.display(),
        pd = planted_dir.display(),
    );
    let turns = vec![
        json!({"content": [bash(&attack)]}),
        json!({"content": [
            tool("Read", json!({"file_path": "deep.moved/records/manifest.json"})),
            tool("Grep", json!({"pattern": "session_id", "path": "."})),
            tool("Write", json!({"file_path": "x.txt", "content": "x\n"})),
        ]}),
        json!({"content": [{"type": "text", "text": "结论:好\n依据:无\n产出:x.txt\n未验证:无"}]}),
    ];
    let model = ScriptedModel::start(&go_scenario(turns));
    let (code, out, took) = run(
        &p,
        &model,
        &["-r", "deep/records", "--timeout", "0", "做 X"],
    );
    let (planted_n, refused_n) = plant_counts(&model);
    let redirected = model
        .tool_results()
        .iter()
        .any(|(n, t, _)| n == "Bash" && t.contains("REDIRECTED"));
    let file_calls: Vec<(String, String, bool)> = model
        .tool_results()
        .into_iter()
        .filter(|(n, _, _)| matches!(n.as_str(), "Read" | "Grep"))
        .collect();
    let written_out: Vec<_> = std::fs::read_dir(&planted_dir).unwrap().flatten().collect();
    eprintln!(
        "deep run directory: exit {code:?} in {:.1} s; {refused_n} plants refused, {planted_n} \
         succeeded; parent renamed and replaced by a link: {redirected}; host writes through \
         it: {}\n{out}",
        took.as_secs_f64(),
        written_out.len()
    );
    assert!(refused_n >= 7, "the plants did not run");
    assert_eq!(planted_n, 0);
    assert!(
        redirected,
        "the rename did not happen, the test proves nothing"
    );
    assert!(written_out.is_empty(), "{written_out:?}");
    // The records stayed with the run, where the agent cannot see them.
    assert!(p.ws.join("deep.moved/records/sessions.db").is_file());
    for (name, text, is_error) in &file_calls {
        assert!(
            *is_error || !(text.contains("records/") || text.contains("确认需求")),
            "{name} saw the records: {text}"
        );
    }
}

#[test]
fn with_isolate_no_container_sees_the_run_directory() {
    if !engine("redteam_isolate") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    repository(&p);
    let runs = p.ws.join("runs");
    let look = format!(
        "for f in manifest.json lineage.json sessions.db flowerbox.log; do \
           if cat '{runs}'/$f >/dev/null 2>&1; then echo PLANTED read $f; \
           else echo REFUSED read $f; fi; done; \
         if ln -s /etc/passwd '{runs}'/x 2>/dev/null; then echo PLANTED link; \
         else echo REFUSED link; fi",
        runs = runs.display()
    );
    let coordinator_look = format!("ls -A '{}'", runs.display());
    let scenario = json!({"agents": [
        {"role": "clarifier", "turns": [text(
            "## 目标\n做 X\n\n## 验收标准\n- 有 x.txt\n\n## 边界\n无\n\n## 未知与假设\n- 无\n")]},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [text(
            "## 目标\n工作区有 x.txt\n\n## 判定清单\n- `test -e x.txt` 成功\n")]},
        {"role": "judge", "prompt": "判定这一轮", "turns": [
            {"content": [bash(&look), tool("Read", json!({"file_path": "runs/manifest.json"}))]},
            text("## 结论\nACHIEVED\n\n## 理由\n看到了\n\n## 未通过\n无\n")]},
        {"role": "coordinator", "turns": [
            {"content": [bash(&coordinator_look),
                         tool("Read", json!({"file_path": "runs/lineage.json"}))]},
            {"content": [tool("Agent", json!({
                "description": "看看", "prompt": "看看运行目录", "subagent_type": "coder"}))]},
            text("完成")]},
        {"role": "worker", "prompt": "看看运行目录", "turns": [
            {"content": [bash(&look),
                         tool("Write", json!({"file_path": "x.txt", "content": "x\n"}))]},
            text("结论:好\n依据:无\n产出:x.txt\n未验证:无")]},
    ]});
    let model = ScriptedModel::start(&scenario);
    let (code, out, took) = run(
        &p,
        &model,
        &[
            "go",
            "--isolate",
            "--judge-can-run",
            "--timeout",
            "0",
            "做 X",
        ],
    );
    let (planted_n, refused_n) = plant_counts(&model);
    let results = model.tool_results();
    let reads: Vec<&(String, String, bool)> =
        results.iter().filter(|(n, _, _)| n == "Read").collect();
    let listing = results
        .iter()
        .find(|(n, t, _)| n == "Bash" && !t.contains("REFUSED"))
        .map(|(_, t, _)| t.clone())
        .unwrap_or_default();
    eprintln!(
        "--isolate: exit {code:?} in {:.1} s; {refused_n} reads/plants from the judge's and \
         the worker's containers refused, {planted_n} succeeded; file-tool reads: {reads:?}; \
         the coordinator's listing: {listing}\n{out}",
        took.as_secs_f64()
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(refused_n, 10, "both looks ran");
    assert_eq!(planted_n, 0);
    assert_eq!(reads.len(), 2);
    assert!(reads.iter().all(|(_, _, e)| *e), "{reads:?}");
    for f in ["manifest.json", "lineage.json", "sessions.db"] {
        assert!(!listing.contains(f), "the coordinator saw {f}: {listing}");
        assert!(runs.join(f).is_file(), "{f} is not where the host keeps it");
    }
}

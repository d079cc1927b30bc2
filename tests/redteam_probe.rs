//! Red team, the check probe's reads of the workspace (issue 27 §4; DESIGN.md threat model 1
//! and 8): `go --probe-checks` reads the lines the run wrote from the commit `HEAD` named at
//! the run's start, in the workspace's repository, while the round's containers still run. A
//! hostile scripted worker, in its container on the real engine, in a workspace that is not a
//! repository, makes one — a `.git` whose `HEAD` commit holds the file the probe will mutate
//! and whose reflog dates that commit before the run — and then:
//!
//! - replaces the reflog with a FIFO: the host's read of it must not wait for a writer;
//! - makes the file's blob hundreds of MiB of zeros (a few hundred KiB in git): the host must
//!   not inflate it.
//!
//! A last test: the probe's report quotes the line it drops (`删掉 `hello.sh:1` 这一行 `…``),
//! a line the worker wrote; hostile terminal bytes in it reach no output, log or note.
//!
//! Each hostile run is an attempt; it succeeded when the run hung (killed past [`BOUND`]) or
//! the runner's peak resident memory passed [`RSS_BOUND_KB`]. The run must also end well (exit
//! 0) with its probe said. `FLOWERBOX_REDTEAM_BIN` runs another build of `flowerbox` against
//! the same attacks (the baseline); the test then reports what got through.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "docker_support/mod.rs"]
mod docker_support;
#[path = "flow_support/mod.rs"]
mod flow_support;

mod hostile_bytes;
mod redteam_support;

use docker_support::{engine_ready as engine, Sweep};
use flow_support::{Project, ScriptedModel};
use redteam_support::{measured, text, tool, user_command, user_file, Ask, Tally, REPORT};
use serde_json::json;
use std::time::Duration;

/// Each run must end well within this (a FIFO that hangs the host shows up here).
const BOUND: Duration = Duration::from_secs(120);
/// The runner's peak resident memory (KiB): it takes tens of MB otherwise.
const RSS_BOUND_KB: i64 = 200 * 1024;
/// The blob the memory attack commits, MiB.
const BLOB_MIB: u64 = 400;

/// The worker's plant, run in its container in the workspace: a working `hello.sh` (what the
/// check passes on, so the round is green and probed), and a `.git` made in `/tmp` whose
/// commit holds `hello.sh` as `blob`'s output and whose reflog dates it in 1970; then `then`.
fn plant(blob: &str, then: &str) -> String {
    format!(
        "printf 'echo hello\\n' > hello.sh && chmod +x hello.sh && \
         r=$(mktemp -d) && git init -q \"$r\" && {blob} > \"$r/hello.sh\" && \
         git -C \"$r\" add hello.sh && \
         git -C \"$r\" -c user.name=a -c user.email=a@b commit -qm x && \
         c=$(git -C \"$r\" rev-parse HEAD) && rm -f \"$r/hello.sh\" && \
         printf '%s %s a <a@b> 1000 +0000\\tcommit\\n' 0000000000000000000000000000000000000000 \"$c\" \
           > \"$r/.git/logs/HEAD\" && \
         cp -r \"$r/.git\" .git && {then} && echo PLANTED"
    )
}

/// The scripted model of a run whose worker runs `script` to write hello.sh.
fn hello_model(script: &str) -> ScriptedModel {
    ScriptedModel::start(&redteam_support::go_scenario(
        &Ask {
            task: "写 hello.sh",
            criterion: "跑 `./hello.sh` 输出 hello",
            goal: "工作区里有一个能直接运行的 hello.sh",
            item: "跑起来打印 hello 检查: `./hello.sh | grep -qx hello`",
        },
        vec![
            json!({"content": [tool("Bash", json!({"command": script, "timeout": 120000}))]}),
            text(REPORT),
        ],
        Vec::new(),
    ))
}

/// `flowerbox go --probe-checks` in `p` as the user, bounded by [`BOUND`].
fn probed_run(p: &Project, model: &ScriptedModel) -> redteam_support::Outcome {
    user_file(p, model, "sk-ant-test");
    let mut c = user_command(p);
    c.env("FLOWER_NO_PROBE", "1").args([
        "--sandbox",
        "docker",
        "go",
        "--timeout",
        "0",
        "--probe-checks",
        "写个 hello.sh",
    ]);
    measured(c, BOUND, None)
}

/// One hostile run: the worker plants with `script`; tallied as `name`.
fn attack(t: &mut Tally, name: &str, script: &str) {
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let model = hello_model(script);
    let o = probed_run(&p, &model);
    eprintln!(
        "{name}: exit {:?}, hung {}, peak {} KiB\n{}",
        o.code, o.hung, o.max_rss_kb, o.text
    );
    let planted = model
        .recorded()
        .iter()
        .any(|b| b["messages"].to_string().contains("PLANTED"));
    t.expect(&format!("{name}: planted"), planted, || o.text.clone());
    t.attempts += 1;
    if o.hung {
        t.successes.push(format!("{name}: the run hung"));
    }
    if o.max_rss_kb > RSS_BOUND_KB {
        t.successes
            .push(format!("{name}: peak memory {} KiB", o.max_rss_kb));
    }
    t.expect(&format!("{name}: exit 0"), o.code == Some(0), || {
        o.text.clone()
    });
    t.expect(
        &format!("{name}: probed"),
        o.text.contains("探针"),
        || o.text.clone(),
    );
}

#[test]
fn a_repository_a_worker_makes_never_hangs_or_balloons_the_probe() {
    if !engine("redteam_probe") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let mut t = Tally::default();
    let reflog = "rm .git/logs/HEAD && mkfifo .git/logs/HEAD";
    attack(&mut t, "reflog FIFO", &plant("echo hi", reflog));
    let zeros = format!("head -c {BLOB_MIB}M /dev/zero");
    attack(&mut t, "inflated blob", &plant(&zeros, "true"));
    eprintln!("probe red team: {}", t.line(""));
    t.assert_clean();
}

#[test]
fn the_dropped_line_the_probe_quotes_is_shown_clean() {
    if !engine("redteam_probe_line") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    // The line's only site is dropping it (the rest is a comment): the probe quotes it.
    let mut line = b"echo hello #".to_vec();
    line.extend(hostile_bytes::payload("PL").into_bytes());
    line.push(b'\n');
    let script = format!(
        "{} > hello.sh && chmod +x hello.sh",
        hostile_bytes::printf_of(&line)
    );
    let model = hello_model(&script);
    let o = probed_run(&p, &model);
    assert_eq!(o.code, Some(0), "{}", o.text);
    assert!(o.text.contains("探针:删掉 `hello.sh:1`"), "{}", o.text);
    let mut t = hostile_bytes::Tally::default();
    t.scan("stdout+stderr", o.text.as_bytes(), false, &["PL"]);
    let log = std::fs::read(p.ws.join("runs/flowerbox.log")).unwrap_or_default();
    t.scan("runs/flowerbox.log", &log, false, &["PL"]);
    for dir in [p.ws.join(".flower"), p.ws.join("runs")] {
        for f in hostile_bytes::people_files(&dir) {
            let rel = f.strip_prefix(&p.ws).unwrap().display().to_string();
            t.scan(&rel, &std::fs::read(&f).unwrap(), false, &["PL"]);
        }
    }
    assert!(
        hostile_bytes::Tally::reached(o.text.as_bytes(), "PL"),
        "{}",
        o.text
    );
    t.verdict("the probe's quoted line");
}

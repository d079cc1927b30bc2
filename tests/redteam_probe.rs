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

/// One hostile run: the worker plants with `script`; tallied as `name`.
fn attack(t: &mut Tally, name: &str, script: &str) {
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let model = ScriptedModel::start(&redteam_support::go_scenario(
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
    ));
    user_file(&p, &model, "sk-ant-test");
    let mut c = user_command(&p);
    c.env("FLOWER_NO_PROBE", "1").args([
        "--sandbox",
        "docker",
        "go",
        "--timeout",
        "0",
        "--probe-checks",
        "写个 hello.sh",
    ]);
    let o = measured(c, BOUND, None);
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

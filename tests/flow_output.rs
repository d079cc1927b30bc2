//! A run whose own output goes into the project (`> o 2> e`, `| tee run.log`) is judged like
//! any other: its log growing while the judge looks is not a change to the judged workspace
//! (DESIGN.md invariant 8). A real change while the judge looks still voids ACHIEVED, and the
//! terminal says so at once, naming the file.
//!
//! The plain-directory and repository cases use `--sandbox host` (the flow tests' default); the
//! `--isolate` case runs on the real engine.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;

use docker_support::{engine_or_skip, SERIAL};
use flow_support::*;
use flowerbox_testkit::git;
use std::fs::File;
use std::process::{Command, Stdio};

/// The request of every test.
const ASK: &str = "写个 hello.sh";

/// A workspace that is a repository with one commit.
fn make_repo(p: &Project) {
    git(&p.ws, &["init", "-q", "-b", "main"]);
    git(&p.ws, &["config", "user.name", "Test User"]);
    git(&p.ws, &["config", "user.email", "test@example.invalid"]);
    std::fs::write(p.ws.join("README.md"), "proj\n").unwrap();
    git(&p.ws, &["add", "."]);
    git(&p.ws, &["commit", "-q", "-m", "init"]);
}

/// Runs `cmd` with stdout and stderr into `<ws>/o` and `<ws>/e`; returns the exit code and
/// both files' text.
fn run_into_files(p: &Project, mut cmd: Command) -> (i32, String, String) {
    let (o, e) = (p.ws.join("o"), p.ws.join("e"));
    cmd.stdout(File::create(&o).unwrap())
        .stderr(File::create(&e).unwrap());
    let r = finish(cmd.spawn().expect("spawn flowerbox"));
    let out = std::fs::read_to_string(&o).unwrap();
    let err = std::fs::read_to_string(&e).unwrap();
    (r.code(), out, err)
}

/// The verdict record, and the check that both of `flow_go`'s verdicts stood as given.
fn assert_judged_as_scripted(p: &Project, notes: &std::path::Path) {
    let record = std::fs::read_to_string(notes.join("判定记录.md")).unwrap();
    assert!(record.contains("— ACHIEVED"), "{record}");
    assert!(!record.contains("作废"), "{record}");
    let steps: Vec<String> = p
        .manifest()
        .iter()
        .filter_map(|r| r["step"].as_str().map(str::to_string))
        .collect();
    assert!(!steps.iter().any(|s| s.contains("round3")), "{steps:?}");
}

#[test]
fn output_redirected_into_a_plain_directory_is_not_judged_content() {
    let p = Project::new();
    let model = ScriptedModel::start(&scenario("flow_go"));
    let cmd = p.command(&model, &["--timeout", "0", ASK]);
    let (code, out, err) = run_into_files(&p, cmd);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("ACHIEVED"), "the log really grew: {out}");
    assert_judged_as_scripted(&p, &p.ws.join(".flower/notes"));
}

#[test]
fn output_through_tee_into_a_repository_is_not_judged_content() {
    let p = Project::new();
    make_repo(&p);
    let model = ScriptedModel::start(&scenario("flow_go"));
    let log = p.ws.join("run.log");
    let mut tee = Command::new("tee")
        .arg(&log)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut cmd = p.command(&model, &["--timeout", "0", ASK]);
    cmd.stdout(Stdio::from(tee.stdin.take().unwrap()))
        .stderr(File::create(p.ws.join("err")).unwrap());
    let r = finish(cmd.spawn().expect("spawn flowerbox"));
    drop(cmd); // the Command still holds tee's stdin; tee ends at EOF
    tee.wait().unwrap();
    let out = std::fs::read_to_string(&log).unwrap();
    assert_eq!(r.code(), 0, "{out}");
    assert!(out.contains("ACHIEVED"), "{out}");
    assert_judged_as_scripted(&p, &p.ws.join(".flower/notes"));
}

#[test]
fn a_change_by_the_judge_voids_achieved_and_says_so_at_once() {
    // flow_go with a first judge that appends to hello.sh, then says ACHIEVED. Under
    // `--sandbox host` nothing stops its write; the binding must.
    let mut s = scenario("flow_go");
    let judge2 = s["agents"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|a| a["agent"] == "judge-2")
        .unwrap();
    judge2["turns"] = serde_json::json!([
        {"content": [{"type": "tool_use", "name": "Bash",
                      "input": {"command": "echo '# judged' >> hello.sh"}}]},
        {"content": [{"type": "text",
                      "text": "## 结论\nACHIEVED\n\n## 理由\n我看过了\n\n## 未通过\n无\n"}]}
    ]);
    let p = Project::new();
    let model = ScriptedModel::start(&s);
    let cmd = p.command_in("host", &model, &["--timeout", "0", "--judge-can-run", ASK]);
    let (code, out, err) = run_into_files(&p, cmd);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // On screen: the voiding right after the verdict it voids, naming the file, before round 2.
    let achieved = out.find("我看过了").expect(&out);
    let void = out[achieved..]
        .find("作废")
        .map(|i| i + achieved)
        .unwrap_or_else(|| panic!("no void on screen:\n{out}"));
    let line = out[..void].rsplit('\n').next().unwrap();
    assert!(
        line.contains("hello.sh") || out[void..].lines().next().unwrap().contains("hello.sh"),
        "the void names the file:\n{out}"
    );
    let round2 = out.find("round2").unwrap_or(usize::MAX);
    assert!(void < round2, "said before round 2 starts:\n{out}");
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.contains("## 干活·判定#1 — NOT_YET"), "{record}");
    assert!(record.contains("判定期间工作区变了(hello.sh)"), "{record}");
}

#[tokio::test]
async fn isolate_go_with_output_redirected_into_the_repository_is_achieved() {
    let Some(_engine) = engine_or_skip("flow_output_isolate").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = Project::new();
    make_repo(&p);
    let model = ScriptedModel::start(&scenario("isolate_go"));
    let cmd = p.command_in(
        "docker",
        &model,
        &["go", "--isolate", "--judge-can-run", "--timeout", "0", ASK],
    );
    let (code, out, err) = run_into_files(&p, cmd);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let wb = p.ws.parent().unwrap().join(".flower-proj/notes");
    let record = std::fs::read_to_string(wb.join("判定记录.md")).unwrap();
    assert!(record.contains("— ACHIEVED"), "{record}");
    assert!(!record.contains("作废"), "{record}");
}

//! Unit tests of the workflow engine and the two mechanisms, with the in-process fake provider
//! ([`super::testkit`]), a real `sessions.db`, manifest and lineage, and the host sandbox.

use async_trait::async_trait;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::testkit::{call, first_user, last_user, say, Bench, Rule};
use super::*;
use crate::agent::human::{Absent, AskOutcome, Human};
use crate::agent::{AgentSpec, EventKind, StepResult};
use crate::flow::brief::Brief;
use crate::flow::goal::Goal;
use crate::model::Speaker;
use crate::role::Role;

const BRIEF: &str = "## 目标\n做 X\n## 验收标准\n跑 a 看到 b\n## 边界\n不做 Y\n## 未知与假设\n无人应答,假设是命令行工具\n";
const NOT_YET: &str = "## 结论\nNOT_YET\n## 理由\n缺 b\n## 未通过\n- 跑 b 看到 c:没有 c\n";
const ACHIEVED: &str = "## 结论\nACHIEVED\n## 理由\n都看到了\n## 未通过\n无\n";
const UNREACHABLE: &str = "## 结论\nUNREACHABLE\n## 理由\n缺少 X 依赖\n## 未通过\n- 跑 b\n";

fn agent() -> AgentSpec {
    AgentSpec::new("coordinator", Role::Coordinator, "")
}

fn work(turns: Vec<Vec<crate::model::ContentBlock>>) -> Rule {
    Rule {
        role: Role::Coordinator,
        agent: "coordinator",
        prompt: "做 X",
        turns,
    }
}

fn judge(agent: &'static str, text: &str) -> Rule {
    Rule {
        role: Role::Judge,
        agent,
        prompt: "判定这一轮",
        turns: vec![say(text)],
    }
}

fn write_goal(b: &Bench) {
    Goal {
        statement: "做 X".into(),
        checks: vec!["跑 a 看到 b".into(), "跑 b 看到 c".into()],
        ..Goal::default()
    }
    .write(&b.note("目标.md"))
    .unwrap();
}

fn row_session(rt: &crate::agent::Runtime, step: &str) -> Option<String> {
    rt.manifest()
        .unwrap()
        .rows()
        .into_iter()
        .find(|r| r.step == step)
        .and_then(|r| r.session_id)
}

/// The step `干活` (`做 X`) guarded by the goal in `目标.md`: `rounds` rounds, the judge
/// allowed to run commands when `can_run`.
fn guarded(b: &Bench, rounds: u32, can_run: bool) -> Step {
    with_goal(
        Step::new("干活", agent(), "做 X"),
        b.note("目标.md"),
        rounds,
        can_run,
    )
}

/// `step` alone as workflow `t` on `rt`: how it ended and its context.
async fn run_alone(rt: &Arc<crate::agent::Runtime>, step: Step) -> (Completion, Ctx) {
    let mut ctx = Ctx::default();
    let end = Workflow::new("t", vec![step])
        .run(rt, &mut ctx)
        .await
        .unwrap();
    (end, ctx)
}

#[tokio::test]
async fn a_rejected_attempt_is_sent_back_into_its_session_as_a_round() {
    let b = Bench::new(vec![work(vec![say("第一遍"), say("第二遍")])]);
    let rt = b.runtime(Arc::new(Absent));
    let step = Step::new("干活", agent(), "做 X")
        .retries(2)
        .gate(|r: &StepResult, _: &mut Ctx| Ok(r.text == "第二遍"))
        .on_reject(|_r: &StepResult, _: &Ctx| "补上 c".to_string());
    let (end, ctx) = run_alone(&rt, step).await;
    assert_eq!(end, Completion::Finished);
    assert_eq!(Bench::steps(&rt), ["干活", "干活#round2"]);
    assert_eq!(row_session(&rt, "干活"), row_session(&rt, "干活#round2"));
    let reqs = b.fake.requests("coordinator");
    assert_eq!(reqs.len(), 2);
    assert_eq!(last_user(&reqs[1]), "补上 c");
    assert!(reqs[1]
        .messages
        .iter()
        .any(|m| m.role == Speaker::Assistant && m.text() == "第一遍"));
    assert_eq!(ctx.output("干活"), Some("第二遍"));
    assert!(ctx.results["干活"].ok);
}

#[tokio::test]
async fn without_on_reject_a_retry_starts_over_in_a_new_session() {
    let b = Bench::new(vec![work(vec![say("一遍")])]);
    let rt = b.runtime(Arc::new(Absent));
    let n = Arc::new(AtomicU32::new(0));
    let seen = n.clone();
    let step = Step::new("干活", agent(), "做 X")
        .retries(3)
        .gate(move |_r: &StepResult, _: &mut Ctx| Ok(seen.fetch_add(1, Ordering::SeqCst) == 1));
    let mut ctx = Ctx::default();
    Workflow::new("t", vec![step])
        .run(&rt, &mut ctx)
        .await
        .unwrap();
    assert_eq!(Bench::steps(&rt), ["干活", "干活#retry1"]);
    assert_ne!(row_session(&rt, "干活"), row_session(&rt, "干活#retry1"));
    assert_eq!(last_user(&b.fake.requests("coordinator")[1]), "做 X");
    assert_eq!(
        n.load(Ordering::SeqCst),
        2,
        "the gate runs once per attempt"
    );
}

#[tokio::test]
async fn when_reduce_and_the_three_on_fail_policies() {
    let rule = |prompt: &'static str, text: &str| Rule {
        role: Role::Coordinator,
        agent: "coordinator",
        prompt,
        turns: vec![say(text)],
    };
    let b = Bench::new(vec![
        rule("用 filled", "B 的原话"),
        rule("C 步", "C 的半成品"),
        rule("D 步", "D 的半成品"),
        rule("E 步", "E 的半成品"),
    ]);
    let rt = b.runtime(Arc::new(Absent));
    let reject = |_r: &StepResult, _: &mut Ctx| Ok(false);
    let steps = vec![
        Step::new("A", agent(), "A 步").when(|ctx: &mut Ctx| {
            ctx.outputs.insert("A".into(), "filled".into());
            false
        }),
        Step::new(
            "B",
            agent(),
            Prompt::from_fn(|ctx: &Ctx| format!("用 {}", ctx.output("A").unwrap())),
        )
        .reduce(|r: &StepResult, _: &Ctx| format!("reduced({})", r.text)),
        Step::new("C", agent(), "C 步")
            .gate(reject)
            .on_fail(OnFail::Skip),
        Step::new("D", agent(), "D 步")
            .gate(reject)
            .on_fail(OnFail::Continue),
        Step::new("E", agent(), "E 步").gate(reject),
        Step::new("F", agent(), "F 步"),
    ];
    let mut ctx = Ctx::default();
    let end = Workflow::new("t", steps).run(&rt, &mut ctx).await.unwrap();
    assert_eq!(
        end,
        Completion::Stopped {
            step: "E".into(),
            why: "步骤 'E' 的结果没被接受".into()
        }
    );
    assert_eq!(ctx.failed_at.as_deref(), Some("E"));
    assert!(
        !ctx.results.contains_key("A"),
        "a skipped step has no result"
    );
    assert_eq!(ctx.output("A"), Some("filled"));
    assert_eq!(ctx.output("B"), Some("reduced(B 的原话)"));
    assert_eq!(ctx.output("C"), None);
    assert_eq!(ctx.output("D"), Some("D 的半成品"));
    assert_eq!(ctx.output("E"), None);
    assert_eq!(Bench::steps(&rt), ["B", "C", "D", "E"]);
}

#[tokio::test]
async fn step_abort_stops_at_once_without_spending_retries() {
    let b = Bench::new(vec![work(vec![say("装不了依赖")])]);
    let rt = b.runtime(Arc::new(Absent));
    let step = Step::new("干活", agent(), "做 X")
        .retries(3)
        .gate(|_r: &StepResult, _: &mut Ctx| Err(StepAbort("环境缺依赖,再跑几轮也一样".into())))
        .on_reject(|_r: &StepResult, _: &Ctx| "再来".to_string());
    let (end, ctx) = run_alone(&rt, step).await;
    assert_eq!(
        end,
        Completion::Stopped {
            step: "干活".into(),
            why: "环境缺依赖,再跑几轮也一样".into()
        }
    );
    assert_eq!(Bench::steps(&rt), ["干活"]);
    assert_eq!(ctx.aborted.as_deref(), Some("环境缺依赖,再跑几轮也一样"));
}

#[tokio::test]
async fn resume_from_needs_a_session_and_fork_branches_off() {
    // Turn 1 of the same conversation answers B: it continues A's history.
    let b = Bench::new(vec![work(vec![say("A 做完"), say("B 接着")])]);
    let rt = b.runtime(Arc::new(Absent));
    let steps = vec![
        Step::new("A", agent(), "做 X"),
        Step::new("B", agent(), "复核一下").resume_from("A", true),
    ];
    let mut ctx = Ctx::default();
    Workflow::new("t", steps).run(&rt, &mut ctx).await.unwrap();
    assert_ne!(
        ctx.sessions["A"], ctx.sessions["B"],
        "fork makes a new session"
    );
    let last = b.fake.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(first_user(&last), "做 X", "B sees A's history");
    assert_eq!(ctx.output("B"), Some("B 接着"));

    let rt = b.runtime(Arc::new(Absent));
    let steps = vec![
        Step::new("A", agent(), "做 X").when(|_: &mut Ctx| false),
        Step::new("B", agent(), "复核").resume_from("A", false),
    ];
    let err = Workflow::new("t", steps)
        .run(&rt, &mut Ctx::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FlowError::NoSession { step, from } if step == "B" && from == "A"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_new_process_resumes_the_step_session_from_lineage() {
    let b = Bench::new(vec![work(vec![say("一"), say("二")])]);
    let wf = || {
        Workflow::new(
            "t",
            vec![Step::new("干活", agent(), "做 X").resume_prompt("接着做")],
        )
        .continuous(b.lineage())
    };
    let rt = b.runtime(Arc::new(Absent));
    let mut ctx = Ctx::default();
    wf().run(&rt, &mut ctx).await.unwrap();
    assert_eq!(ctx.woke, 1);
    let first = ctx.sessions["干活"].clone();
    assert_eq!(b.lineage().load().unwrap().steps["干活"], first);

    let rt2 = b.runtime(Arc::new(Absent));
    let mut ctx2 = Ctx::default();
    wf().run(&rt2, &mut ctx2).await.unwrap();
    assert_eq!(ctx2.woke, 2);
    assert_eq!(ctx2.sessions["干活"], first, "same session");
    assert!(ctx2.results["干活"].resumed);
    let last = b.fake.requests("coordinator").pop().unwrap();
    assert_eq!(last_user(&last), "接着做");
    assert_eq!(ctx2.output("干活"), Some("二"));

    // A lineage session that is no longer in the store is ignored: a fresh start.
    b.lineage()
        .remember("干活", "00000000-0000-0000-0000-000000000000")
        .unwrap();
    let rt3 = b.runtime(Arc::new(Absent));
    let mut ctx3 = Ctx::default();
    Workflow::new("t", vec![Step::new("干活", agent(), "做 X")])
        .continuous(b.lineage())
        .run(&rt3, &mut ctx3)
        .await
        .unwrap();
    assert!(!ctx3.results["干活"].resumed);
    assert_eq!(ctx3.output("干活"), Some("一"));
}

#[tokio::test]
async fn goal_guard_sends_back_until_achieved_and_judges_stay_out_of_lineage() {
    let b = Bench::new(vec![
        work(vec![say("做了一半"), say("做完了")]),
        judge("judge-1", NOT_YET),
        judge("judge-2", ACHIEVED),
    ]);
    write_goal(&b);
    let rt = b.runtime(Arc::new(Absent));
    let step = guarded(&b, 3, false);
    let mut ctx = Ctx::default();
    let end = Workflow::new("t", vec![step])
        .continuous(b.lineage())
        .run(&rt, &mut ctx)
        .await
        .unwrap();
    assert_eq!(end, Completion::Finished);
    assert_eq!(
        Bench::steps(&rt),
        ["干活", "干活·判定#1", "干活#round2", "干活·判定#2"]
    );
    assert_eq!(ctx.goal_rounds, 2);
    assert!(ctx.verdict.as_ref().unwrap().achieved());
    let work_reqs = b.fake.requests("coordinator");
    let feedback = last_user(&work_reqs[1]);
    assert!(feedback.contains("跑 b 看到 c:没有 c"), "{feedback}");
    assert!(feedback.contains("未达成"), "{feedback}");
    // The judge saw only the goal and the scene: no trace of the worker's words.
    let judge_req = &b.fake.requests("judge")[0];
    assert_eq!(judge_req.messages.len(), 1, "a new session");
    assert!(first_user(judge_req).contains("跑 b 看到 c"));
    assert!(!first_user(judge_req).contains("做了一半"));
    let lin = b.lineage().load().unwrap();
    assert_eq!(lin.steps.len(), 1);
    assert_eq!(lin.steps["干活"], ctx.sessions["干活"]);
    assert_ne!(row_session(&rt, "干活·判定#1"), row_session(&rt, "干活"));
}

#[tokio::test]
async fn not_yet_on_the_last_round_stops_the_step() {
    let b = Bench::new(vec![
        work(vec![say("一"), say("二")]),
        judge("judge", NOT_YET),
    ]);
    write_goal(&b);
    let rt = b.runtime(Arc::new(Absent));
    let step = guarded(&b, 2, false);
    let (end, _) = run_alone(&rt, step).await;
    let Completion::Stopped { step, why } = end else {
        panic!("{end:?}")
    };
    assert_eq!(step, "干活");
    assert!(why.starts_with("干活·判定#2 判定未达成:"), "{why}");
    assert_eq!(Bench::steps(&rt).len(), 4);
}

#[tokio::test]
async fn unreachable_without_a_human_aborts_and_keeps_the_goal() {
    let b = Bench::new(vec![work(vec![say("一")]), judge("judge", UNREACHABLE)]);
    write_goal(&b);
    let rt = b.runtime(Arc::new(Absent));
    let step = guarded(&b, 3, false);
    let (end, _) = run_alone(&rt, step).await;
    let Completion::Stopped { step, why } = end else {
        panic!("{end:?}")
    };
    assert_eq!(step, "干活");
    assert!(why.contains("没人应答"));
    assert_eq!(Bench::steps(&rt), ["干活", "干活·判定#1"], "no more rounds");
    assert!(b.note("目标.md").exists());
}

/// A human who answers every question with `answers` in turn.
struct Answers(
    std::sync::Mutex<Vec<String>>,
    std::sync::Mutex<Vec<(String, Vec<String>)>>,
);

#[async_trait]
impl Human for Answers {
    async fn ask(
        &self,
        _asker: crate::agent::human::Asker<'_>,
        question: &str,
        options: &[String],
    ) -> AskOutcome {
        self.1
            .lock()
            .unwrap()
            .push((question.into(), options.to_vec()));
        let mut a = self.0.lock().unwrap();
        if a.is_empty() {
            AskOutcome::Timeout
        } else {
            AskOutcome::Answered(a.remove(0))
        }
    }
    fn inbox(&self) -> Vec<String> {
        Vec::new()
    }
    fn remaining(&self) -> i64 {
        -1
    }
}

#[tokio::test]
async fn unreachable_asks_the_three_options() {
    // "You judged wrong": another round, with the human's words in the feedback; then accept.
    let b = Bench::new(vec![
        work(vec![say("一"), say("二")]),
        judge("judge", UNREACHABLE),
    ]);
    write_goal(&b);
    let human = Arc::new(Answers(
        std::sync::Mutex::new(vec![
            "依赖其实装好了,在 /opt".into(),
            UNREACHABLE_ACCEPT.into(),
        ]),
        Default::default(),
    ));
    let rt = b.runtime(human.clone());
    let step = guarded(&b, 3, false);
    let (end, _) = run_alone(&rt, step).await;
    assert_eq!(end, Completion::Finished);
    let asked = human.1.lock().unwrap().clone();
    assert_eq!(asked.len(), 2);
    assert!(asked[0].0.contains("无法达成") && asked[0].0.contains("缺少 X 依赖"));
    assert_eq!(asked[0].1, guard::UNREACHABLE_OPTIONS);
    let feedback = last_user(&b.fake.requests("coordinator")[1]);
    assert!(feedback.contains("依赖其实装好了"), "{feedback}");
    assert_eq!(Bench::steps(&rt).len(), 4);

    // "Amend the goal": the amendment is appended, visibly, and judged next round.
    let b = Bench::new(vec![
        work(vec![say("一"), say("二")]),
        judge("judge-1", UNREACHABLE),
        judge("judge-2", ACHIEVED),
    ]);
    write_goal(&b);
    let human = Arc::new(Answers(
        std::sync::Mutex::new(vec![guard::UNREACHABLE_OPTIONS[1].into(), "只验 a".into()]),
        Default::default(),
    ));
    let rt = b.runtime(human);
    let step = guarded(&b, 3, false);
    assert_eq!(run_alone(&rt, step).await.0, Completion::Finished);
    let g = Goal::load(&b.note("目标.md")).unwrap().unwrap();
    assert!(
        g.statement.starts_with("做 X") && g.statement.ends_with("只验 a"),
        "{}",
        g.statement
    );
    assert!(first_user(&b.fake.requests("judge-2")[0]).contains("只验 a"));
}

const UNREACHABLE_ACCEPT: &str = guard::UNREACHABLE_OPTIONS[0];

#[tokio::test]
async fn a_workspace_change_during_judging_voids_achieved() {
    let b = Bench::new(vec![
        work(vec![say("做完了")]),
        Rule {
            role: Role::Judge,
            agent: "judge",
            prompt: "判定这一轮",
            turns: vec![
                call("Bash", json!({"command": "echo fixed > quick-fix.txt"})),
                say(ACHIEVED),
            ],
        },
    ]);
    write_goal(&b);
    let rt = b.runtime(Arc::new(Absent));
    let step = guarded(&b, 1, true);
    let (end, ctx) = run_alone(&rt, step).await;
    assert!(matches!(end, Completion::Stopped { .. }), "{end:?}");
    assert!(
        b.ws.join("quick-fix.txt").exists(),
        "the judge's command ran"
    );
    let v = ctx.verdict.unwrap();
    assert!(!v.achieved());
    assert!(v.reason.contains("quick-fix.txt"), "{}", v.reason);
}

#[tokio::test]
async fn clarify_freezes_a_complete_brief_and_is_skipped_when_one_exists() {
    let b = Bench::new(vec![Rule {
        role: Role::Clarifier,
        agent: "clarifier",
        prompt: "帮我做 X",
        turns: vec![
            call(
                "mcp__human__ask",
                json!({"question": "CLI 还是 Web?", "options": ["CLI", "Web"]}),
            ),
            say(&format!("好的。\n```\nfn main(){{}}\n```\n{BRIEF}")),
        ],
    }]);
    let rt = b.runtime(Arc::new(Absent));
    let mut ctx = Ctx::default();
    let wf = Workflow::new("t", vec![clarify_step(b.note("需求.md"), "帮我做 X")]);
    assert_eq!(wf.run(&rt, &mut ctx).await.unwrap(), Completion::Finished);
    let frozen = Brief::load(&b.note("需求.md")).unwrap().unwrap();
    assert!(frozen.is_complete());
    assert!(frozen.unknowns.contains("假设是命令行工具"));
    let out = ctx.output(CLARIFY_STEP).unwrap();
    assert!(
        out.starts_with("## 目标\n做 X") && !out.contains("fn main"),
        "{out}"
    );
    // The question timed out and the model was told to record its assumption.
    let second = &b.fake.requests("clarifier")[1];
    let fed_back = second.messages.last().unwrap().content.iter().any(|c| {
        matches!(c, crate::model::ContentBlock::ToolResult { content, .. } if content == crate::agent::human::TIMEOUT_TEXT)
    });
    assert!(fed_back, "{:?}", second.messages.last());

    // Complete brief on disk: skipped, context filled anyway.
    let rt = b.runtime(Arc::new(Absent));
    let mut ctx = Ctx::default();
    wf.run(&rt, &mut ctx).await.unwrap();
    assert_eq!(b.fake.requests("clarifier").len(), 2, "no new questions");
    assert!(Bench::steps(&rt).is_empty());
    assert!(ctx.brief.is_some() && ctx.output(CLARIFY_STEP).is_some());
}

#[test]
fn a_saved_brief_with_an_unfilled_section_says_why_it_is_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("需求.md");
    std::fs::write(
        &path,
        "# 需求确认书\n\n## 目标\n做 X\n\n## 验收标准\n(未填)\n\n## 边界\n不做 Y\n\n## 未知与假设\n无\n",
    )
    .unwrap();
    let step = clarify_step(&path, "帮我做 X");
    let mut ctx = Ctx::default();
    assert!((step.when.as_ref().unwrap())(&mut ctx));
    let why = ctx.run_reason.unwrap();
    assert!(
        why.contains("验收标准") && why.contains("重新确认需求"),
        "{why}"
    );
}

#[tokio::test]
async fn an_incomplete_brief_fails_and_names_what_is_missing() {
    let b = Bench::new(vec![Rule {
        role: Role::Clarifier,
        agent: "clarifier",
        prompt: "帮我做 X",
        turns: vec![say("## 目标\n做 X\n## 边界\n不做 Y\n```\ntruncated")],
    }]);
    let rt = b.runtime(Arc::new(Absent));
    let mut ctx = Ctx::default();
    let end = Workflow::new("t", vec![clarify_step(b.note("需求.md"), "帮我做 X")])
        .run(&rt, &mut ctx)
        .await
        .unwrap();
    assert!(matches!(end, Completion::Stopped { .. }));
    assert_eq!(
        ctx.brief_missing.unwrap(),
        vec!["验收标准".to_string(), "未知与假设".to_string()]
    );
    assert!(!b.note("需求.md").exists());
}

#[tokio::test]
async fn goal_step_freezes_the_goal_and_warns_about_unverifiable_checks_at_once() {
    let goal =
        "## 目标\n做 X\n## 判定清单\n- 跑 a 看到 b\n- 截图看界面 [此环境无法验证:没有屏幕]\n";
    let b = Bench::new(vec![Rule {
        role: Role::Judge,
        agent: "judge",
        prompt: "设定目标",
        turns: vec![say(goal)],
    }]);
    Brief::parse(BRIEF).write(&b.note("需求.md")).unwrap();
    let rt = b.runtime(Arc::new(Absent));
    let steps = vec![
        clarify_step(b.note("需求.md"), "x"),
        goal_step(b.note("目标.md")),
    ];
    let mut ctx = Ctx::default();
    Workflow::new("t", steps).run(&rt, &mut ctx).await.unwrap();
    let g = Goal::load(&b.note("目标.md")).unwrap().unwrap();
    assert_eq!(g.checks.len(), 2);
    assert!(first_user(&b.fake.requests("judge")[0]).contains("无人应答,假设是命令行工具"));
    let warned = b.events_where(|k| match k {
        EventKind::GoalUnverifiable { total, items, path } => {
            Some((*total, items.clone(), path.clone()))
        }
        _ => None,
    });
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].0, 2);
    assert_eq!(warned[0].2, ".flower/notes/目标.md");
    assert!(warned[0].1[0].contains("没有屏幕"));
    // Complete goal on disk: skipped unless always_set.
    let rt = b.runtime(Arc::new(Absent));
    let steps = vec![
        clarify_step(b.note("需求.md"), "x"),
        goal_step(b.note("目标.md")),
    ];
    Workflow::new("t", steps)
        .run(&rt, &mut Ctx::default())
        .await
        .unwrap();
    assert_eq!(b.fake.requests("judge").len(), 1);
    let rt = b.runtime(Arc::new(Absent));
    let again = GoalSetting {
        always_set: true,
        ..GoalSetting::new(b.note("目标.md"))
    }
    .step();
    Workflow::new("t", vec![clarify_step(b.note("需求.md"), "x"), again])
        .run(&rt, &mut Ctx::default())
        .await
        .unwrap();
    assert_eq!(b.fake.requests("judge").len(), 2);
}

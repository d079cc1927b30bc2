//! Probing the checks (`go --probe-checks`, issue 27 §4): a check that passes on a broken
//! candidate is worthless. After a round whose checks are all green, flowerbox copies the
//! candidate into a directory of the run's own (`runs/<id>/probe-<round>-*`, which no agent
//! sees), plants one small defect ([`super::mutate`]) in a file this run changed, runs the
//! same checks on the copy in gate containers (the copy shown read-only at the candidate's
//! path, [`super::gates::Target::Copy`]) and says whether any turned red.
//!
//! - The workspace is never written: the copy is made through directory handles without
//!   following a symlink (fsroot's walk, as the content identity reads), symlinks are copied as
//!   links, and the copy's identity must equal the candidate's (minus `.git`, which is not
//!   copied) before the defect is planted; otherwise the probe is inconclusive.
//! - "Files this run changed" are the candidate's files modified since the judging loop was
//!   built (the run's start); text files only, prose (`.md`, `.txt`…) left out. Within them the
//!   defect goes on a line the run wrote ([`super::written`]) when one has a site.
//! - Caught means a check exited with a status other than its expected one. A timeout, a cut
//!   output, a signal or a container error is inconclusive, never caught.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::checks::Check;
use super::gates::{run_checks_on, CheckStatus, GateReport, Target};
use super::mutate::{choose, seed, sites, Site};
use super::written::Baseline;
use crate::agent::Runtime;
use crate::fsroot::walk::{walk, Rules};
use crate::fsroot::{View, ViewMount};
use crate::sandbox::files::identity::{identity, Exclusions, WorkspaceIdentity};

/// Largest file read for mutation sites.
const TEXT_CAP: u64 = 1024 * 1024;
/// Extensions of prose: a defect there is not a defect a check should catch.
const PROSE: &[&str] = &[
    "md", "markdown", "txt", "rst", "adoc", "log", "lock", "csv", "svg",
];

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// These checks (ids) turned red on the mutated copy.
    Caught(Vec<String>),
    /// Every check stayed green on the mutated copy.
    Missed,
    /// No answer (why, in the screen's words).
    Inconclusive(String),
}

/// One round's probe.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// The defect planted, when one was.
    pub site: Option<Site>,
    /// What the checks did about it.
    pub outcome: Outcome,
    /// Time the probe took (copy, checks, cleanup).
    pub duration: Duration,
}

impl ProbeReport {
    /// `caught`, `missed` or `inconclusive`, for the manifest.
    pub fn kind(&self) -> &'static str {
        match self.outcome {
            Outcome::Caught(_) => "caught",
            Outcome::Missed => "missed",
            Outcome::Inconclusive(_) => "inconclusive",
        }
    }

    /// The screen line.
    pub fn screen_line(&self) -> String {
        let what = self.site.as_ref().map_or_else(String::new, Site::describe);
        let secs = format!("{:.1} s", self.duration.as_secs_f64());
        match &self.outcome {
            Outcome::Caught(ids) => format!("✓ 探针:{what} → 被 {} 抓到({secs})", ids.join("、")),
            Outcome::Missed => format!("✗ 探针:{what} → 没有一条检查失败({secs})"),
            Outcome::Inconclusive(why) if what.is_empty() => format!("? 探针没有结论:{why}"),
            Outcome::Inconclusive(why) => format!("? 探针:{what} → 没有结论:{why}"),
        }
    }

    /// What the judge and the coordinator are told when no check caught the defect.
    pub fn missed_block(&self) -> Option<String> {
        let site = self
            .site
            .as_ref()
            .filter(|_| self.outcome == Outcome::Missed)?;
        Some(format!(
            "\n\n## 探针:检查抓不住的缺陷\nflowerbox 在现场的副本里{},所有检查照样全过:没有一条检查在这里失败。\
             这些检查证明不了这处代码是对的;要靠读和自己跑去确认,或补一条能抓住它的检查。\n",
            site.describe()
        ))
    }

    /// The verdict record's block (`notes/判定记录.md`).
    pub fn record_block(&self) -> String {
        format!("{}\n\n", self.screen_line())
    }
}

/// Probes `checks` against a mutated copy of the candidate whose identity is `candidate`;
/// `since` is when the run started. Never fails: what goes wrong is inconclusive.
pub async fn run_probe(
    rt: &Arc<Runtime>,
    checks: &[Check],
    round: u32,
    since: SystemTime,
    candidate: Option<&WorkspaceIdentity>,
) -> ProbeReport {
    let started = Instant::now();
    let (site, outcome) = probe(rt, checks, round, since, candidate).await;
    ProbeReport {
        site,
        outcome,
        duration: started.elapsed(),
    }
}

#[allow(clippy::expect_used, reason = "the site is in a changed file")]
async fn probe(
    rt: &Arc<Runtime>,
    checks: &[Check],
    round: u32,
    since: SystemTime,
    candidate: Option<&WorkspaceIdentity>,
) -> (Option<Site>, Outcome) {
    let inconclusive = |s: &str| (None, Outcome::Inconclusive(s.to_string()));
    let Some(candidate) = candidate.cloned() else {
        return inconclusive("读不全现场");
    };
    let Some(run_dir) = rt
        .manifest()
        .and_then(|m| m.path().parent().map(Path::to_path_buf))
    else {
        return inconclusive("这次运行没有运行目录,没地方放副本");
    };
    let (ws, exclude) = super::guard::scene_scope(rt);
    let git = rt.workspace_git().map(Path::to_path_buf);
    let seed = seed(&rt.config().run_id, round);
    let mut mount_points = rt.config().masked.clone();
    mount_points.extend(rt.workbench().map(|w| w.root().to_path_buf()));
    let made = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("probe-{round}-"))
            .tempdir_in(&run_dir)?;
        let changed = copy_candidate(&ws, &exclude, dir.path(), since)?;
        // Mount points of what the gate box shows inside the candidate (the workbench, the
        // masked run directory): empty directories, so the engine never has to make one in a
        // read-only mount.
        for inner in &mount_points {
            if let Ok(rel) = inner.strip_prefix(&ws) {
                std::fs::create_dir_all(dir.path().join(rel))?;
            }
        }
        let copied = identity(dir.path(), &Exclusions::default())?;
        let differs: Vec<String> = candidate
            .changed(&copied)
            .into_iter()
            .filter(|p| !p.starts_with(".git:"))
            .collect();
        let site = choose(candidate_sites(&ws, git.as_deref(), since, &changed), seed);
        if let (Some(s), true) = (&site, differs.is_empty()) {
            let text = &changed.iter().find(|(p, _)| *p == s.path).expect("found").1;
            if let Some(mutated) = s.apply(text) {
                std::fs::write(dir.path().join(&s.path), mutated)?;
            }
        }
        Ok((dir, site, differs))
    })
    .await;
    let (dir, site, differs) = match made {
        Ok(Ok(made)) => made,
        Ok(Err(e)) => return inconclusive(&format!("复制现场失败:{e}")),
        Err(e) => return inconclusive(&format!("复制现场失败:{e}")),
    };
    if !differs.is_empty() {
        let shown: Vec<&str> = differs.iter().take(3).map(String::as_str).collect();
        return (
            None,
            Outcome::Inconclusive(format!("副本和现场不一样({})", shown.join("、"))),
        );
    }
    let Some(site) = site else {
        return inconclusive("这次运行改过的文件里找不到能下手的地方");
    };
    // On an engine without this machine's disk the copy goes into a volume of its own, made
    // at the copy's path: the gate boxes show it in the candidate's place (it goes with the
    // run's volumes).
    if let Some(disk) = rt.sandboxes().engine_disk() {
        let from = dir.path().to_path_buf();
        let tar =
            match tokio::task::spawn_blocking(move || crate::sandbox::engine_disk::tar_dir(&from))
                .await
            {
                Ok(Ok(tar)) => tar,
                Ok(Err(e)) => return inconclusive(&format!("打包副本失败:{e}")),
                Err(e) => return inconclusive(&format!("打包副本失败:{e}")),
            };
        if let Err(e) = disk
            .upload(dir.path(), &format!("probe-{round}"), tar)
            .await
        {
            return inconclusive(&format!("副本送不进引擎的卷:{e}"));
        }
    }
    let report = run_checks_on(
        rt,
        checks,
        &format!("probe-{round}"),
        &Target::Copy(dir.path().to_path_buf()),
    )
    .await;
    let outcome = outcome_of(&report);
    // The copy goes now; a removal that fails leaves it in the run directory, nowhere else.
    let _ = tokio::task::spawn_blocking(move || dir.close()).await;
    (Some(site), outcome)
}

/// The sites a defect may be planted at, among the `changed` files (path, text) of the
/// candidate at `ws` (its `.git` at the run's start: `git`): those on lines this run wrote
/// ([`super::written`]), or, when those lines have none (an `#include` added, a comment
/// fixed), every site of those files.
fn candidate_sites(
    ws: &Path,
    git: Option<&Path>,
    since: SystemTime,
    changed: &[(String, String)],
) -> Vec<Site> {
    let base = Baseline::at(ws, git, since);
    let mut own = Vec::new();
    let mut all = Vec::new();
    for (path, text) in changed {
        let found = sites(path, text);
        match base.as_ref().and_then(|b| b.written(path, text)) {
            Some(lines) => own.extend(found.iter().filter(|s| lines.contains(&s.line)).cloned()),
            None => own.extend(found.iter().cloned()),
        }
        all.extend(found);
    }
    if own.is_empty() {
        all
    } else {
        own
    }
}

/// What the checks on the mutated copy say.
fn outcome_of(report: &GateReport) -> Outcome {
    let caught: Vec<String> = report
        .results
        .iter()
        .filter(|r| matches!(r.status, CheckStatus::Exit { .. }))
        .map(|r| r.check.id())
        .collect();
    if !caught.is_empty() {
        return Outcome::Caught(caught);
    }
    match report.results.iter().find(|r| !r.passed()) {
        None => Outcome::Missed,
        Some(r) => Outcome::Inconclusive(format!("检查 {} {}", r.check.id(), r.status_text())),
    }
}

/// Copies the candidate at `root` (what its content identity counts, without `.git`) into the
/// empty directory `dest`; returns the text of the files modified since `since` (relative
/// path, content), the ones a defect may be planted in.
fn copy_candidate(
    root: &Path,
    exclude: &Exclusions,
    dest: &Path,
    since: SystemTime,
) -> io::Result<Vec<(String, String)>> {
    use std::os::unix::fs::PermissionsExt;
    let root = root.canonicalize()?;
    let view = View::new(
        vec![ViewMount {
            path: root.clone(),
            read_only: true,
        }],
        Vec::new(),
    );
    let base = view
        .resolve(&root, false, false)
        .map_err(io::Error::other)?;
    let rules = Rules {
        parents: false,
        global: false,
        links: true,
        skip_dirs: exclude
            .dirs
            .iter()
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect(),
        ..Rules::default()
    };
    let mode_of = |st: &rustix::fs::Stat| st.st_mode & 0o777;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))?;
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut texts = Vec::new();
    let mut failed: Option<io::Error> = None;
    walk(&view, &base, &rules, &mut |f| {
        let st = f.stat();
        if st.as_ref().is_some_and(|st| {
            exclude.files.contains(&super::outputs::FileKey {
                dev: st.st_dev,
                ino: st.st_ino,
            })
        }) {
            return true;
        }
        let Ok(rel) = f.path.strip_prefix(&root).map(Path::to_path_buf) else {
            return true;
        };
        if f.kind == rustix::fs::FileType::Symlink {
            if let Some(t) = f.read_link() {
                links.push((rel, t));
            }
            return true;
        }
        // Gone, or no longer a regular file: not part of the candidate.
        let Ok(mut file) = f.open() else { return true };
        let mut copy = || -> io::Result<()> {
            let to = dest.join(&rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut out = std::fs::File::create(&to)?;
            let mut content = Vec::new();
            (&mut file).take(TEXT_CAP + 1).read_to_end(&mut content)?;
            out.write_all(&content)?;
            if content.len() as u64 > TEXT_CAP {
                io::copy(&mut file, &mut out)?;
            } else if f.modified() >= since && plantable(&rel) {
                if let Ok(text) = String::from_utf8(content) {
                    if !text.contains('\0') {
                        texts.push((rel.to_string_lossy().into_owned(), text));
                    }
                }
            }
            if let Some(st) = &st {
                out.set_permissions(std::fs::Permissions::from_mode(mode_of(st)))?;
            }
            Ok(())
        };
        match copy() {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })
    .map_err(io::Error::from)?;
    if let Some(e) = failed {
        return Err(e);
    }
    // Links last, each parent made before any link exists: making a directory never goes
    // through a link of the copy's own.
    for (rel, _) in &links {
        if let Some(parent) = dest.join(rel).parent() {
            std::fs::create_dir_all(parent)?;
        }
    }
    for (rel, target) in &links {
        std::os::unix::fs::symlink(target, dest.join(rel))?;
    }
    Ok(texts)
}

/// A file a defect may be planted in: not prose.
fn plantable(rel: &Path) -> bool {
    let ext = rel
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    !ext.is_some_and(|e| PROSE.contains(&e.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_copy_has_the_candidates_identity_and_its_recent_texts() {
        let ws = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let w = ws.path();
        std::fs::create_dir_all(w.join("src/deep")).unwrap();
        std::fs::create_dir_all(w.join("runs/r1")).unwrap();
        std::fs::write(w.join("old.c"), "x = 1;\n").unwrap();
        let since = SystemTime::now() + Duration::from_millis(20);
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(w.join("src/deep/a.c"), "if (a == b) f();\n").unwrap();
        std::fs::write(w.join("run.sh"), "echo hi\n").unwrap();
        std::fs::set_permissions(w.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(w.join("notes.md"), "1 == 2\n").unwrap();
        std::fs::write(w.join("runs/r1/secret"), "no").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", w.join("src/link")).unwrap();
        let exclude = Exclusions {
            dirs: vec![w.join("runs")],
            files: Vec::new(),
        };
        let mut texts = copy_candidate(w, &exclude, dest.path(), since).unwrap();
        texts.sort();
        let names: Vec<&str> = texts.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, ["run.sh", "src/deep/a.c"]);
        assert_eq!(
            identity(w, &exclude).unwrap(),
            identity(dest.path(), &Exclusions::default()).unwrap()
        );
        assert!(!dest.path().join("runs").exists());
        // The link is copied as a link, never followed.
        assert_eq!(
            std::fs::read_link(dest.path().join("src/link")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn the_defect_goes_on_a_line_the_run_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let repo = git2::Repository::init(&ws).unwrap();
        let old = "/* http.c */\nint a = 1;\nint b = 2;\nif (a == b) return 3;\n";
        std::fs::write(ws.join("http.c"), old).unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("http.c")).unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@x").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &[])
            .unwrap();
        let since = SystemTime::now();
        // The run adds one statement and a comment, and writes a new file.
        let new = "/* http.c */\nint a = 1;\nwrite(fd, body, len);\n/* 7 == 8 */\nint b = 2;\nif (a == b) return 3;\n";
        let changed = vec![
            ("http.c".to_string(), new.to_string()),
            ("new.sh".to_string(), "echo 1\n".to_string()),
        ];
        let git = Some(ws.join(".git"));
        let all = candidate_sites(&ws, git.as_deref(), since, &changed);
        let places: Vec<String> = all.iter().map(Site::place).collect();
        assert_eq!(places, ["http.c:3", "new.sh:1", "new.sh:1"], "{all:?}");
        // Only an `#include` written: the rest of the file is fair game.
        let include =
            "#include <x.h>\n/* http.c */\nint a = 1;\nint b = 2;\nif (a == b) return 3;\n";
        let only = candidate_sites(
            &ws,
            git.as_deref(),
            since,
            &[("http.c".to_string(), include.to_string())],
        );
        assert!(only.iter().any(|s| s.line == 5), "{only:?}");
    }

    #[test]
    fn only_a_wrong_exit_is_caught() {
        use super::super::checks::CheckSource;
        use super::super::gates::CheckResult;
        let r = |status| CheckResult {
            check: Check::new(CheckSource::User(1), "make test"),
            status,
            duration: Duration::ZERO,
            output: String::new(),
        };
        let report = |s: Vec<CheckStatus>| GateReport {
            results: s.into_iter().map(r).collect(),
            identity: None,
        };
        assert_eq!(
            outcome_of(&report(vec![CheckStatus::Passed])),
            Outcome::Missed
        );
        assert_eq!(
            outcome_of(&report(vec![
                CheckStatus::TimedOut,
                CheckStatus::Exit {
                    code: 1,
                    expected: 0
                }
            ])),
            Outcome::Caught(vec!["user-1".into()])
        );
        for s in [
            CheckStatus::TimedOut,
            CheckStatus::Truncated,
            CheckStatus::Signal("SIGKILL".into()),
            CheckStatus::Sandbox("x".into()),
        ] {
            assert!(matches!(
                outcome_of(&report(vec![CheckStatus::Passed, s])),
                Outcome::Inconclusive(_)
            ));
        }
    }
}

//! Bundles out and back: the engine's side is imitated by a clone made from the bundle flowerbox
//! wrote, where git commits and bundles the worker's branch.

use super::*;
use crate::isolate::objects::{ObjectLimits, Oversize};
use crate::isolate::repo::open_workspace_repo;
use crate::isolate::repo::tests::repo_with_commit;
use std::path::{Path, PathBuf};
use std::process::Command;

const BRANCH: &str = "flower/r1/worker-1";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=W", "-c", "user.email=w@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

struct Fixture {
    dir: tempfile::TempDir,
    ws: WorkspaceRepo,
    /// The engine's copy, cloned from the bundle flowerbox wrote.
    there: PathBuf,
}

fn fixture() -> Fixture {
    let (dir, ws) = repo_with_commit();
    let ws = open_workspace_repo(&ws).unwrap();
    let bundle = write_bundle(&ws.open().unwrap(), &["refs/heads/main"]).unwrap();
    let file = dir.path().join("out.bundle");
    std::fs::write(&file, &bundle).unwrap();
    let there = dir.path().join("there");
    git(
        dir.path(),
        &["clone", "-q", file.to_str().unwrap(), "there"],
    );
    git(&there, &["bundle", "verify", "-q", file.to_str().unwrap()]);
    git(&there, &["checkout", "-q", "-B", "main", "origin/main"]);
    git(&there, &["checkout", "-q", "-b", BRANCH]);
    Fixture { dir, ws, there }
}

/// A commit on the engine's side; returns its id.
fn commit_there(f: &Fixture, file: &str, bytes: &[u8]) -> Oid {
    std::fs::write(f.there.join(file), bytes).unwrap();
    git(&f.there, &["add", file]);
    git(&f.there, &["commit", "-q", "-m", file]);
    Oid::from_str(&git(&f.there, &["rev-parse", "HEAD"])).unwrap()
}

/// `git bundle create` on the engine's side, of `revs`.
fn bundle_there(f: &Fixture, revs: &[&str]) -> Vec<u8> {
    let out = f.dir.path().join("back.bundle");
    let mut args = vec!["bundle", "create", "-q", out.to_str().unwrap()];
    args.extend(revs);
    git(&f.there, &args);
    std::fs::read(out).unwrap()
}

fn branch(f: &Fixture) -> Option<Oid> {
    f.ws.open()
        .unwrap()
        .refname_to_id(&format!("refs/heads/{BRANCH}"))
        .ok()
}

#[test]
fn the_branch_comes_back_thin_checked_and_once() {
    let f = fixture();
    let tip = commit_there(&f, "new.txt", b"from the engine\n");
    // Thin: only what main lacks, main a prerequisite.
    let bundle = bundle_there(&f, &[&format!("main..{BRANCH}")]);
    let (header, _) = parse_header(&bundle).unwrap();
    assert_eq!(header.prerequisites.len(), 1);
    let moved = receive(&f.ws, &bundle, BRANCH, Policy::Follow).unwrap();
    assert_eq!(
        moved,
        Adopted::Moved {
            from: None,
            to: tip
        }
    );
    let repo = f.ws.open().unwrap();
    let tree = repo.find_commit(tip).unwrap().tree().unwrap();
    let blob = tree.get_name("new.txt").unwrap().to_object(&repo).unwrap();
    assert_eq!(blob.as_blob().unwrap().content(), b"from the engine\n");
    assert_eq!(
        receive(&f.ws, &bundle, BRANCH, Policy::Follow).unwrap(),
        Adopted::Unchanged
    );
    // The quarantine is gone.
    let left: Vec<_> = std::fs::read_dir(f.ws.commondir.join("flowerbox"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bundles_naming_other_refs_or_missing_commits_are_refused_unread() {
    let f = fixture();
    commit_there(&f, "x.txt", b"x");
    let other = bundle_there(&f, &["main"]);
    assert!(matches!(
        receive(&f.ws, &other, BRANCH, Policy::Follow),
        Err(IsolateError::Bundle(BundleRefusal::Refs { .. }))
    ));
    let two = bundle_there(&f, &["main", BRANCH]);
    assert!(matches!(
        receive(&f.ws, &two, BRANCH, Policy::Follow),
        Err(IsolateError::Bundle(BundleRefusal::Refs { .. }))
    ));
    // Based on a commit the repository never had.
    let x = commit_there(&f, "y.txt", b"y");
    commit_there(&f, "z.txt", b"z");
    let thin = bundle_there(&f, &[&format!("{x}..{BRANCH}")]);
    assert!(matches!(
        receive(&f.ws, &thin, BRANCH, Policy::Follow),
        Err(IsolateError::Bundle(BundleRefusal::Prerequisite(p))) if p == x
    ));
    let mut v3 = b"# v3 git bundle\n".to_vec();
    v3.extend_from_slice(&other[16..]);
    assert!(matches!(
        receive(&f.ws, &v3, BRANCH, Policy::Follow),
        Err(IsolateError::Bundle(BundleRefusal::NotABundle))
    ));
    assert!(matches!(
        parse_header(b"# v2 git bundle\nnot a ref line\n\n"),
        Err(BundleRefusal::Header(_))
    ));
    assert!(matches!(
        parse_header(b"# v2 git bundle\n"),
        Err(BundleRefusal::Header(_))
    ));
    assert_eq!(branch(&f), None);
}

#[test]
fn a_damaged_pack_or_a_tip_it_lacks_moves_nothing() {
    let f = fixture();
    let tip = commit_there(&f, "new.txt", b"payload that the pack carries");
    let bundle = bundle_there(&f, &[&format!("main..{BRANCH}")]);
    let (_, at) = parse_header(&bundle).unwrap();
    // A byte of the pack changed: the indexer's checksums refuse it.
    let mut damaged = bundle.clone();
    let mid = at + (damaged.len() - at) / 2;
    damaged[mid] ^= 0x55;
    assert!(receive(&f.ws, &damaged, BRANCH, Policy::Follow).is_err());
    // The header names a tip the pack does not hold.
    let forged_tip = Oid::from_str("1234567890123456789012345678901234567890").unwrap();
    let text =
        String::from_utf8_lossy(&bundle[..at]).replace(&tip.to_string(), &forged_tip.to_string());
    let mut forged = text.into_bytes();
    forged.extend_from_slice(&bundle[at..]);
    assert!(receive(&f.ws, &forged, BRANCH, Policy::Follow).is_err());
    assert_eq!(branch(&f), None);
    let repo = f.ws.open().unwrap();
    assert!(
        !repo.odb().unwrap().exists(tip),
        "an object of a refused bundle was taken"
    );
}

#[test]
fn objects_over_the_limits_are_refused_by_their_headers() {
    let mut f = fixture();
    let tip = commit_there(&f, "big.bin", &vec![0u8; 3 << 20]);
    let bundle = bundle_there(&f, &[&format!("main..{BRANCH}")]);
    f.ws.limits = ObjectLimits {
        object: 1 << 20,
        branch: 1 << 30,
    };
    match receive(&f.ws, &bundle, BRANCH, Policy::Follow) {
        Err(IsolateError::TooLarge { what, .. }) => assert!(matches!(what, Oversize::Object(_))),
        other => panic!("{other:?}"),
    }
    assert_eq!(branch(&f), None);
    assert!(!f.ws.open().unwrap().odb().unwrap().exists(tip));
}

//! Bringing a worker's branch back, on the host: the worker's git is imitated by git writing
//! into the worker's own store, and its branch file written as its container would.

use super::*;
use crate::isolate::objects::Oversize;
use crate::isolate::repo::open_workspace_repo;
use crate::isolate::repo::tests::repo_with_commit;
use crate::isolate::worktree::{add, NewWorktree};
use crate::record::owner::Owner;
use std::process::Command;

struct Fixture {
    _dir: tempfile::TempDir,
    ws: WorkspaceRepo,
    wt: NewWorktree,
}

fn fixture() -> Fixture {
    let (dir, ws) = repo_with_commit();
    let r = open_workspace_repo(&ws).unwrap();
    let root = dir.path().canonicalize().unwrap().join("wt");
    let wt = add(
        &r.open().unwrap(),
        &root,
        "r1",
        "worker-1",
        &Owner::current().unwrap(),
    )
    .unwrap();
    Fixture {
        _dir: dir,
        ws: r,
        wt,
    }
}

/// git in the worktree writing objects where the worker's container would.
fn worker_git(f: &Fixture, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=W", "-c", "user.email=w@example.invalid"])
        .args(args)
        .current_dir(&f.wt.path)
        .env("GIT_OBJECT_DIRECTORY", f.wt.state.objects())
        .env(
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            f.ws.commondir.join("objects"),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A commit on top of `parent` with `file` = `text`, made in the worker's store only.
fn worker_commit(f: &Fixture, parent: &str, file: &str, text: &str) -> Oid {
    std::fs::write(f.wt.path.join(file), text).unwrap();
    worker_git(f, &["add", file]);
    let tree = worker_git(f, &["write-tree"]);
    Oid::from_str(&worker_git(
        f,
        &["commit-tree", &tree, "-p", parent, "-m", file],
    ))
    .unwrap()
}

fn set_worker_branch(f: &Fixture, id: &str) {
    let leaf = f.wt.branch.rsplit('/').next().unwrap();
    std::fs::write(f.wt.state.dir().join("refs").join(leaf), format!("{id}\n")).unwrap();
}

fn real(f: &Fixture) -> Oid {
    f.ws.open()
        .unwrap()
        .refname_to_id(&format!("refs/heads/{}", f.wt.branch))
        .unwrap()
}

#[test]
fn the_workers_commits_come_back_checked_and_only_once() {
    let f = fixture();
    let base = real(&f);
    let c1 = worker_commit(&f, &base.to_string(), "w.txt", "w\n");
    assert!(!f.ws.open().unwrap().odb().unwrap().exists(c1));
    set_worker_branch(&f, &c1.to_string());
    assert_eq!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Moved {
            from: Some(base),
            to: c1
        }
    );
    assert_eq!(real(&f), c1);
    assert_eq!(f.wt.state.synced(), Some(c1));
    let repo = f.ws.open().unwrap();
    let blob = repo
        .find_commit(c1)
        .unwrap()
        .tree()
        .unwrap()
        .get_path(std::path::Path::new("w.txt"))
        .unwrap()
        .id();
    assert_eq!(repo.find_blob(blob).unwrap().content(), b"w\n");
    flowerbox_testkit::git(&f.ws.workdir, &["fsck", "--strict"]);
    assert_eq!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Unchanged
    );
    // The worker rewinds its branch: its run follows it.
    set_worker_branch(&f, &base.to_string());
    assert!(matches!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Moved { to, .. } if to == base
    ));
}

#[test]
fn a_sweep_only_moves_forward_and_keeps_a_diverged_copy() {
    let f = fixture();
    let base = real(&f);
    let mine = worker_commit(&f, &base.to_string(), "w.txt", "w\n");
    set_worker_branch(&f, &mine.to_string());
    // Meanwhile the real branch moved elsewhere (the user, after a crash).
    let repo = f.ws.open().unwrap();
    let sig = git2::Signature::now("U", "u@example.invalid").unwrap();
    let tree = repo.find_commit(base).unwrap().tree().unwrap();
    let parent = repo.find_commit(base).unwrap();
    let users = repo
        .commit(
            Some(&format!("refs/heads/{}", f.wt.branch)),
            &sig,
            &sig,
            "user",
            &tree,
            &[&parent],
        )
        .unwrap();
    assert_eq!(
        adopt(&f.ws, &f.wt.state, Policy::FastForward).unwrap(),
        Adopted::Diverged { tip: mine }
    );
    assert_eq!(real(&f), users);
    assert_ne!(f.wt.state.synced(), Some(mine));
    // The worker's commit itself is safe in the repository now.
    assert!(repo.odb().unwrap().exists(mine));
}

#[test]
fn forged_linked_or_foreign_objects_are_refused_and_the_branch_stays() {
    let f = fixture();
    let base = real(&f);
    let store = f.wt.state.objects();
    // A loose object stored under another object's name.
    let c1 = worker_commit(&f, &base.to_string(), "w.txt", "w\n");
    let hex = c1.to_string();
    let loose = store.join(&hex[..2]).join(&hex[2..]);
    let forged = "1111111111111111111111111111111111111111";
    std::fs::create_dir_all(store.join("11")).unwrap();
    std::fs::copy(&loose, store.join("11").join(&forged[2..])).unwrap();
    set_worker_branch(&f, forged);
    let e = adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap_err();
    assert!(e.to_string().contains(forged), "{e}");
    assert_eq!(real(&f), base);

    // The tip's object is a symlink to a file elsewhere (here: the real object, so only the
    // link is wrong): never followed.
    let elsewhere = f.ws.commondir.join("flowerbox").join("elsewhere");
    std::fs::rename(&loose, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &loose).unwrap();
    set_worker_branch(&f, &hex);
    assert!(adopt(&f.ws, &f.wt.state, Policy::Follow).is_err());
    assert_eq!(real(&f), base);

    // The object lives in another repository that the store's alternates name: not followed.
    let (_d2, other) = repo_with_commit();
    std::fs::remove_file(&loose).unwrap();
    let other_objects = other.join(".git/objects");
    std::fs::create_dir_all(other_objects.join(&hex[..2])).unwrap();
    std::fs::rename(&elsewhere, other_objects.join(&hex[..2]).join(&hex[2..])).unwrap();
    std::fs::write(
        store.join("info/alternates"),
        format!("{}\n", other_objects.display()),
    )
    .unwrap();
    assert!(adopt(&f.ws, &f.wt.state, Policy::Follow).is_err());
    assert_eq!(real(&f), base);

    // A tip that is no commit, and a tip file that is a symlink or garbage.
    let known = worker_git(&f, &["hash-object", "-w", "a.txt"]);
    std::fs::write(f.wt.path.join("new.txt"), "new\n").unwrap();
    let new = worker_git(&f, &["hash-object", "-w", "new.txt"]);
    for blob in [known, new] {
        set_worker_branch(&f, &blob);
        assert!(adopt(&f.ws, &f.wt.state, Policy::Follow).is_err(), "{blob}");
    }
    let leaf = f.wt.state.dir().join("refs/worker-1");
    std::fs::remove_file(&leaf).unwrap();
    std::os::unix::fs::symlink(f.ws.commondir.join("refs/heads/main"), &leaf).unwrap();
    assert_eq!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Unchanged
    );
    assert_eq!(real(&f), base);
    // What the worker's index names comes over for a kept worktree; the forged object not.
    let (written, refused) =
        import_all(&f.ws.open().unwrap(), &f.wt.state, &ObjectLimits::default()).unwrap();
    assert!(written >= 2 && refused == 1, "{written} {refused}");
    assert!(!f
        .ws
        .open()
        .unwrap()
        .odb()
        .unwrap()
        .exists(Oid::from_str(forged).unwrap()));
    flowerbox_testkit::git(&f.ws.workdir, &["fsck", "--strict"]);
}

/// A commit on top of `parent` adding `file` with `mib` MiB of zeros, in the worker's store.
fn worker_zeros(f: &Fixture, parent: &str, file: &str, mib: usize) -> Oid {
    let path = f.wt.path.join(file);
    std::fs::write(&path, vec![0u8; mib << 20]).unwrap();
    worker_git(f, &["add", file]);
    std::fs::remove_file(&path).unwrap();
    let tree = worker_git(f, &["write-tree"]);
    Oid::from_str(&worker_git(
        f,
        &["commit-tree", &tree, "-p", parent, "-m", file],
    ))
    .unwrap()
}

fn with_limits(f: &mut Fixture, object_mib: u64, branch_mib: u64) {
    f.ws.limits = ObjectLimits {
        object: object_mib << 20,
        branch: branch_mib << 20,
    };
}

#[test]
fn an_object_over_the_limit_is_refused_by_its_header_and_the_branch_stays() {
    let mut f = fixture();
    let base = real(&f);
    let big = worker_zeros(&f, &base.to_string(), "zeros.bin", 24);
    set_worker_branch(&f, &big.to_string());
    with_limits(&mut f, 16, 1024);
    let e = adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap_err();
    let IsolateError::TooLarge {
        what: Oversize::Object(_),
        size,
        limit,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!((*size, *limit), (24 << 20, 16 << 20));
    assert!(e.to_string().contains("FLOWERBOX_OBJECT_LIMIT"), "{e}");
    assert_eq!(real(&f), base);
    assert_ne!(f.wt.state.synced(), Some(big));
    // Nothing of the branch is in the repository: no commit or tree without its blob.
    assert!(!f.ws.open().unwrap().odb().unwrap().exists(big));
    // The worker's store keeps everything: with a higher limit it comes back whole.
    with_limits(&mut f, 32, 1024);
    assert!(matches!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Moved { to, .. } if to == big
    ));
    // What the worker's index names (the refused commit's tree) comes over too.
    let (_, refused) = import_all(&f.ws.open().unwrap(), &f.wt.state, &f.ws.limits).unwrap();
    assert_eq!(refused, 0);
    flowerbox_testkit::git(&f.ws.workdir, &["fsck", "--strict"]);
}

#[test]
fn a_branch_over_its_total_is_refused_and_import_all_copies_nothing() {
    let mut f = fixture();
    let base = real(&f);
    let one = worker_zeros(&f, &base.to_string(), "one.bin", 6);
    // Different content: the second blob is a new object.
    std::fs::write(f.wt.path.join("two.bin"), vec![1u8; 6 << 20]).unwrap();
    worker_git(&f, &["add", "two.bin"]);
    let tree = worker_git(&f, &["write-tree"]);
    let two = Oid::from_str(&worker_git(
        &f,
        &["commit-tree", &tree, "-p", &one.to_string(), "-m", "two"],
    ))
    .unwrap();
    set_worker_branch(&f, &two.to_string());
    with_limits(&mut f, 8, 10);
    let e = adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap_err();
    assert!(
        matches!(
            e,
            IsolateError::TooLarge {
                what: Oversize::Branch,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("FLOWERBOX_BRANCH_LIMIT"), "{e}");
    assert_eq!(real(&f), base);
    // What was written before the limit (the first commit, whole) is complete; the tip is not.
    let repo = f.ws.open().unwrap();
    assert!(!repo.odb().unwrap().exists(two));
    // A kept worktree's objects: none is copied when they are over the limit together.
    with_limits(&mut f, 8, 5);
    let limits = f.ws.limits;
    assert!(matches!(
        import_all(&repo, &f.wt.state, &limits),
        Err(IsolateError::TooLarge {
            what: Oversize::Branch,
            ..
        })
    ));
    assert!(!repo.odb().unwrap().exists(two));
    // Within the limits the branch and everything else come back.
    with_limits(&mut f, 8, 64);
    assert!(matches!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Moved { to, .. } if to == two
    ));
    let (written, refused) = import_all(&repo, &f.wt.state, &f.ws.limits).unwrap();
    assert_eq!(refused, 0, "{written}");
    flowerbox_testkit::git(&f.ws.workdir, &["fsck", "--strict"]);
}

#[test]
fn packed_objects_are_checked_by_their_headers_too() {
    let mut f = fixture();
    let base = real(&f);
    let big = worker_zeros(&f, &base.to_string(), "zeros.bin", 12);
    // The worker packs its store: the blob is in a pack now (a possible delta base).
    let store = f.wt.state.objects();
    std::fs::create_dir_all(store.join("pack")).unwrap();
    let mut pack = Command::new("git")
        .args(["pack-objects", "--revs", "--local", "-q"])
        .arg(store.join("pack/pack"))
        .current_dir(&f.wt.path)
        .env("GIT_OBJECT_DIRECTORY", &store)
        .env(
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            f.ws.commondir.join("objects"),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(pack.stdin.as_mut().unwrap(), format!("{big}\n").as_bytes()).unwrap();
    drop(pack.stdin.take());
    assert!(pack.wait().unwrap().success());
    worker_git(&f, &["prune-packed"]);
    assert!(std::fs::read_dir(store.join("pack")).unwrap().count() >= 2);
    set_worker_branch(&f, &base.to_string());
    with_limits(&mut f, 8, 1024);
    // Not even a branch that does not name it comes back while the pack holds it.
    let small = worker_commit(&f, &base.to_string(), "w.txt", "w\n");
    set_worker_branch(&f, &small.to_string());
    let e = adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap_err();
    assert!(matches!(e, IsolateError::TooLarge { .. }), "{e}");
    assert_eq!(real(&f), base);
    // Within the limit, packed objects come back (read whole: libgit2 streams loose only).
    with_limits(&mut f, 16, 1024);
    set_worker_branch(&f, &big.to_string());
    assert!(matches!(
        adopt(&f.ws, &f.wt.state, Policy::Follow).unwrap(),
        Adopted::Moved { to, .. } if to == big
    ));
    // What the worker's index names (the refused commit's tree) comes over too.
    let (_, refused) = import_all(&f.ws.open().unwrap(), &f.wt.state, &f.ws.limits).unwrap();
    assert_eq!(refused, 0);
    flowerbox_testkit::git(&f.ws.workdir, &["fsck", "--strict"]);
}

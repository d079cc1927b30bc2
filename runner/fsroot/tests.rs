//! The resolution rules against hostile layouts: links out, links between mounts, nested and
//! masked mounts, FIFOs, swapped entries; the tree's no-follow writes; the walk's ignore rules.

use super::sys;
use super::walk::{walk, Rules};
use super::*;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    wb: PathBuf,
    outside: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, wb, outside) = (root.join("ws"), root.join("wb"), root.join("outside"));
    for d in [&ws, &wb, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(outside.join("secret"), "DECOY").unwrap();
    Scene {
        _dir: dir,
        root,
        ws,
        wb,
        outside,
    }
}

fn mount(p: &Path, read_only: bool) -> ViewMount {
    ViewMount {
        path: p.to_path_buf(),
        read_only,
    }
}

fn view(s: &Scene) -> View {
    View::new(vec![mount(&s.ws, false), mount(&s.wb, true)], Vec::new())
}

fn read(v: &View, p: &Path) -> Result<String, ViewError> {
    v.with(p, false, false, |r| r.read(1 << 20))
        .map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn plain_paths_resolve_inside_and_escapes_are_refused() {
    let s = scene();
    let v = view(&s);
    std::fs::create_dir_all(s.ws.join("a")).unwrap();
    std::fs::write(s.ws.join("a/f"), "x").unwrap();
    assert_eq!(read(&v, &s.ws.join("a/f")).unwrap(), "x");
    assert_eq!(read(&v, &s.ws.join("a/../a/./f")).unwrap(), "x");
    assert!(matches!(
        read(&v, &s.ws.join("../outside/secret")),
        Err(ViewError::Outside(_))
    ));
    assert!(matches!(
        read(&v, Path::new("/etc/passwd")),
        Err(ViewError::Outside(_))
    ));
    assert!(matches!(
        v.resolve(&s.ws.join("missing/f"), false, false),
        Err(ViewError::NotFound(_))
    ));
}

#[test]
fn links_follow_the_container_rules() {
    let s = scene();
    let v = view(&s);
    std::fs::write(s.wb.join("note"), "wb note").unwrap();
    std::fs::create_dir_all(s.ws.join("sub")).unwrap();
    std::fs::write(s.ws.join("sub/f"), "f").unwrap();
    // Relative, within the mount.
    symlink("sub/f", s.ws.join("rel")).unwrap();
    assert_eq!(read(&v, &s.ws.join("rel")).unwrap(), "f");
    // Absolute into another mount: continues there, with that mount's rights.
    symlink(s.wb.join("note"), s.ws.join("to-wb")).unwrap();
    assert_eq!(read(&v, &s.ws.join("to-wb")).unwrap(), "wb note");
    assert!(matches!(
        v.resolve(&s.ws.join("to-wb"), true, false),
        Err(ViewError::ReadOnly(_))
    ));
    // Out of every mount: refused, as a file or as a directory on the way, dangling or not.
    symlink(s.outside.join("secret"), s.ws.join("out")).unwrap();
    symlink(&s.outside, s.ws.join("outdir")).unwrap();
    symlink("../outside/new", s.ws.join("dangling")).unwrap();
    for p in ["out", "outdir/secret", "dangling"] {
        assert!(
            matches!(read(&v, &s.ws.join(p)), Err(ViewError::Outside(_))),
            "{p}"
        );
        assert!(v.resolve(&s.ws.join(p), true, true).is_err(), "{p}");
    }
    // `..` after a link goes to the link target's parent, as the kernel does.
    symlink("sub", s.ws.join("subl")).unwrap();
    std::fs::write(s.ws.join("top"), "top").unwrap();
    assert_eq!(read(&v, &s.ws.join("subl/../top")).unwrap(), "top");
    // Loops end.
    symlink("l2", s.ws.join("l1")).unwrap();
    symlink("l1", s.ws.join("l2")).unwrap();
    assert!(matches!(read(&v, &s.ws.join("l1")), Err(ViewError::Loop)));
    assert!(!s.outside.join("new").exists());
}

#[test]
fn nested_mounts_win_and_masks_hide() {
    let s = scene();
    // A read-only mount over a directory of the read-write workspace, and a masked run dir
    // with a mount over one of its subdirectories (the -W workbench).
    let git = s.ws.join(".git");
    let runs = s.ws.join("runs");
    let wbin = runs.join("workbench");
    std::fs::create_dir_all(&git).unwrap();
    std::fs::create_dir_all(&wbin).unwrap();
    std::fs::write(git.join("config"), "cfg").unwrap();
    std::fs::write(runs.join("manifest.json"), "[]").unwrap();
    std::fs::write(wbin.join("n"), "n").unwrap();
    let v = View::new(
        vec![mount(&s.ws, false), mount(&git, true), mount(&wbin, false)],
        vec![runs.clone()],
    );
    assert_eq!(read(&v, &git.join("config")).unwrap(), "cfg");
    assert!(matches!(
        v.resolve(&git.join("config"), true, false),
        Err(ViewError::ReadOnly(_))
    ));
    assert!(matches!(
        v.resolve(&git.join("hooks/x"), true, true),
        Err(ViewError::ReadOnly(_))
    ));
    assert!(!git.join("hooks").exists());
    assert!(matches!(
        read(&v, &runs.join("manifest.json")),
        Err(ViewError::Masked(_))
    ));
    assert!(matches!(
        v.resolve(&runs.join("x"), true, true),
        Err(ViewError::Masked(_))
    ));
    // A link into the masked directory is as blind as the path itself.
    symlink("runs/manifest.json", s.ws.join("m")).unwrap();
    assert!(matches!(
        read(&v, &s.ws.join("m")),
        Err(ViewError::Masked(_))
    ));
    // The mount over the masked directory is visible, and `..` from it stays masked.
    assert_eq!(read(&v, &wbin.join("n")).unwrap(), "n");
    assert!(matches!(
        read(&v, &wbin.join("../manifest.json")),
        Err(ViewError::Masked(_))
    ));
    assert!(v.resolve(&wbin.join("new"), true, false).is_ok());
}

#[test]
fn fifos_and_devices_are_refused_without_blocking() {
    let s = scene();
    let v = view(&s);
    nix::unistd::mkfifo(&s.ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = v
        .with(&s.ws.join("fifo"), false, false, |r| r.read(10))
        .unwrap_err();
    assert!(matches!(e, ViewError::Fs(FsError::NotRegular)), "{e:?}");
    let e = v
        .with(&s.ws.join("fifo"), true, false, |r| r.replace(b"x"))
        .unwrap_err();
    assert!(matches!(e, ViewError::Fs(FsError::NotRegular)), "{e:?}");
    symlink("/dev/zero", s.ws.join("zero")).unwrap();
    assert!(read(&v, &s.ws.join("zero")).is_err());
}

#[test]
fn replace_keeps_mode_replaces_links_and_leaves_no_temporary() {
    use std::os::unix::fs::PermissionsExt;
    let s = scene();
    let v = view(&s);
    let f = s.ws.join("run.sh");
    std::fs::write(&f, "old").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o750)).unwrap();
    let existed = v.with(&f, true, false, |r| r.replace(b"new")).unwrap();
    assert!(existed);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o750
    );
    let names: Vec<_> = std::fs::read_dir(&s.ws).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Parents are created in the read-write mount.
    v.with(&s.ws.join("a/b/c.txt"), true, true, |r| r.replace(b"c"))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a/b/c.txt")).unwrap(),
        "c"
    );
}

#[test]
fn a_tree_follows_no_link_and_writes_by_rename() {
    let s = scene();
    let t = Tree::for_root(&s.ws.join(".flower"), Some(&s.ws));
    assert_eq!(t.anchor(), s.ws);
    let note = s.ws.join(".flower/notes/a.md");
    assert_eq!(t.read_string(&note, 100).unwrap(), None);
    t.write(&note, b"one").unwrap();
    assert!(t.append(&note, b" two").is_ok());
    assert_eq!(t.read_string(&note, 100).unwrap().unwrap(), "one two");
    // A link at the file: read refused, write replaces the link, append refused.
    let target = s.outside.join("secret");
    std::fs::remove_file(&note).unwrap();
    symlink(&target, &note).unwrap();
    assert!(matches!(t.read(&note, 100), Err(FsError::Symlink)));
    assert!(matches!(t.append(&note, b"x"), Err(FsError::Symlink)));
    t.write(&note, b"mine").unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "DECOY");
    assert!(!std::fs::symlink_metadata(&note).unwrap().is_symlink());
    // A link in place of a directory on the way (the workbench itself swapped).
    std::fs::rename(s.ws.join(".flower"), s.ws.join("old")).unwrap();
    symlink(&s.outside, s.ws.join(".flower")).unwrap();
    assert!(t.read(&s.ws.join(".flower/secret"), 100).is_err());
    assert!(t.write(&s.ws.join(".flower/planted"), b"x").is_err());
    assert!(t.create_dir_all(&s.ws.join(".flower/d")).is_err());
    assert!(!s.outside.join("planted").exists() && !s.outside.join("d").exists());
    // Outside the anchor: refused.
    assert!(matches!(t.read(&target, 100), Err(FsError::Outside)));
    assert!(matches!(
        t.read(&s.ws.join("x/../../outside/secret"), 100),
        Err(FsError::Outside)
    ));
    // A FIFO is refused, not waited on.
    nix::unistd::mkfifo(&s.ws.join("old/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(matches!(
        t.read(&s.ws.join("old/fifo"), 10),
        Err(FsError::NotRegular)
    ));
    assert!(matches!(
        t.append(&s.ws.join("old/fifo"), b"x"),
        Err(FsError::NotRegular)
    ));
    // Renames never overwrite unless asked.
    t.write(&s.ws.join("old/x"), b"1").unwrap();
    t.write(&s.ws.join("old/y"), b"2").unwrap();
    assert!(t
        .rename(&s.ws.join("old/x"), &s.ws.join("old/y"), false)
        .is_err());
    t.rename(&s.ws.join("old/x"), &s.ws.join("old/z/x"), false)
        .unwrap();
    assert_eq!(std::fs::read_to_string(s.ws.join("old/z/x")).unwrap(), "1");
}

fn files(v: &View, base: &Path, rules: &Rules) -> Vec<String> {
    let r = v.resolve(base, false, false).unwrap();
    let mut out = Vec::new();
    walk(v, &r, rules, &mut |f| {
        out.push(
            f.path
                .strip_prefix(base)
                .unwrap_or(&f.path)
                .display()
                .to_string(),
        );
        true
    })
    .unwrap();
    out
}

#[test]
fn walks_keep_ripgreps_ignore_rules_and_stay_in_the_view() {
    let s = scene();
    let w = &s.ws;
    for f in [
        "src/a.rs",
        "src/b.log",
        "src/keep.log",
        "target/t.rs",
        "docs/x.md",
        "docs/sub/y.md",
        ".hidden",
        "local/z.rs",
    ] {
        let p = w.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "needle").unwrap();
    }
    std::fs::write(w.join(".gitignore"), "target/\n*.log\n!keep.log\n").unwrap();
    std::fs::write(w.join("docs/.ignore"), "sub/\n").unwrap();
    std::fs::create_dir_all(w.join(".git/info")).unwrap();
    std::fs::write(w.join(".git/info/exclude"), "local/\n").unwrap();
    std::fs::write(w.join(".git/HEAD"), "ref").unwrap();
    symlink(&s.outside, w.join("out")).unwrap();
    symlink(s.outside.join("secret"), w.join("out.rs")).unwrap();
    nix::unistd::mkfifo(&w.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let v = view(&s);
    let got = files(&v, w, &Rules::default());
    assert_eq!(
        got,
        vec![
            ".gitignore",
            ".hidden",
            "docs/.ignore",
            "docs/x.md",
            "src/a.rs",
            "src/keep.log"
        ]
    );
    // A walk from a subdirectory still honours the ignore files above it.
    assert_eq!(
        files(&v, &w.join("src"), &Rules::default()),
        vec!["a.rs", "keep.log"]
    );
    // Types and glob overrides.
    let mut tb = ignore::types::TypesBuilder::new();
    tb.add_defaults();
    tb.select("rust");
    let rules = Rules {
        types: Some(tb.build().unwrap()),
        ..Rules::default()
    };
    assert_eq!(files(&v, w, &rules), vec!["src/a.rs"]);
    let mut ob = ignore::overrides::OverrideBuilder::new(w);
    ob.add("*.md").unwrap();
    let rules = Rules {
        overrides: Some(ob.build().unwrap()),
        ..Rules::default()
    };
    assert_eq!(files(&v, w, &rules), vec!["docs/x.md"]);
    // A single file is visited whatever the rules say.
    assert_eq!(files(&v, &w.join("src/b.log"), &Rules::default()), vec![""]);
}

#[test]
fn walks_enter_nested_mounts_and_skip_masked_ones() {
    let s = scene();
    let inner = s.ws.join("inner");
    let runs = s.ws.join("runs");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(inner.join("i.txt"), "i").unwrap();
    std::fs::write(runs.join("manifest.json"), "[]").unwrap();
    let v = View::new(vec![mount(&s.ws, false), mount(&inner, true)], vec![runs]);
    assert_eq!(files(&v, &s.ws, &Rules::default()), vec!["inner/i.txt"]);
    let _ = &s.root;
}

#[test]
fn the_walk_by_hand_refuses_links_like_openat2() {
    use std::os::fd::AsFd;
    let s = scene();
    std::fs::create_dir_all(s.ws.join("d")).unwrap();
    std::fs::write(s.ws.join("d/f"), "f").unwrap();
    symlink(&s.outside, s.ws.join("l")).unwrap();
    symlink(s.ws.join("d/f"), s.ws.join("d/fl")).unwrap();
    let ws = sys::open_trusted_dir(&s.ws).unwrap();
    let parts = |p: &'static str| -> Vec<&'static std::ffi::OsStr> {
        p.split('/').map(std::ffi::OsStr::new).collect()
    };
    for by_hand in [true, false] {
        let open = |p: &'static str| {
            if by_hand {
                sys::by_hand(ws.as_fd(), &parts(p), sys::read_flags(), 0)
            } else {
                sys::open_beneath(ws.as_fd(), Path::new(p), sys::read_flags(), 0)
            }
        };
        assert!(open("d/f").is_ok());
        assert!(
            matches!(open("l/secret"), Err(FsError::Symlink)),
            "{by_hand}"
        );
        assert!(matches!(open("d/fl"), Err(FsError::Symlink)), "{by_hand}");
    }
    assert!(matches!(
        sys::open_beneath(
            ws.as_fd(),
            Path::new("d/../../outside/secret"),
            sys::read_flags(),
            0
        ),
        Err(FsError::Outside)
    ));
}

#[test]
fn a_directory_swapped_with_a_link_in_a_loop_never_leads_out() {
    // The attack of issue 14 without a container: a thread exchanges `d` (a directory) and
    // `l` (a link to a directory outside the view) as fast as it can while this thread reads
    // and writes through `d` and walks it.
    use std::sync::atomic::{AtomicBool, Ordering};
    let s = scene();
    std::fs::create_dir_all(s.ws.join("d")).unwrap();
    std::fs::write(s.ws.join("d/secret"), "inside").unwrap();
    symlink(&s.outside, s.ws.join("l")).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (stop.clone(), s.ws.clone());
        std::thread::spawn(move || {
            let dir = sys::open_trusted_dir(&ws).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                use std::os::fd::AsFd;
                rustix::fs::renameat_with(
                    dir.as_fd(),
                    "d",
                    dir.as_fd(),
                    "l",
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                n += 1;
            }
            n
        })
    };
    let v = view(&s);
    let (mut reads, mut writes, mut walks) = (0, 0, 0);
    for i in 0..3000 {
        if let Ok(t) = read(&v, &s.ws.join("d/secret")) {
            assert_eq!(t, "inside");
            reads += 1;
        }
        let p = s.ws.join(format!("d/w{i}"));
        if v.with(&p, true, true, |r| r.replace(b"w")).is_ok() {
            writes += 1;
        }
        if i % 10 == 0 {
            if let Ok(r) = v.resolve(&s.ws.join("d"), false, false) {
                let mut seen = Vec::new();
                let _ = walk(&v, &r, &Rules::default(), &mut |f| {
                    // Through the handle the walk gives, never by reopening the path.
                    let mut t = String::new();
                    if let Ok(mut file) = f.open() {
                        use std::io::Read;
                        let _ = file.read_to_string(&mut t);
                    }
                    seen.push(t);
                    true
                });
                assert!(!seen.iter().any(|t| t.contains("DECOY")));
                walks += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let outside: Vec<_> = std::fs::read_dir(&s.outside).unwrap().flatten().collect();
    assert_eq!(outside.len(), 1, "created outside: {outside:?}");
    assert_eq!(
        std::fs::read_to_string(s.outside.join("secret")).unwrap(),
        "DECOY"
    );
    eprintln!("swaps {swaps}, reads ok {reads}, writes ok {writes}, walks {walks}");
    assert!(
        swaps > 100 && reads > 0 && writes > 0,
        "the race did not run"
    );
}

#[test]
fn own_files_replace_a_fifo_the_tools_refuse_to() {
    let s = scene();
    let f = s.ws.join("fifo");
    nix::unistd::mkfifo(&f, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let v = view(&s);
    assert!(matches!(
        v.with(&f, true, false, |r| r.replace(b"x")),
        Err(ViewError::Fs(FsError::NotRegular))
    ));
    own::write(&f, b"mine").unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "mine");
}

#[test]
fn a_masked_directory_moved_by_renaming_its_parent_stays_masked() {
    // In the container the mask moves with the directory; the tools find it by identity.
    let s = scene();
    let runs = s.ws.join("deep/runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join("manifest.json"), "records").unwrap();
    let id = own::identity(&runs).unwrap();
    let v = View::new(vec![mount(&s.ws, false)], vec![runs.clone()]).hiding_ids(vec![id]);
    std::fs::rename(s.ws.join("deep"), s.ws.join("moved")).unwrap();
    let moved = s.ws.join("moved/runs");
    assert!(matches!(
        read(&v, &moved.join("manifest.json")),
        Err(ViewError::Masked(_))
    ));
    assert!(matches!(
        v.resolve(&moved, false, false),
        Err(ViewError::Masked(_))
    ));
    assert!(files(&v, &s.ws, &Rules::default()).is_empty());
}

/// Issue 17: a batch is written with one sync; a link at a name is replaced (its target
/// untouched), a file with the same bytes kept, a same-size file of other bytes (what a crash
/// before the sync can leave) and a wrong-size one rewritten, a directory at a name refused
/// with nothing written and no temporary left.
#[test]
fn batches_replace_links_keep_same_content_files_and_leave_no_temporary() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap().join("spill");
    std::fs::create_dir_all(&dir).unwrap();
    let outside = d.path().join("outside.txt");
    std::fs::write(&outside, "host file").unwrap();
    symlink(&outside, dir.join("a.txt")).unwrap();
    std::fs::write(dir.join("b.txt"), "BBB").unwrap(); // same size, other bytes: rewritten
    std::fs::write(dir.join("c.txt"), "cut").unwrap(); // wrong size: rewritten
    std::fs::write(dir.join("e.txt"), "eee").unwrap(); // same bytes: kept
    let kept_inode = std::fs::metadata(dir.join("e.txt")).unwrap().ino();
    let files: [(&str, &[u8]); 5] = [
        ("a.txt", b"aaa"),
        ("b.txt", b"bbb"),
        ("c.txt", b"ccccc"),
        ("d.txt", b"ddd"),
        ("e.txt", b"eee"),
    ];
    let tree = tree::Tree::new("/");
    let (written, sync) = tree.write_batch(&dir, &files).unwrap();
    assert_eq!(written, 4);
    sync.expect("a batch to sync").sync().unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "host file");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    assert!(!dir.join("a.txt").is_symlink());
    assert_eq!(
        [
            read("a.txt"),
            read("b.txt"),
            read("c.txt"),
            read("d.txt"),
            read("e.txt")
        ],
        ["aaa", "bbb", "ccccc", "ddd", "eee"]
    );
    assert_eq!(
        std::fs::metadata(dir.join("e.txt")).unwrap().ino(),
        kept_inode
    );
    std::fs::create_dir(dir.join("g.txt")).unwrap();
    let err = tree.write_batch(&dir, &[("f.txt", b"f"), ("g.txt", b"g")]);
    assert!(matches!(err, Err(FsError::IsDir)), "{err:?}");
    assert!(!dir.join("f.txt").exists(), "nothing written");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("flowerbox-tmp")),
        "{names:?}"
    );
}

/// Issue 32: a planned batch writes nothing until it is written (another thread may), checks
/// every name when planned, and stops before the next name once told to.
#[test]
fn a_planned_batch_writes_nothing_before_it_runs_and_stops_when_told() {
    use std::sync::atomic::AtomicBool;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap().join("spill");
    let tree = tree::Tree::new("/");
    let files = |names: &[&str]| -> Vec<(String, Vec<u8>)> {
        names
            .iter()
            .map(|n| (n.to_string(), n.as_bytes().to_vec()))
            .collect()
    };
    let batch = tree.plan_batch(&dir, files(&["a.txt", "b.txt"])).unwrap();
    let batch = batch.expect("two names to write");
    assert_eq!(batch.len(), 2);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "planned, not written"
    );
    let (written, sync) = std::thread::spawn(move || batch.write(&AtomicBool::new(false)))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(written, 2);
    sync.expect("a sync").sync().unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "b.txt");
    // Already there with these bytes: nothing to write.
    let again = tree.plan_batch(&dir, files(&["a.txt"])).unwrap().unwrap();
    assert!(again.is_empty());
    let stopped = tree
        .plan_batch(&dir, files(&["c.txt", "d.txt"]))
        .unwrap()
        .unwrap();
    let (written, _) = stopped.write(&AtomicBool::new(true)).unwrap();
    assert_eq!(written, 0);
    assert!(!dir.join("c.txt").exists());
    std::fs::create_dir(dir.join("e.txt")).unwrap();
    let err = tree.plan_batch(&dir, files(&["e.txt"]));
    assert!(matches!(err, Err(FsError::IsDir)), "{err:?}");
    assert!(tree.plan_batch(&dir, Vec::new()).unwrap().is_none());
}

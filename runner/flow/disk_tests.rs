//! The disk watcher's measurements, on the host (the engine's part: tests/redteam_resources.rs).

use super::*;

fn places_of(dir: &Path) -> DiskPlaces {
    DiskPlaces {
        dirs: vec![dir.to_path_buf()],
        skip: vec![dir.join("runs")],
    }
}

#[test]
fn the_walk_counts_blocks_once_skips_the_run_dir_and_follows_no_link() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let empty = usage(&places_of(&root)).bytes;
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f"), vec![7u8; 1 << 20]).unwrap();
    // A hard link counts once; a sparse file by what it holds; a link out is not followed.
    std::fs::hard_link(root.join("a/b/f"), root.join("a/g")).unwrap();
    std::fs::File::create(root.join("sparse"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::os::unix::fs::symlink("/usr", root.join("out")).unwrap();
    std::fs::create_dir(root.join("runs")).unwrap();
    std::fs::write(root.join("runs/log"), vec![1u8; 4 << 20]).unwrap();
    let grown = usage(&places_of(&root)).bytes - empty;
    assert!(
        (1 << 20..(1 << 20) + (256 << 10)).contains(&grown),
        "{grown}"
    );
    // The same directory named twice (the workbench inside the workspace) counts once.
    let mut twice = places_of(&root);
    twice.dirs.push(root.join("a"));
    assert_eq!(usage(&twice), usage(&places_of(&root)));
}

/// Empty files allocate no block, but each takes an inode: they count at their file system's
/// share per inode, so millions of them cannot run the host out of inodes under the budget.
#[test]
fn empty_files_count_by_their_inodes() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let cost = inode_cost(&rustix::fs::statvfs(&root).unwrap());
    let empty = usage(&places_of(&root)).bytes;
    std::fs::create_dir(root.join("many")).unwrap();
    for i in 0..1000 {
        std::fs::File::create(root.join(format!("many/{i}"))).unwrap();
    }
    let grown = usage(&places_of(&root)).bytes - empty;
    assert!(cost > 0 && grown >= 1001 * cost, "{grown} < 1001 × {cost}");
}

#[test]
fn a_full_measurement_is_due_when_the_file_system_grew_enough_to_matter() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::write(root.join("before"), vec![1u8; 2 << 20]).unwrap();
    let mut m = Meter::new(places_of(&root), vec![root.clone()]);
    assert_eq!(m.walked, m.base);
    // Not due right after a measurement, whatever grew; not due for a far budget. (The file
    // system's growth is given: the real one is shared with everything else on the machine,
    // which may free more than this test writes.)
    std::fs::write(root.join("after"), vec![1u8; 8 << 20]).unwrap();
    assert!(!m.due_after(1 << 20, 8 << 20));
    m.measured_at = Instant::now() - FULL_MIN;
    assert!(!m.due_after(u64::MAX / 2, 8 << 20));
    // Due when the growth could pass the budget; the walk then sees it.
    assert!(m.due_after(4 << 20, 8 << 20));
    assert!(!m.due_after(4 << 20, 0), "nothing grew, nothing known");
    assert!(
        !fs_used(std::slice::from_ref(&root)).is_empty(),
        "the file system is measured"
    );
    m.walk();
    let g = m.walked - m.base;
    assert!((8 << 20..9 << 20).contains(&g), "{g}");
    // And at least every WALK_EVERY.
    m.measured_at = Instant::now() - WALK_EVERY;
    assert!(m.due(u64::MAX / 2));
}

#[test]
fn the_message_names_the_total_the_parts_and_the_setting() {
    let over = DiskOver {
        used: DiskUse {
            files: 60 << 20,
            containers: vec![
                Written {
                    agent: "worker-1".into(),
                    container: "c1".into(),
                    bytes: 70 << 20,
                },
                Written {
                    agent: "pod".into(),
                    container: "p".into(),
                    bytes: 0,
                },
            ],
        },
        budget: 50 << 20,
    };
    let text = over.to_string();
    for part in [
        "130.0 MiB",
        "60.0 MiB",
        "worker-1 的容器里 70.0 MiB",
        "50.0 MiB",
        "FLOWERBOX_DISK_BUDGET",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(!text.contains("pod"), "{text}");
}

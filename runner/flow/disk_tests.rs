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
    let empty = usage(&places_of(&root));
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
    let grown = usage(&places_of(&root)) - empty;
    assert!(
        (1 << 20..(1 << 20) + (256 << 10)).contains(&grown),
        "{grown}"
    );
    // The same directory named twice (the workbench inside the workspace) counts once.
    let mut twice = places_of(&root);
    twice.dirs.push(root.join("a"));
    assert_eq!(usage(&twice), usage(&places_of(&root)));
}

#[test]
fn growth_is_measured_from_the_start_and_walks_when_it_may_matter() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::write(root.join("before"), vec![1u8; 2 << 20]).unwrap();
    let mut m = HostMeter::new(places_of(&root));
    assert_eq!(m.growth(u64::MAX), 0);
    std::fs::write(root.join("after"), vec![1u8; 3 << 20]).unwrap();
    // Within a small slack the file system grew enough to walk again.
    let g = m.growth(1 << 20);
    assert!((3 << 20..4 << 20).contains(&g), "{g}");
    std::fs::remove_file(root.join("before")).unwrap();
    std::fs::remove_file(root.join("after")).unwrap();
    m.walk();
    assert_eq!(m.growth(0), 0);
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

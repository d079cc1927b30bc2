//! Symlinks a worker's branch adds, judged before integration (issue 25 §2, DESIGN.md threat
//! model 2). A committed symlink that leaves the repository — absolute, or climbing out with
//! `..` — or points into the workbench, the run directory or `.git` would bring the user's
//! `git status`, editor or build from their checkout into a place an agent prepared (a
//! repository with `core.fsmonitor` in the workbench). [`classify`] resolves a link's target
//! from the link's own directory, one component at a time, following the links of the tree
//! being integrated as the file system would after checkout; [`check`] applies it to every
//! symlink the branch adds or changes. [`check`] also refuses a path through an entry named
//! `.git` in any letter case, and a directory the branch makes into a git directory (`HEAD`
//! beside `objects`, `refs` or `commondir`: git takes it for a bare repository, whose
//! `core.worktree` and `core.fsmonitor` run for whoever enters it). Such a branch is not
//! merged; it stays as it is.

use git2::{Delta, Oid, Repository, Tree};
use std::path::{Path, PathBuf};

use super::IsolateError;

/// Most links followed while resolving one target (Linux's own limit).
const MAX_HOPS: usize = 40;
/// Longest symlink target read (Linux's `PATH_MAX`).
const MAX_TARGET: usize = 4096;

/// The target of the link at a path of the tree (as components), `None` when no link is there.
pub type LinkAt<'a> = &'a dyn Fn(&[Vec<u8>]) -> Option<Vec<u8>>;

/// Where a symlink's target leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkTarget {
    /// Inside the repository, outside every guarded place.
    Inside,
    /// An absolute path.
    Absolute,
    /// Out of the repository through `..`.
    Escapes,
    /// Into a guarded place (the repository's `.git`, the workbench, the run directory): its
    /// path relative to the repository.
    Guarded(String),
    /// More than [`MAX_HOPS`] links, a loop, or a target too long to be one.
    Unresolvable,
}

impl LinkTarget {
    /// Why a link with this target is refused; `None` for [`LinkTarget::Inside`].
    pub fn refusal(&self) -> Option<String> {
        match self {
            LinkTarget::Inside => None,
            LinkTarget::Absolute => Some("绝对路径,指到仓库外".into()),
            LinkTarget::Escapes => Some("用 .. 指到了仓库外".into()),
            LinkTarget::Guarded(p) => Some(format!("指进了 {p}")),
            LinkTarget::Unresolvable => Some("解析不了(链接太多、成环或太长)".into()),
        }
    }
}

/// Where the link at `path` (relative to the repository, `/`-separated) with `target` leads:
/// resolved from the link's directory, each component that names a link in the tree
/// (`link_at` gives its target) followed. `guarded` are repository-relative directories no
/// link may lead into (besides `.git` in any letter case at the top).
pub fn classify(
    path: &[u8],
    target: &[u8],
    link_at: LinkAt<'_>,
    guarded: &[Vec<Vec<u8>>],
) -> LinkTarget {
    let mut cur: Vec<Vec<u8>> = split(path).map(<[u8]>::to_vec).collect();
    cur.pop();
    let mut hops = 0;
    match resolve(&mut cur, target, link_at, guarded, &mut hops) {
        Ok(()) => guarded_by(&cur, guarded).unwrap_or(LinkTarget::Inside),
        Err(t) => t,
    }
}

fn split(p: &[u8]) -> impl Iterator<Item = &[u8]> {
    p.split(|b| *b == b'/')
}

fn guarded_by(cur: &[Vec<u8>], guarded: &[Vec<Vec<u8>>]) -> Option<LinkTarget> {
    let show = |p: &[Vec<u8>]| String::from_utf8_lossy(&p.join(&b'/')).into_owned();
    if cur.first().is_some_and(|c| c.eq_ignore_ascii_case(b".git")) {
        return Some(LinkTarget::Guarded(show(&cur[..1])));
    }
    guarded
        .iter()
        .find(|g| !g.is_empty() && cur.starts_with(g))
        .map(|g| LinkTarget::Guarded(show(g)))
}

fn resolve(
    cur: &mut Vec<Vec<u8>>,
    target: &[u8],
    link_at: LinkAt<'_>,
    guarded: &[Vec<Vec<u8>>],
    hops: &mut usize,
) -> Result<(), LinkTarget> {
    if target.len() > MAX_TARGET || target.contains(&0) {
        return Err(LinkTarget::Unresolvable);
    }
    if target.first() == Some(&b'/') {
        return Err(LinkTarget::Absolute);
    }
    for comp in split(target) {
        match comp {
            b"" | b"." => {}
            b".." => {
                if cur.pop().is_none() {
                    return Err(LinkTarget::Escapes);
                }
            }
            name => {
                cur.push(name.to_vec());
                if let Some(t) = guarded_by(cur, guarded) {
                    return Err(t);
                }
                if let Some(next) = link_at(cur) {
                    *hops += 1;
                    if *hops > MAX_HOPS {
                        return Err(LinkTarget::Unresolvable);
                    }
                    cur.pop();
                    resolve(cur, &next, link_at, guarded, hops)?;
                }
            }
        }
    }
    Ok(())
}

/// `guard` relative to `workdir` as components, when it lies inside.
pub fn guarded_part(workdir: &Path, guard: &Path) -> Option<Vec<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let rel = guard.strip_prefix(workdir).ok()?;
    let parts: Vec<Vec<u8>> = rel
        .components()
        .map(|c| c.as_os_str().as_bytes().to_vec())
        .collect();
    (!parts.is_empty()).then_some(parts)
}

/// The symlinks added or changed from `base` to `branch` whose target, resolved in `result`
/// (the tree the workspace would get), is refused: `path -> target(why)` each.
///
/// # Errors
/// git failures reading the trees.
pub fn check(
    repo: &Repository,
    base: &Tree,
    branch: &Tree,
    result: &Tree,
    workdir: &Path,
    guards: &[PathBuf],
) -> Result<Vec<String>, IsolateError> {
    let guarded: Vec<Vec<Vec<u8>>> = guards
        .iter()
        .filter_map(|g| guarded_part(workdir, g))
        .collect();
    let diff = repo
        .diff_tree_to_tree(Some(base), Some(branch), None)
        .map_err(IsolateError::git("比较树失败"))?;
    let odb = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
    let read_link = |id: Oid| -> Option<Vec<u8>> {
        let (size, _) = odb.read_header(id).ok()?;
        if size > MAX_TARGET {
            return Some(vec![0]);
        }
        repo.find_blob(id).ok().map(|b| b.content().to_vec())
    };
    let link_at = |parts: &[Vec<u8>]| -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let p = parts.join(&b'/');
        let e = result
            .get_path(Path::new(std::ffi::OsStr::from_bytes(&p)))
            .ok()?;
        (e.filemode() == 0o120000).then(|| read_link(e.id()).unwrap_or_else(|| vec![0]))
    };
    let mut refused = Vec::new();
    for d in diff.deltas() {
        let f = d.new_file();
        if d.status() == Delta::Deleted {
            continue;
        }
        let Some(path) = f.path_bytes() else { continue };
        let parts: Vec<&[u8]> = split(path).collect();
        if parts.iter().any(|c| c.eq_ignore_ascii_case(b".git")) {
            refused.push(format!("{}(.git 路径)", String::from_utf8_lossy(path)));
            continue;
        }
        if parts
            .last()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"HEAD"))
            && is_git_dir(repo, result, &parts[..parts.len() - 1])
        {
            let dir = parts[..parts.len() - 1].join(&b'/');
            refused.push(format!(
                "{}/(git 会把它当成仓库)",
                String::from_utf8_lossy(&dir)
            ));
            continue;
        }
        if f.mode() != git2::FileMode::Link {
            continue;
        }
        let target = read_link(f.id()).unwrap_or_else(|| vec![0]);
        let verdict = classify(path, &target, &link_at, &guarded);
        if let Some(why) = verdict.refusal() {
            refused.push(format!(
                "{} -> {}({why})",
                String::from_utf8_lossy(path),
                String::from_utf8_lossy(&target)
            ));
        }
    }
    refused.dedup();
    Ok(refused)
}

/// True when the directory `dir` of `tree` holds `HEAD` and one of `objects`, `refs`,
/// `commondir` (any letter case).
fn is_git_dir(repo: &Repository, tree: &Tree, dir: &[&[u8]]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let sub;
    let t = if dir.is_empty() {
        tree
    } else {
        let p = dir.join(&b'/');
        let Ok(e) = tree.get_path(Path::new(std::ffi::OsStr::from_bytes(&p))) else {
            return false;
        };
        let Some(found) = e.to_object(repo).ok().and_then(|o| o.into_tree().ok()) else {
            return false;
        };
        sub = found;
        &sub
    };
    let has = |n: &[u8]| t.iter().any(|e| e.name_bytes().eq_ignore_ascii_case(n));
    has(b"HEAD") && (has(b"objects") || has(b"refs") || has(b"commondir"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn judge(links: &[(&str, &str)], path: &str, guarded: &[&str]) -> LinkTarget {
        let map: HashMap<Vec<u8>, Vec<u8>> = links
            .iter()
            .map(|(p, t)| (p.as_bytes().to_vec(), t.as_bytes().to_vec()))
            .collect();
        let link_at = |parts: &[Vec<u8>]| map.get(&parts.join(&b'/')).cloned();
        let guarded: Vec<Vec<Vec<u8>>> = guarded
            .iter()
            .map(|g| g.split('/').map(|c| c.as_bytes().to_vec()).collect())
            .collect();
        classify(path.as_bytes(), &map[path.as_bytes()], &link_at, &guarded)
    }

    #[test]
    fn links_inside_the_repository_pass() {
        let links = [
            ("a", "b"),
            ("d/e", "../a"),
            ("d/f", "./g/../../a"),
            ("d/dir", "sub"),
            ("d/through", "dir/x"),
        ];
        for (p, _) in links {
            assert_eq!(judge(&links, p, &["runs"]), LinkTarget::Inside, "{p}");
        }
    }

    #[test]
    fn absolute_and_escaping_links_are_refused() {
        let links = [
            ("abs", "/etc/passwd"),
            ("up", ".."),
            ("d/up2", "../../x"),
            ("d/wb", "../../.flower-ws/notes"),
            ("sneaky", "d/../../x"),
        ];
        assert_eq!(judge(&links, "abs", &[]), LinkTarget::Absolute);
        for p in ["up", "d/up2", "d/wb", "sneaky"] {
            assert_eq!(judge(&links, p, &[]), LinkTarget::Escapes, "{p}");
        }
    }

    #[test]
    fn links_through_other_links_resolve_as_the_file_system_would() {
        // `self -> .`, then `self/..` is the repository's parent, not the repository.
        let links = [
            ("self", "."),
            ("out", "self/.."),
            ("d/deep", "a/b/c"),
            ("ok", "d/deep/../.."),
            ("user", "/home/u/shared"),
            ("via", "user/x"),
            ("loop1", "loop2"),
            ("loop2", "loop1"),
            ("e/a", "../self/../x"),
        ];
        assert_eq!(judge(&links, "out", &[]), LinkTarget::Escapes);
        // d/deep -> d/a/b/c; `..` twice: d/a — inside (a lexical check would say so too).
        assert_eq!(judge(&links, "ok", &[]), LinkTarget::Inside);
        assert_eq!(judge(&links, "via", &[]), LinkTarget::Absolute);
        assert_eq!(judge(&links, "loop1", &[]), LinkTarget::Unresolvable);
        assert_eq!(judge(&links, "e/a", &[]), LinkTarget::Escapes);
    }

    #[test]
    fn links_into_guarded_places_are_refused() {
        let links = [
            ("r", "runs/x"),
            ("d/r2", "../runs"),
            ("g", ".git/config"),
            ("G", ".GIT"),
            ("wb", ".flower/notes"),
            ("back", "runs/../a.txt"),
            ("runsish", "runs2/x"),
        ];
        let g = ["runs", ".flower"];
        assert_eq!(judge(&links, "r", &g), LinkTarget::Guarded("runs".into()));
        assert_eq!(
            judge(&links, "d/r2", &g),
            LinkTarget::Guarded("runs".into())
        );
        assert_eq!(judge(&links, "g", &g), LinkTarget::Guarded(".git".into()));
        assert_eq!(judge(&links, "G", &g), LinkTarget::Guarded(".GIT".into()));
        assert_eq!(
            judge(&links, "wb", &g),
            LinkTarget::Guarded(".flower".into())
        );
        // Passing through a guarded place on the way is refused as well.
        assert_eq!(
            judge(&links, "back", &g),
            LinkTarget::Guarded("runs".into())
        );
        assert_eq!(judge(&links, "runsish", &g), LinkTarget::Inside);
    }

    #[test]
    fn guarded_parts_are_relative_to_the_working_tree() {
        let w = Path::new("/r/ws");
        assert_eq!(
            guarded_part(w, Path::new("/r/ws/runs")),
            Some(vec![b"runs".to_vec()])
        );
        assert_eq!(guarded_part(w, Path::new("/r/.flower-ws")), None);
        assert_eq!(guarded_part(w, w), None);
    }
}

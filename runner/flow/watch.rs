//! Configuration the next run will read from the workspace, watched over a run (issue 25 §1):
//! what an agent created, changed or removed there is named at the end of the run, so the user
//! knows before the next run trusts it.
//!
//! The command line says what to watch ([`Watched`]: `./.env`, `.mcp.json`, the workflow
//! file, a `$FLOWER_ENV` or `--mcp-config` file when they lie in the workspace; the files of
//! each plugin loaded, and the plugins' directory, whose entries are its items) as one list. [`ConfigWatch::start`] takes a snapshot of each with the one
//! configuration reader (`fsroot::config`: no symlink out of the workspace, regular files only,
//! never blocking, capped) before any agent runs; [`ConfigWatch::changes`] takes another and
//! compares. A file's items (a `.env`'s keys, `.mcp.json`'s servers, a workflow file's tables)
//! are compared by a digest of their values: the report names keys, never values.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::fsroot::config::{self as config_file, Place, CONFIG_CAP};

/// A file's content as named items: (name, value) pairs, or `None` when it does not parse.
pub type Itemize = fn(&[u8]) -> Option<Vec<(String, String)>>;

/// One configuration file the next run reads from the workspace.
#[derive(Clone)]
pub struct Watched {
    /// The file (absolute).
    pub path: PathBuf,
    /// What its items are called on screen (`键`, `服务器`, `流程`).
    pub items: &'static str,
    /// How its content splits into items; `None`: compared whole.
    pub itemize: Option<Itemize>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("path", &self.path)
            .field("items", &self.items)
            .finish()
    }
}

/// What happened to a watched file over the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It did not exist and does now.
    Created,
    /// Its content changed.
    Modified,
    /// It existed and does not now.
    Removed,
}

/// One watched file that changed, with the names of its items that did (never their values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    /// The file.
    pub path: PathBuf,
    /// What happened to it.
    pub change: Change,
    /// Why it cannot be read as configuration now (a FIFO, a link out of the workspace, too
    /// large, ...), when it cannot.
    pub unreadable: Option<String>,
    /// What its items are called (`键`, `服务器`, `流程`).
    pub items: &'static str,
    /// Items that appeared.
    pub added: Vec<String>,
    /// Items whose value changed.
    pub changed: Vec<String>,
    /// Items that went.
    pub removed: Vec<String>,
}

/// A watched file as one snapshot saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    Present {
        digest: u64,
        items: Option<BTreeMap<String, u64>>,
    },
    Unreadable(String),
}

/// The snapshot taken before the run, and how to take the next one.
#[derive(Debug, Clone)]
pub struct ConfigWatch {
    watched: Vec<Watched>,
    workspace: PathBuf,
    masked: Vec<PathBuf>,
    before: Vec<State>,
}

fn digest(bytes: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl ConfigWatch {
    /// Snapshots `watched` (files in `workspace`; others are the user's and not watched),
    /// never reading anything in `masked` (the run directory).
    pub fn start(watched: &[Watched], workspace: &Path, masked: &[PathBuf]) -> ConfigWatch {
        let mut seen: Vec<PathBuf> = Vec::new();
        let watched: Vec<Watched> = watched
            .iter()
            .filter(|w| {
                let path = config_file::lexical(&w.path);
                let fresh = path.starts_with(workspace) && !seen.contains(&path);
                seen.push(path);
                fresh
            })
            .cloned()
            .collect();
        let mut watch = ConfigWatch {
            watched,
            workspace: workspace.to_path_buf(),
            masked: masked.to_vec(),
            before: Vec::new(),
        };
        watch.before = watch.snapshot();
        watch
    }

    /// The files watched.
    pub fn watched(&self) -> &[Watched] {
        &self.watched
    }

    fn snapshot(&self) -> Vec<State> {
        self.watched.iter().map(|w| self.state(w)).collect()
    }

    fn state(&self, w: &Watched) -> State {
        let place = Place::Beneath {
            root: self.workspace.clone(),
            masked: self.masked.clone(),
        };
        match config_file::read(&w.path, &place, CONFIG_CAP) {
            Ok(None) => State::Absent,
            Ok(Some(file)) => State::Present {
                digest: digest(&file.bytes),
                items: w.itemize.and_then(|f| f(&file.bytes)).map(|pairs| {
                    let mut items = BTreeMap::new();
                    for (k, v) in pairs {
                        // The first of a name counts, as the readers take it.
                        items.entry(k).or_insert_with(|| digest(&v));
                    }
                    items
                }),
            },
            // A directory (the plugins' place): its entries are its items.
            Err(config_file::ConfigError::IsDir) => match config_file::list(&w.path, &place) {
                Ok(Some(entries)) => State::Present {
                    digest: digest(&entries),
                    items: Some(
                        entries
                            .into_iter()
                            .map(|(name, is_dir)| (name, digest(is_dir)))
                            .collect(),
                    ),
                },
                Ok(None) => State::Absent,
                Err(e) => State::Unreadable(e.to_string()),
            },
            Err(e) => State::Unreadable(e.to_string()),
        }
    }

    /// What changed since [`ConfigWatch::start`], in the order of the list.
    pub fn changes(&self) -> Vec<ConfigChange> {
        let after = self.snapshot();
        self.watched
            .iter()
            .zip(self.before.iter().zip(after))
            .filter_map(|(w, (before, after))| compare(w, before, &after))
            .collect()
    }
}

fn compare(w: &Watched, before: &State, after: &State) -> Option<ConfigChange> {
    if before == after {
        return None;
    }
    let change = match (before, after) {
        (State::Absent, _) => Change::Created,
        (_, State::Absent) => Change::Removed,
        _ => Change::Modified,
    };
    let unreadable = match after {
        State::Unreadable(why) => Some(why.clone()),
        _ => None,
    };
    let mut out = ConfigChange {
        path: w.path.clone(),
        change,
        unreadable,
        items: w.items,
        added: Vec::new(),
        changed: Vec::new(),
        removed: Vec::new(),
    };
    // Items of a file that is not there (or was not readable) are none; of one that does not
    // parse, unknown (then only the file is named).
    let items = |s: &State| match s {
        State::Present { items, .. } => items.clone(),
        State::Absent | State::Unreadable(_) => Some(BTreeMap::new()),
    };
    if let (false, Some(old), Some(new)) = (out.unreadable.is_some(), items(before), items(after)) {
        for (k, v) in &new {
            match old.get(k) {
                None => out.added.push(k.clone()),
                Some(o) if o != v => out.changed.push(k.clone()),
                Some(_) => {}
            }
        }
        out.removed = old
            .keys()
            .filter(|k| !new.contains_key(*k))
            .cloned()
            .collect();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8]) -> Option<Vec<(String, String)>> {
        let text = std::str::from_utf8(bytes).ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn watched(ws: &Path, name: &str) -> Watched {
        Watched {
            path: ws.join(name),
            items: "键",
            itemize: Some(lines),
        }
    }

    #[test]
    fn created_modified_removed_and_unreadable_files_are_named_with_their_keys() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::fs::write(ws.join("kept"), "A=1\n").unwrap();
        std::fs::write(ws.join("mod"), "A=1\nB=2\nC=3\n").unwrap();
        std::fs::write(ws.join("gone"), "A=1\n").unwrap();
        std::fs::write(ws.join("fifo"), "A=1\n").unwrap();
        let list: Vec<Watched> = ["kept", "mod", "gone", "new", "fifo", "kept"]
            .iter()
            .map(|n| watched(&ws, n))
            .chain([Watched {
                path: PathBuf::from("/elsewhere/.env"),
                items: "键",
                itemize: None,
            }])
            .collect();
        let watch = ConfigWatch::start(&list, &ws, &[]);
        assert_eq!(
            watch.watched().len(),
            5,
            "duplicates and outsiders are not watched"
        );
        assert!(watch.changes().is_empty());
        std::fs::write(ws.join("mod"), "A=1\nB=two\nD=4\n").unwrap();
        std::fs::remove_file(ws.join("gone")).unwrap();
        std::fs::write(ws.join("new"), "SECRET=sk-do-not-print\n").unwrap();
        std::fs::remove_file(ws.join("fifo")).unwrap();
        nix::unistd::mkfifo(&ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let got = watch.changes();
        type Summary = (String, Change, Vec<String>, Vec<String>, Vec<String>);
        let summary: Vec<Summary> = got
            .iter()
            .map(|c| {
                (
                    c.path.file_name().unwrap().to_string_lossy().into_owned(),
                    c.change,
                    c.added.clone(),
                    c.changed.clone(),
                    c.removed.clone(),
                )
            })
            .collect();
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            summary[0],
            (
                "mod".into(),
                Change::Modified,
                v(&["D"]),
                v(&["B"]),
                v(&["C"])
            )
        );
        assert_eq!(
            summary[1],
            ("gone".into(), Change::Removed, v(&[]), v(&[]), v(&["A"]))
        );
        assert_eq!(
            summary[2],
            (
                "new".into(),
                Change::Created,
                v(&["SECRET"]),
                v(&[]),
                v(&[])
            )
        );
        assert_eq!(summary[3].0, "fifo");
        assert_eq!(summary[3].1, Change::Modified);
        assert!(got[3]
            .unreadable
            .as_deref()
            .unwrap()
            .contains("不是普通文件"));
        assert_eq!(got.len(), 4);
        assert!(!format!("{got:?}").contains("sk-do-not-print"));
    }

    #[test]
    fn a_watched_directory_names_the_entries_that_came_and_went() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let plugins = ws.join(".flowerbox/plugins");
        std::fs::create_dir_all(plugins.join("old")).unwrap();
        let list = [Watched {
            path: plugins.clone(),
            items: "插件",
            itemize: None,
        }];
        let watch = ConfigWatch::start(&list, &ws, &[]);
        assert!(watch.changes().is_empty());
        std::fs::create_dir_all(plugins.join("planted/hooks")).unwrap();
        std::fs::remove_dir(plugins.join("old")).unwrap();
        let got = watch.changes();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].change, Change::Modified);
        assert_eq!(got[0].added, ["planted"]);
        assert_eq!(got[0].removed, ["old"]);
        // Created from nothing.
        let fresh = tempfile::tempdir().unwrap();
        let ws = fresh.path().canonicalize().unwrap();
        let list = [Watched {
            path: ws.join(".flowerbox/plugins"),
            items: "插件",
            itemize: None,
        }];
        let watch = ConfigWatch::start(&list, &ws, &[]);
        std::fs::create_dir_all(ws.join(".flowerbox/plugins/p")).unwrap();
        let got = watch.changes();
        assert_eq!(
            (got[0].change, got[0].added.clone()),
            (Change::Created, vec!["p".to_string()])
        );
    }
}

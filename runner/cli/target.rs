//! `run`'s target (seed 000, "`run`"): flower imports `module:attribute` from Python; flowerbox
//! reads a workflow FILE and picks a workflow by NAME, keeping flower's two spellings and its
//! four error messages.
//!
//! - `flows.toml:main` (ends in `.toml` or contains `/`) — a file path, relative to the current
//!   directory;
//! - `flows.py:main` (flower's own spelling) — a file path too, so a missing one gets flower's
//!   "找不到" message and an existing one is refused for what it is: flowerbox does not run
//!   Python, its workflows are TOML;
//! - `flows:main`, `pkg.flows:main` — a "module" name: `flows.toml`, `pkg/flows.toml` in the
//!   current directory.
//!
//! Schema (minimal, for the lookup only; the workflow layer defines what goes inside): the file
//! is TOML and each workflow is a top-level table named after it:
//!
//! ```toml
//! [main]
//! # steps, agents, ... (designed by the workflow issue)
//! ```

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::fsroot::config as config_file;

impl TargetError {
    /// The workflow in `target` declares something it may not (`what` names the step and
    /// field): flower's import failure, `导入 '<FILE>' 失败:'<NAME>' <what>`.
    pub fn declared(target: &RunTarget, what: impl std::fmt::Display) -> Self {
        TargetError::Import {
            module: target.module.clone(),
            message: format!("'{}' {what}", target.name),
        }
    }
}

/// A resolved `run` target.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTarget {
    /// The target as typed (`flows.toml:main`).
    pub spec: String,
    /// The part before the last `:`.
    pub module: String,
    /// The workflow name after the last `:`.
    pub name: String,
    /// The workflow file, absolute.
    pub file: PathBuf,
    /// The named workflow's table, unparsed beyond TOML.
    pub workflow: toml::Table,
}

/// Why a target could not be loaded (all exit 1).
#[derive(Debug, Error, PartialEq)]
pub enum TargetError {
    /// No `:` (or an empty side of it).
    #[error("需要模块:属性形式,例如 flows:main")]
    MissingColon,
    /// A file-path target that does not exist.
    #[error("找不到 {path}(当前目录 {})。给的是文件路径就要能对上;要按模块名导入就别带 .{suffix}", cwd.display())]
    NotFound {
        /// The path as typed.
        path: String,
        /// The extension as typed (`toml`, `py`), named in the advice.
        suffix: String,
        /// The current directory.
        cwd: PathBuf,
    },
    /// The file could not be read or is not valid TOML (or a module name matched no file).
    #[error("导入 '{module}' 失败:{message}")]
    Import {
        /// The module part as typed.
        module: String,
        /// The original error text.
        message: String,
    },
    /// The file has no top-level entry of that name.
    #[error("'{module}' 里没有 '{name}'")]
    NoAttr {
        /// The module part as typed.
        module: String,
        /// The workflow name.
        name: String,
    },
    /// The entry exists but is not a table.
    #[error("'{module}' 里的 '{name}' 不是流程:要写成 [{name}] 表")]
    NotAWorkflow {
        /// The module part as typed.
        module: String,
        /// The workflow name.
        name: String,
    },
}

/// Parses and loads `spec` relative to `cwd`. The file is read with the one configuration
/// reader: inside `workspace` (agents can write it) as the file tools read it — no symlink out
/// of it, nothing in `masked` (the run directory) — and elsewhere as the user's own file;
/// either way only a regular file of at most 1 MiB, never blocking.
///
/// Errors: see [`TargetError`], in the order the checks run (colon, file, parse, name).
pub fn resolve(
    spec: &str,
    cwd: &Path,
    workspace: &Path,
    masked: &[PathBuf],
) -> Result<RunTarget, TargetError> {
    let (module, name) = spec
        .rsplit_once(':')
        .filter(|(m, n)| !m.is_empty() && !n.is_empty())
        .ok_or(TargetError::MissingColon)?;
    let import = |message: String| TargetError::Import {
        module: module.to_string(),
        message,
    };
    let suffix = extension(module);
    let is_path = suffix.is_some() || module.contains('/');
    let file = if is_path {
        let file = cwd.join(module);
        if !file.exists() {
            return Err(TargetError::NotFound {
                path: module.to_string(),
                suffix: suffix.unwrap_or("toml").to_string(),
                cwd: cwd.to_path_buf(),
            });
        }
        if suffix == Some("py") {
            return Err(import(python_refusal(module, name, cwd)));
        }
        file
    } else {
        let file = cwd.join(format!("{}.toml", module.replace('.', "/")));
        if !file.exists() {
            return Err(import(format!("没有 {}", file.display())));
        }
        file
    };
    let place = config_file::Place::of(&file, &[workspace], masked);
    let text = match config_file::read(&file, &place, config_file::CONFIG_CAP) {
        Ok(Some(f)) => f.text(),
        Ok(None) => return Err(import(format!("没有 {}", file.display()))),
        Err(e) => return Err(import(e.to_string())),
    };
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| import(e.to_string().trim_end().to_string()))?;
    let workflow = match doc.remove(name) {
        None => {
            return Err(TargetError::NoAttr {
                module: module.to_string(),
                name: name.to_string(),
            })
        }
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(TargetError::NotAWorkflow {
                module: module.to_string(),
                name: name.to_string(),
            })
        }
    };
    Ok(RunTarget {
        spec: spec.to_string(),
        module: module.to_string(),
        name: name.to_string(),
        file,
        workflow,
    })
}

/// The workflow-file extension `module` ends in, lowercased (`FLOWS.TOML` is a path too).
fn extension(module: &str) -> Option<&'static str> {
    let (_, ext) = module.rsplit_once('.')?;
    ["toml", "py"]
        .into_iter()
        .find(|known| ext.eq_ignore_ascii_case(known))
}

/// Why an existing `.py` target is refused, pointing at the TOML file next to it if there is one.
fn python_refusal(module: &str, name: &str, cwd: &Path) -> String {
    let toml = format!("{}.toml", &module[..module.len() - ".py".len()]);
    let advice = if cwd.join(&toml).is_file() {
        format!("要跑旁边的 TOML 就写 flowerbox run {toml}:{name}")
    } else {
        format!("把流程写成 TOML 文件里的 [{name}] 表(见 examples/flows.toml)")
    };
    format!("flowerbox 不跑 Python 流程,流程写在 TOML 文件里。{advice}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("flows.toml"), "[main]\nsteps = []\n[other]\n").unwrap();
        std::fs::create_dir(d.path().join("pkg")).unwrap();
        std::fs::write(d.path().join("pkg/more.toml"), "[build]\n").unwrap();
        std::fs::write(d.path().join("bad.toml"), "[main\n").unwrap();
        std::fs::write(d.path().join("scalar.toml"), "main = 3\n").unwrap();
        d
    }

    #[test]
    fn file_and_module_forms() {
        let d = dir();
        let t = resolve("flows.toml:main", d.path(), d.path(), &[]).unwrap();
        assert_eq!(t.file, d.path().join("flows.toml"));
        assert_eq!((t.module.as_str(), t.name.as_str()), ("flows.toml", "main"));
        assert!(t.workflow.contains_key("steps"));
        assert_eq!(
            resolve("flows:other", d.path(), d.path(), &[])
                .unwrap()
                .name,
            "other"
        );
        assert_eq!(
            resolve("pkg.more:build", d.path(), d.path(), &[])
                .unwrap()
                .file,
            d.path().join("pkg/more.toml")
        );
        assert!(resolve("pkg/more.toml:build", d.path(), d.path(), &[]).is_ok());
    }

    #[test]
    fn missing_colon() {
        let d = dir();
        for spec in ["flows", "flows:", ":main"] {
            let e = resolve(spec, d.path(), d.path(), &[]).unwrap_err();
            assert_eq!(e, TargetError::MissingColon);
            assert_eq!(e.to_string(), "需要模块:属性形式,例如 flows:main");
        }
    }

    #[test]
    fn missing_file_names_the_cwd() {
        let d = dir();
        let e = resolve("missing.toml:main", d.path(), d.path(), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "找不到 missing.toml(当前目录 {})。给的是文件路径就要能对上;要按模块名导入就别带 .toml",
                d.path().display()
            )
        );
    }

    #[test]
    fn python_targets_are_paths_with_flowers_advice() {
        let d = dir();
        let e = resolve("missing.py:main", d.path(), d.path(), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "找不到 missing.py(当前目录 {})。给的是文件路径就要能对上;要按模块名导入就别带 .py",
                d.path().display()
            )
        );
        std::fs::write(d.path().join("flows.py"), "def main(): ...\n").unwrap();
        let e = resolve("flows.py:main", d.path(), d.path(), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "导入 'flows.py' 失败:flowerbox 不跑 Python 流程,流程写在 TOML 文件里。\
             要跑旁边的 TOML 就写 flowerbox run flows.toml:main"
        );
        std::fs::write(d.path().join("lone.py"), "").unwrap();
        let e = resolve("lone.py:build", d.path(), d.path(), &[]).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("[build] 表(见 examples/flows.toml)"),
            "{e}"
        );
    }

    #[test]
    fn an_upper_case_extension_is_still_a_path() {
        let d = dir();
        std::fs::write(d.path().join("UP.TOML"), "[main]\n").unwrap();
        assert!(resolve("UP.TOML:main", d.path(), d.path(), &[]).is_ok());
        assert!(matches!(
            resolve("gone.TOML:main", d.path(), d.path(), &[]).unwrap_err(),
            TargetError::NotFound { .. }
        ));
    }

    #[test]
    fn import_failures() {
        let d = dir();
        let e = resolve("bad.toml:main", d.path(), d.path(), &[]).unwrap_err();
        assert!(e.to_string().starts_with("导入 'bad.toml' 失败:"), "{e}");
        let e = resolve("nomodule:main", d.path(), d.path(), &[]).unwrap_err();
        assert!(
            e.to_string().starts_with("导入 'nomodule' 失败:没有 "),
            "{e}"
        );
    }

    #[test]
    fn a_workflow_file_in_the_workspace_is_read_as_the_file_tools_read_it() {
        let d = dir();
        let ws = d.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("evil.toml"), "[main]\n").unwrap();
        // A FIFO planted as the workflow file: refused at once, never waited on.
        nix::unistd::mkfifo(&ws.join("fifo.toml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = resolve("fifo.toml:main", &ws, &ws, &[]).unwrap_err();
        assert!(e.to_string().contains("不是普通文件"), "{e}");
        // A link out of the workspace: refused; inside it: followed.
        std::os::unix::fs::symlink(outside.path().join("evil.toml"), ws.join("out.toml")).unwrap();
        let e = resolve("out.toml:main", &ws, &ws, &[]).unwrap_err();
        assert!(e.to_string().contains("符号链接"), "{e}");
        std::os::unix::fs::symlink("flows.toml", ws.join("in.toml")).unwrap();
        assert!(resolve("in.toml:main", &ws, &ws, &[]).is_ok());
        // Outside the workspace it is the user's own file: links are theirs to make.
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(resolve("out.toml:main", &ws, elsewhere.path(), &[]).is_ok());
        // Huge: refused by its size, not read.
        std::fs::File::create(ws.join("huge.toml"))
            .unwrap()
            .set_len(1 << 31)
            .unwrap();
        let e = resolve("huge.toml:main", &ws, &ws, &[]).unwrap_err();
        assert!(e.to_string().contains("超过"), "{e}");
    }

    #[test]
    fn missing_or_wrong_attribute() {
        let d = dir();
        assert_eq!(
            resolve("flows.toml:nope", d.path(), d.path(), &[])
                .unwrap_err()
                .to_string(),
            "'flows.toml' 里没有 'nope'"
        );
        assert!(matches!(
            resolve("scalar.toml:main", d.path(), d.path(), &[]).unwrap_err(),
            TargetError::NotAWorkflow { .. }
        ));
    }
}

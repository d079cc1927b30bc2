//! Plugins that travel with the repository (seed 001 "plugin", issue 28), in Claude Code's
//! layout so an existing plugin works unchanged:
//!
//! ```text
//! <plugin>/.claude-plugin/plugin.json   optional manifest ({"name": …})
//! <plugin>/skills/<name>/SKILL.md       front matter name + description; the body on demand
//! <plugin>/agents/<name>.md             front matter name, description, tools, model; body = prompt
//! <plugin>/hooks/hooks.json             {"hooks": {"PreToolUse": [{"matcher", "hooks": [...]}]}}
//! <plugin>/.mcp.json                    MCP servers, merged by `mcp::config`
//! ```
//!
//! Plugins are found in every directory under `<workspace>/.flowerbox/plugins/` and in each
//! `--plugin-dir DIR`. Every file and directory listing is read through the one configuration
//! reader (`fsroot::config`): beneath the workspace, no symlink leads out of it and nothing
//! blocks; what a plugin says is data. Skills are read by flowerbox on the host (the `Skill`
//! tool); agent types only narrow the worker role; hook commands run only inside the agent's
//! own container (`hooks`), never on the host.

pub mod hooks;
pub mod parse;

use std::path::{Path, PathBuf};

use crate::fsroot::config::{self as config_file, Place, CONFIG_CAP};
pub use parse::{HookEvent, HookSpec};

/// The default place of a repository's plugins, relative to the workspace: one directory per
/// plugin.
pub const DEFAULT_DIR: &str = ".flowerbox/plugins";

/// One plugin found.
#[derive(Debug, Clone)]
pub struct Plugin {
    /// Its name (the manifest's, else the directory's).
    pub name: String,
    /// Its root directory (absolute).
    pub root: PathBuf,
}

/// A skill: shown by name and description; the body is read on demand.
#[derive(Debug, Clone)]
pub struct Skill {
    /// The plugin it belongs to.
    pub plugin: String,
    /// Its name.
    pub name: String,
    /// When to use it (shown to every agent that can read).
    pub description: String,
    /// Its directory (`SKILL.md` and the files beside it).
    pub dir: PathBuf,
    /// How its files are opened.
    pub place: Place,
}

/// An agent type (`agents/<name>.md`): a worker type the coordinator can dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentType {
    /// The plugin it belongs to.
    pub plugin: String,
    /// Its name (the `subagent_type`).
    pub name: String,
    /// What to send it.
    pub description: String,
    /// Its own instructions (the Markdown body).
    pub prompt: String,
    /// The tools it asks for; `None`: the worker role's.
    pub tools: Option<Vec<String>>,
    /// The model it asks for as written (an id, or Claude Code's alias `sonnet`, `opus`,
    /// `haiku`); `None` (or `inherit`): the run's.
    pub model: Option<String>,
    /// The file it came from.
    pub file: PathBuf,
}

/// One hook of a plugin.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The plugin it belongs to.
    pub plugin: String,
    /// The plugin's root (`CLAUDE_PLUGIN_ROOT`).
    pub root: PathBuf,
    /// The event, matcher and command.
    pub spec: HookSpec,
}

/// Everything the plugins gave, and what could not be loaded.
#[derive(Debug, Clone, Default)]
pub struct Plugins {
    /// The plugins found.
    pub plugins: Vec<Plugin>,
    /// Their skills.
    pub skills: Vec<Skill>,
    /// Their agent types.
    pub agents: Vec<AgentType>,
    /// Their hooks.
    pub hooks: Vec<Hook>,
    /// `<what>:<why>` for each thing that could not be loaded.
    pub problems: Vec<String>,
    /// `--plugin-dir`s (canonical) that may be mounted read-only into agents' containers so
    /// their hooks find their scripts: never one holding the user's home or the workspace
    /// (the command line decides, [`mountable`]).
    pub mounts: Vec<PathBuf>,
}

impl Plugins {
    /// True when there is nothing.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// The hooks of `event` that apply to `tool` (`""` for events without tools).
    pub fn hooks_for(&self, event: HookEvent, tool: &str) -> Vec<&Hook> {
        self.hooks
            .iter()
            .filter(|h| h.spec.event == event && h.spec.applies_to(tool))
            .collect()
    }

    /// The skill called `name` (or `plugin:name`).
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills
            .iter()
            .find(|s| s.name == name || format!("{}:{}", s.plugin, s.name) == name)
    }
}

/// The plugin directories: each directory in `<workspace>/.flowerbox/plugins/`, then each of
/// `explicit` (`--plugin-dir`), without repeats; problems listing the default place go to
/// `problems`.
pub fn roots(
    workspace: &Path,
    explicit: &[PathBuf],
    masked: &[PathBuf],
    problems: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let default = workspace.join(DEFAULT_DIR);
    let place = Place::of(&default, &[workspace], masked);
    match config_file::list(&default, &place) {
        Ok(None) => {}
        Ok(Some(entries)) => out.extend(
            entries
                .into_iter()
                .filter(|(_, is_dir)| *is_dir)
                .map(|(name, _)| default.join(name)),
        ),
        Err(e) => problems.push(format!("{}:{e}", default.display())),
    }
    for dir in explicit {
        let dir = config_file::lexical(dir);
        if !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

/// Loads the plugins of `workspace` and `explicit` (see [`roots`]). Never fails: what cannot
/// be loaded is in [`Plugins::problems`] (a `--plugin-dir` that is not a directory too).
pub fn load(workspace: &Path, explicit: &[PathBuf], masked: &[PathBuf]) -> Plugins {
    let mut all = Plugins::default();
    for root in roots(workspace, explicit, masked, &mut all.problems) {
        let place = Place::of(&root, &[workspace], masked);
        match config_file::list(&root, &place) {
            Ok(Some(_)) => load_one(&root, &place, &mut all),
            Ok(None) => all
                .problems
                .push(format!("插件目录 {}:不存在", root.display())),
            Err(e) => all
                .problems
                .push(format!("插件目录 {}:{e}", root.display())),
        }
    }
    all
}

fn read_text(path: &Path, place: &Place) -> Result<Option<String>, String> {
    config_file::read(path, place, CONFIG_CAP)
        .map(|f| f.map(|f| f.text()))
        .map_err(|e| e.to_string())
}

/// What is wrong with `what`, for the plugins' problems.
fn problem(problems: &mut Vec<String>, what: &Path, why: String) {
    problems.push(format!("{}:{why}", what.display()));
}

fn load_one(root: &Path, place: &Place, all: &mut Plugins) {
    let problems = &mut all.problems;
    let name = plugin_name(root, place, problems);
    let skills = load_skills(root, place, &name, problems);
    let agents = load_agents(root, place, &name, problems);
    let hooks = load_hooks(root, place, &name, problems);
    for s in skills {
        if all.skills.iter().any(|o| o.name == s.name) {
            all.problems.push(format!(
                "插件 {} 的技能 {}:和已有的同名,没加载",
                name, s.name
            ));
        } else {
            all.skills.push(s);
        }
    }
    for a in agents {
        if all.agents.iter().any(|o| o.name == a.name) {
            all.problems.push(format!(
                "插件 {} 的 agent 类型 {}:和已有的同名,没加载",
                name, a.name
            ));
        } else {
            all.agents.push(a);
        }
    }
    all.hooks.extend(hooks);
    all.plugins.push(Plugin {
        name,
        root: root.to_path_buf(),
    });
}

/// The plugin's name: its manifest's, else its directory's.
fn plugin_name(root: &Path, place: &Place, problems: &mut Vec<String>) -> String {
    let manifest = root.join(".claude-plugin/plugin.json");
    let mut name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    match read_text(&manifest, place) {
        Ok(None) => {}
        Ok(Some(text)) => match parse::manifest_name(&text) {
            Ok(Some(n)) => name = n,
            Ok(None) => {}
            Err(e) => problem(problems, &manifest, e.to_string()),
        },
        Err(e) => problem(problems, &manifest, e),
    }
    name
}

/// `skills/<dir>/SKILL.md`, each with a description.
fn load_skills(root: &Path, place: &Place, name: &str, problems: &mut Vec<String>) -> Vec<Skill> {
    let mut skills = Vec::new();
    let dir = root.join("skills");
    let entries = match config_file::list(&dir, place) {
        Ok(None) => return skills,
        Ok(Some(entries)) => entries,
        Err(e) => {
            problem(problems, &dir, e.to_string());
            return skills;
        }
    };
    for (entry, is_dir) in entries {
        if !is_dir {
            continue;
        }
        let skill_dir = dir.join(&entry);
        let file = skill_dir.join("SKILL.md");
        match read_text(&file, place) {
            Ok(None) => problem(problems, &file, "没有这个文件".into()),
            Ok(Some(text)) => match parse::front_matter(&text) {
                Ok(fm) => match fm.get("description") {
                    Some(d) => skills.push(Skill {
                        plugin: name.to_string(),
                        name: fm.get("name").unwrap_or(&entry).to_string(),
                        description: d.to_string(),
                        dir: skill_dir.clone(),
                        place: place.clone(),
                    }),
                    None => problem(
                        problems,
                        &file,
                        parse::ParseError::Missing("description").to_string(),
                    ),
                },
                Err(e) => problem(problems, &file, e.to_string()),
            },
            Err(e) => problem(problems, &file, e),
        }
    }
    skills
}

/// `agents/<name>.md`, each with a description.
fn load_agents(
    root: &Path,
    place: &Place,
    name: &str,
    problems: &mut Vec<String>,
) -> Vec<AgentType> {
    let mut agents = Vec::new();
    let dir = root.join("agents");
    let entries = match config_file::list(&dir, place) {
        Ok(None) => return agents,
        Ok(Some(entries)) => entries,
        Err(e) => {
            problem(problems, &dir, e.to_string());
            return agents;
        }
    };
    for (entry, is_dir) in entries {
        let Some(stem) = entry.strip_suffix(".md").filter(|_| !is_dir) else {
            continue;
        };
        let file = dir.join(&entry);
        match read_text(&file, place) {
            Ok(None) => {}
            Ok(Some(text)) => match parse::front_matter(&text) {
                Ok(fm) => match fm.get("description") {
                    Some(d) => {
                        // An alias (`sonnet`) is resolved by the caller, which knows the model
                        // configuration.
                        let model = fm
                            .get("model")
                            .filter(|m| *m != "inherit")
                            .map(str::to_string);
                        agents.push(AgentType {
                            plugin: name.to_string(),
                            name: fm.get("name").unwrap_or(stem).to_string(),
                            description: d.to_string(),
                            prompt: fm.body.trim().to_string(),
                            tools: fm.list("tools"),
                            model,
                            file: file.clone(),
                        })
                    }
                    None => problem(
                        problems,
                        &file,
                        parse::ParseError::Missing("description").to_string(),
                    ),
                },
                Err(e) => problem(problems, &file, e.to_string()),
            },
            Err(e) => problem(problems, &file, e),
        }
    }
    agents
}

/// `hooks/hooks.json`.
fn load_hooks(root: &Path, place: &Place, name: &str, problems: &mut Vec<String>) -> Vec<Hook> {
    let file = root.join("hooks/hooks.json");
    match read_text(&file, place) {
        Ok(None) => Vec::new(),
        Ok(Some(text)) => match parse::hooks_json(&text) {
            Ok(specs) => specs
                .into_iter()
                .map(|spec| Hook {
                    plugin: name.to_string(),
                    root: root.to_path_buf(),
                    spec,
                })
                .collect(),
            Err(e) => {
                problem(problems, &file, e.to_string());
                Vec::new()
            }
        },
        Err(e) => {
            problem(problems, &file, e);
            Vec::new()
        }
    }
}

/// Whether the `--plugin-dir` `dir` may be mounted into agents' containers: canonical, not `/`,
/// not holding `home` or `workspace` (whose secrets or run records it would expose), not inside
/// the workspace (its plugins are reached through the agents' own mounts).
pub fn mountable(dir: &Path, home: Option<&Path>, workspace: &Path) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    let holds = |p: &Path| p.starts_with(&dir);
    let refused = dir.parent().is_none()
        || home.is_some_and(holds)
        || holds(workspace)
        || dir.starts_with(workspace);
    (!refused).then_some(dir)
}

/// The files of the plugins that the configuration watch follows over a run (each plugin's
/// manifest, hooks, MCP file, and the skills and agent types found).
pub fn watched_files(p: &Plugins) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for plugin in &p.plugins {
        for f in [
            ".claude-plugin/plugin.json",
            "hooks/hooks.json",
            ".mcp.json",
        ] {
            out.push(plugin.root.join(f));
        }
    }
    out.extend(p.skills.iter().map(|s| s.dir.join("SKILL.md")));
    out.extend(p.agents.iter().map(|a| a.file.clone()));
    out
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod load_tests;

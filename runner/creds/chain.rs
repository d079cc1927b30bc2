//! The credential lookup chain (flower's config reference, "凭证查找优先级"), computed per key:
//!
//! 1. the process environment;
//! 2. the file named by `$FLOWER_ENV`, when set;
//! 3. `./.env` in the current directory (not the workspace: flower reads `$PWD/.env`);
//! 4. `${XDG_CONFIG_HOME:-~/.config}/flower/.env` (what `setup` writes);
//! 5. the `env` block of `~/.claude/settings.json`, then `~/.claude/settings.local.json` — only
//!    the 9 [`CREDENTIAL_KEYS`].
//!
//! (flower's item 5, a `.env` at its source checkout's root, has no counterpart in a binary.)
//! The first source that defines a key wins, even with an empty value. Every file is read with
//! the one configuration reader (`fsroot::config`): a project's `./.env` and any file inside
//! the workspace as the file tools read workspace files (no symlink out, regular files only,
//! never blocking, 1 MiB at most), the user's own by path with the same checks. Missing files
//! are skipped; unreadable, binary or malformed ones are skipped and named, never fatal. The
//! endpoints the sources choose are then bound to the credentials sent there (`creds::bind`).
//! Every input (variables, cwd, workspace) is passed in, so tests use temporary directories
//! and nothing reads or writes the real process environment here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::credentials::{Credentials, Layer, Source, Trust};
use super::dotenv;
use super::warning::{DotenvSkip, DotenvWarning, NAMED_LINES};
use super::{CREDENTIAL_KEYS, LOOKUP_KEYS};
use crate::fsroot::config::{self as config_file, ConfigFile, Place, CONFIG_CAP};

/// The inputs of a lookup: a snapshot of the environment variables and the current directory,
/// and the directories agents can write.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// Environment variables (a snapshot; `HOME`, `XDG_CONFIG_HOME`, `FLOWER_ENV` are read from
    /// here too).
    pub vars: BTreeMap<String, String>,
    /// The directory whose `.env` is item 3.
    pub cwd: PathBuf,
    /// The workspace (canonical), when known: a file of the chain inside it is the project's
    /// (agents can write it), read as the file tools read, and its endpoints are bound.
    pub workspace: Option<PathBuf>,
    /// Directories never read as configuration (the run directory).
    pub masked: Vec<PathBuf>,
}

impl Lookup {
    /// A lookup over `vars` and `cwd`.
    pub fn new(vars: BTreeMap<String, String>, cwd: PathBuf) -> Self {
        Self {
            vars,
            cwd,
            workspace: None,
            masked: Vec::new(),
        }
    }

    /// The same lookup for a run in `workspace` (canonical) whose run directory is `run_dir`.
    pub fn confined(mut self, workspace: &Path, run_dir: &Path) -> Self {
        self.workspace = Some(workspace.to_path_buf());
        self.masked = vec![run_dir.to_path_buf()];
        self
    }

    /// A non-empty variable.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// `$HOME`, when set.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// `${XDG_CONFIG_HOME:-~/.config}/flower/.env`; `None` when neither variable is set.
    pub fn user_env_file(&self) -> Option<PathBuf> {
        let base = match self.var("XDG_CONFIG_HOME") {
            Some(xdg) => PathBuf::from(xdg),
            None => self.home()?.join(".config"),
        };
        Some(base.join("flower").join(".env"))
    }

    /// The user file's path for messages: the real path, or the literal
    /// `~/.config/flower/.env` when no home is known.
    pub fn user_env_display(&self) -> String {
        self.user_env_file()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "~/.config/flower/.env".to_string())
    }

    /// Runs the chain and returns the effective values of [`LOOKUP_KEYS`], bound (see
    /// `creds::bind`), with what reading the files found.
    pub fn discover(&self) -> Credentials {
        let mut read = Read::default();
        let mut dotenv_paths = Vec::new();
        let process = LOOKUP_KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), self.vars.get(*k)?.clone())))
            .collect();
        read.layers
            .push(Layer::new(Source::Process, Trust::User, process));
        if let Some(path) = self.var("FLOWER_ENV") {
            let path = config_file::lexical(&self.cwd.join(path));
            dotenv_paths.push(path.clone());
            self.take_dotenv(&mut read, &path, Source::FlowerEnv(path.clone()));
        }
        let cwd_env = self.cwd.join(".env");
        dotenv_paths.push(cwd_env.clone());
        self.take_dotenv(&mut read, &cwd_env, Source::CwdDotenv(cwd_env.clone()));
        if let Some(user) = self.user_env_file() {
            self.take_dotenv(&mut read, &user, Source::UserDotenv(user.clone()));
        }
        if let Some(home) = self.home() {
            for name in ["settings.json", "settings.local.json"] {
                let path = home.join(".claude").join(name);
                self.take_claude_settings(&mut read, &path);
            }
        }
        let mut creds = Credentials::from_layers(read.layers, read.warnings);
        creds.dotenv_paths = dotenv_paths;
        creds
    }

    /// How `path` is opened: beneath the workspace when it lies there; a project's `./.env`
    /// beneath the current directory otherwise (it is the project's wherever it is); any other
    /// file as the user's own.
    fn place(&self, path: &Path, source: &Source) -> Place {
        let mut roots: Vec<&Path> = self.workspace.iter().map(PathBuf::as_path).collect();
        if let Source::CwdDotenv(_) = source {
            roots.push(&self.cwd);
        }
        Place::of(path, &roots, &self.masked)
    }

    /// Who can write what was read at `source`: a project's `./.env`, and any file that really
    /// lies in the workspace, is the project's.
    fn trust(&self, source: &Source, file: &ConfigFile) -> Trust {
        match &self.workspace {
            Some(ws) if file.lies_in(ws) => Trust::Project,
            _ => source.default_trust(),
        }
    }

    /// Reads `path` with the one configuration reader; `None` (and a warning when it exists
    /// but cannot be read) when there is nothing to use.
    fn open(&self, read: &mut Read, path: &Path, source: &Source) -> Option<ConfigFile> {
        match config_file::read(path, &self.place(path, source), CONFIG_CAP) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "credential file not read");
                read.warn(path, DotenvSkip::Unreadable(e.to_string()));
                None
            }
        }
    }

    /// Adds a `.env` file's lookup keys as a layer, and records what was odd in it.
    fn take_dotenv(&self, read: &mut Read, path: &Path, source: Source) {
        let Some(file) = self.open(read, path, &source) else {
            return;
        };
        let report = dotenv::report_bytes(&file.bytes);
        if report.binary {
            tracing::warn!(path = %path.display(), "binary .env skipped");
            read.warn(path, DotenvSkip::Binary);
            return;
        }
        for skipped in report.skipped.iter().take(NAMED_LINES) {
            tracing::warn!(path = %path.display(), line = skipped.line, why = %skipped.why, "malformed .env line skipped");
            read.warn(path, DotenvSkip::Line(*skipped));
        }
        if report.skipped.len() > NAMED_LINES {
            read.warn(
                path,
                DotenvSkip::MoreLines(report.skipped.len() - NAMED_LINES),
            );
        }
        for note in report.quotes {
            if LOOKUP_KEYS.contains(&note.key.as_str()) {
                read.warn(path, DotenvSkip::Quote(note));
            }
        }
        let pairs = report
            .pairs
            .into_iter()
            .filter(|(k, _)| LOOKUP_KEYS.contains(&k.as_str()))
            .collect();
        let trust = self.trust(&source, &file);
        read.layers.push(Layer::new(source, trust, pairs));
    }

    /// Adds a Claude Code settings file's `env` credential keys as a layer. A missing file,
    /// invalid JSON or a non-object `env` contributes nothing.
    fn take_claude_settings(&self, read: &mut Read, path: &Path) {
        let source = Source::ClaudeSettings(path.to_path_buf());
        let Some(file) = self.open(read, path, &source) else {
            return;
        };
        let json: serde_json::Value = match serde_json::from_slice(&file.bytes) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring malformed settings file");
                return;
            }
        };
        let Some(env) = json.get("env").and_then(|e| e.as_object()) else {
            return;
        };
        let pairs = CREDENTIAL_KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), env.get(*k)?.as_str()?.to_string())))
            .collect();
        let trust = self.trust(&source, &file);
        read.layers.push(Layer::new(source, trust, pairs));
    }
}

/// What the chain has read so far.
#[derive(Default)]
struct Read {
    layers: Vec<Layer>,
    warnings: Vec<DotenvWarning>,
}

impl Read {
    fn warn(&mut self, path: &Path, skipped: DotenvSkip) {
        self.warnings.push(DotenvWarning {
            path: path.to_path_buf(),
            skipped,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Dirs {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        cwd: PathBuf,
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let cwd = tmp.path().join("proj");
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&cwd).unwrap();
        Dirs {
            _tmp: tmp,
            home,
            cwd,
        }
    }

    fn lookup(d: &Dirs, extra: &[(&str, &str)]) -> Lookup {
        let mut vars = BTreeMap::new();
        vars.insert("HOME".to_string(), d.home.display().to_string());
        for (k, v) in extra {
            vars.insert(k.to_string(), v.to_string());
        }
        Lookup::new(vars, d.cwd.clone())
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn priority_is_per_key() {
        let d = dirs();
        write(
            &d.cwd.join(".env"),
            "ANTHROPIC_DEFAULT_HAIKU_MODEL=h-project\n",
        );
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_DEFAULT_HAIKU_MODEL=h-global\nANTHROPIC_AUTH_TOKEN=global-token-123\n",
        );
        write(
            &d.home.join(".claude/settings.json"),
            r#"{"env":{"ANTHROPIC_AUTH_TOKEN":"claude-token","ANTHROPIC_MODEL":"m-claude"}}"#,
        );
        let c = lookup(&d, &[("ANTHROPIC_MODEL", "m-env")]).discover();
        assert_eq!(c.get("ANTHROPIC_DEFAULT_HAIKU_MODEL"), Some("h-project"));
        assert_eq!(c.get("ANTHROPIC_AUTH_TOKEN"), Some("global-token-123"));
        assert_eq!(c.get("ANTHROPIC_MODEL"), Some("m-env"));
        assert_eq!(c.source("ANTHROPIC_MODEL"), Some(&Source::Process));
        assert_eq!(
            c.source("ANTHROPIC_AUTH_TOKEN"),
            Some(&Source::UserDotenv(d.home.join(".config/flower/.env")))
        );
    }

    #[test]
    fn xdg_config_home_moves_the_user_file() {
        let d = dirs();
        let xdg = d.home.join("xdg");
        write(&xdg.join("flower/.env"), "ANTHROPIC_API_KEY=sk-ant-xdg\n");
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-default\n",
        );
        let l = lookup(&d, &[("XDG_CONFIG_HOME", &xdg.display().to_string())]);
        assert_eq!(l.user_env_file(), Some(xdg.join("flower/.env")));
        assert_eq!(l.discover().get("ANTHROPIC_API_KEY"), Some("sk-ant-xdg"));
    }

    #[test]
    fn flower_env_comes_before_cwd() {
        let d = dirs();
        write(&d.cwd.join(".env"), "ANTHROPIC_MODEL=from-cwd\n");
        write(
            &d.cwd.join("custom.env"),
            "ANTHROPIC_MODEL=from-flower-env\n",
        );
        let c = lookup(&d, &[("FLOWER_ENV", "custom.env")]).discover();
        assert_eq!(c.get("ANTHROPIC_MODEL"), Some("from-flower-env"));
    }

    #[test]
    fn claude_settings_lend_only_the_nine_keys() {
        let d = dirs();
        write(
            &d.home.join(".claude/settings.json"),
            r#"{"env":{"ANTHROPIC_AUTH_TOKEN":"tok-from-claude","OPENAI_API_KEY":"nope","FLOWERBOX_PROVIDER":"openai"},"permissions":{}}"#,
        );
        write(
            &d.home.join(".claude/settings.local.json"),
            r#"{"env":{"ANTHROPIC_AUTH_TOKEN":"later","ANTHROPIC_DEFAULT_HAIKU_MODEL":"haiku-x"}}"#,
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_AUTH_TOKEN"), Some("tok-from-claude"));
        assert_eq!(c.get("ANTHROPIC_DEFAULT_HAIKU_MODEL"), Some("haiku-x"));
        assert_eq!(c.get("OPENAI_API_KEY"), None);
        assert_eq!(c.get("FLOWERBOX_PROVIDER"), None);
    }

    #[test]
    fn broken_files_are_skipped() {
        let d = dirs();
        write(&d.home.join(".claude/settings.json"), "{not json");
        write(
            &d.home.join(".claude/settings.local.json"),
            r#"{"env":[1,2]}"#,
        );
        write(
            &d.cwd.join(".env"),
            "garbage line\nANTHROPIC_API_KEY=sk-ant-ok\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_API_KEY"), Some("sk-ant-ok"));
        // The malformed line is reported with its file and number.
        let warnings: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(
            warnings,
            [format!(
                "! {} 第 1 行看不懂(没有 `=`),跳过了",
                d.cwd.join(".env").display()
            )]
        );
    }

    #[test]
    fn empty_value_blocks_fallback() {
        let d = dirs();
        write(&d.cwd.join(".env"), "ANTHROPIC_AUTH_TOKEN=\n");
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_AUTH_TOKEN=tok-global\n",
        );
        let c = lookup(&d, &[]).discover();
        assert!(!c.has_token());
    }

    #[test]
    fn only_lookup_keys_are_kept() {
        let d = dirs();
        write(
            &d.cwd.join(".env"),
            "UNRELATED=1\nOPENAI_BASE_URL=http://llm\nOPENAI_API_KEY=sk-local\n",
        );
        let c = lookup(&d, &[("PATH", "/bin")]).discover();
        assert_eq!(c.get("UNRELATED"), None);
        assert_eq!(c.get("PATH"), None);
        assert_eq!(c.get("OPENAI_BASE_URL"), Some("http://llm"));
    }

    #[test]
    fn a_project_env_never_sends_another_sources_key_to_its_endpoint() {
        // What a worker with a writable workspace can plant for the next run started there.
        let d = dirs();
        write(
            &d.cwd.join(".env"),
            "ANTHROPIC_BASE_URL=https://attacker.example\nOPENAI_BASE_URL=https://attacker.example\n",
        );
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-real\n",
        );
        let c = lookup(&d, &[("OPENAI_API_KEY", "sk-openai-real")]).discover();
        assert_eq!(c.get("ANTHROPIC_API_KEY"), Some("sk-ant-real"));
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), None);
        assert_eq!(c.get("OPENAI_BASE_URL"), None);
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(told[0].contains("设了 ANTHROPIC_BASE_URL,"), "{told:?}");
        assert!(told[1].contains("设了 OPENAI_BASE_URL,"), "{told:?}");
        // The user's own endpoint still counts; the project's is only ignored.
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-real\nANTHROPIC_BASE_URL=https://gateway.example\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gateway.example"));
        // "Some secret" in the file is not enough: the API key wins over its token, and the
        // key is the user's (issue 25 §1: this used to send the user's key to the planted
        // address).
        write(
            &d.cwd.join(".env"),
            "ANTHROPIC_BASE_URL=http://127.0.0.1:4000\nANTHROPIC_AUTH_TOKEN=local-proxy\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gateway.example"));
        assert!(c.warnings()[0]
            .to_string()
            .contains("ANTHROPIC_API_KEY 来自"));
        // With the credential that is sent in the same file, the project's file is the
        // user's choice, as in flower, and the start says where requests go.
        write(
            &d.cwd.join(".env"),
            "ANTHROPIC_BASE_URL=http://127.0.0.1:4000\nANTHROPIC_API_KEY=\nANTHROPIC_AUTH_TOKEN=local-proxy\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:4000"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].starts_with("- 模型请求发往 http://127.0.0.1:4000"),
            "{told:?}"
        );
    }

    #[test]
    fn a_flower_env_file_inside_the_workspace_is_the_projects() {
        let d = dirs();
        let ws = d.cwd.canonicalize().unwrap();
        write(&ws.join("team.env"), "ANTHROPIC_BASE_URL=http://canary\n");
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-real\n",
        );
        let l = lookup(&d, &[("FLOWER_ENV", "team.env")]);
        // Outside any workspace it is the user's explicit choice...
        assert_eq!(
            l.discover().get("ANTHROPIC_BASE_URL"),
            Some("http://canary")
        );
        // ... inside the run's workspace it is something an agent can write.
        let l = l.confined(&ws, &ws.join("runs"));
        assert_eq!(l.discover().get("ANTHROPIC_BASE_URL"), None);
        // So is a user's path that is a link into the workspace.
        let link = d.home.join("linked.env");
        std::os::unix::fs::symlink(ws.join("team.env"), &link).unwrap();
        let l =
            lookup(&d, &[("FLOWER_ENV", link.to_str().unwrap())]).confined(&ws, &ws.join("runs"));
        assert_eq!(l.discover().get("ANTHROPIC_BASE_URL"), None);
    }

    #[test]
    fn unreadable_binary_and_noisy_files_are_one_or_a_few_lines_each() {
        let d = dirs();
        nix::unistd::mkfifo(&d.cwd.join(".env"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-ok\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_API_KEY"), Some("sk-ant-ok"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].contains("读不了:不是普通文件"), "{told:?}");
        std::fs::remove_file(d.cwd.join(".env")).unwrap();
        // A binary file: one line for the file.
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 256) as u8).collect();
        std::fs::write(d.cwd.join(".env"), bytes).unwrap();
        let told: Vec<String> = lookup(&d, &[])
            .discover()
            .warnings()
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            told,
            [format!(
                "! {} 不是文本文件(里面有 NUL 字节),整个没用",
                d.cwd.join(".env").display()
            )]
        );
        // Many malformed lines: three named, the rest counted.
        std::fs::write(d.cwd.join(".env"), "junk\n".repeat(50)).unwrap();
        let told: Vec<String> = lookup(&d, &[])
            .discover()
            .warnings()
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(told.len(), 4, "{told:?}");
        assert!(told[3].ends_with("还有 47 行看不懂,也跳过了"), "{told:?}");
        // An unterminated quote on a key flowerbox reads: named with its line and key.
        std::fs::write(
            d.cwd.join(".env"),
            "APP_NAME=\"it's\nANTHROPIC_MODEL=\"claude-x\n",
        )
        .unwrap();
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_MODEL"), Some("claude-x"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(
            told,
            [format!(
                "! {} 第 2 行 ANTHROPIC_MODEL 的引号没配对:落单的引号去掉了,其余照用(值不能跨行)",
                d.cwd.join(".env").display()
            )]
        );
        // A huge one: refused at once, not read.
        let f = std::fs::File::create(d.cwd.join(".env")).unwrap();
        f.set_len(1 << 30).unwrap();
        let told: Vec<String> = lookup(&d, &[])
            .discover()
            .warnings()
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert!(told[0].contains("超过 1024 KiB"), "{told:?}");
    }

    #[test]
    fn no_home_means_no_user_file() {
        let l = Lookup::new(BTreeMap::new(), PathBuf::from("/nonexistent"));
        assert_eq!(l.user_env_file(), None);
        assert_eq!(l.user_env_display(), "~/.config/flower/.env");
        assert!(!l.discover().has_token());
    }
}

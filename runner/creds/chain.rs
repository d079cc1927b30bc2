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
//! The first source that defines a key wins, even with an empty value. Missing, unreadable or
//! malformed files are skipped (logged), never fatal. Every input (variables, cwd) is passed
//! in, so tests use temporary directories and nothing reads or writes the real process
//! environment here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::credentials::{Credentials, DotenvSkip, DotenvWarning, Source};
use super::{dotenv, CREDENTIAL_KEYS, ENDPOINT_KEYS, LOOKUP_KEYS, SECRET_KEYS};

/// The inputs of a lookup: a snapshot of the environment variables and the current directory.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// Environment variables (a snapshot; `HOME`, `XDG_CONFIG_HOME`, `FLOWER_ENV` are read from
    /// here too).
    pub vars: BTreeMap<String, String>,
    /// The directory whose `.env` is item 3.
    pub cwd: PathBuf,
}

impl Lookup {
    /// A lookup over `vars` and `cwd`.
    pub fn new(vars: BTreeMap<String, String>, cwd: PathBuf) -> Self {
        Self { vars, cwd }
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

    /// Runs the chain and returns the effective values of [`LOOKUP_KEYS`].
    pub fn discover(&self) -> Credentials {
        let mut creds = Credentials::empty();
        for key in LOOKUP_KEYS {
            if let Some(value) = self.vars.get(key) {
                creds.claim(key, value, &Source::Process);
            }
        }
        if let Some(path) = self.var("FLOWER_ENV") {
            let path = self.cwd.join(path);
            take_dotenv(&mut creds, &path, Source::FlowerEnv(path.clone()));
        }
        let cwd_env = self.cwd.join(".env");
        let cwd_source = Source::CwdDotenv(cwd_env.clone());
        take_dotenv(&mut creds, &cwd_env, cwd_source.clone());
        refuse_endpoint_without_secret(&mut creds, &cwd_env, &cwd_source);
        if let Some(user) = self.user_env_file() {
            take_dotenv(&mut creds, &user, Source::UserDotenv(user.clone()));
        }
        if let Some(home) = self.home() {
            for name in ["settings.json", "settings.local.json"] {
                let path = home.join(".claude").join(name);
                take_claude_settings(&mut creds, &path);
            }
        }
        creds
    }
}

/// `./.env` lies in the project, where an agent with a writable workspace can write: an
/// endpoint it names is used only when the same file supplies a secret too, so a key from the
/// environment or the user's own file is never sent to an address a project file chose. The
/// endpoint keys are left to the later sources and the user is told.
fn refuse_endpoint_without_secret(creds: &mut Credentials, path: &Path, source: &Source) {
    let from_file = |creds: &Credentials, k: &str| creds.source(k) == Some(source);
    if SECRET_KEYS.iter().any(|k| from_file(creds, k)) {
        return;
    }
    let keys: Vec<String> = ENDPOINT_KEYS
        .iter()
        .filter(|k| from_file(creds, k) && creds.get(k).is_some())
        .map(|k| k.to_string())
        .collect();
    if keys.is_empty() {
        return;
    }
    for k in &keys {
        creds.unclaim(k);
    }
    tracing::warn!(path = %path.display(), ?keys, "project .env endpoint without its own secret ignored");
    creds.warn(DotenvWarning {
        path: path.to_path_buf(),
        skipped: DotenvSkip::EndpointWithoutSecret(keys),
    });
}

/// Fills unclaimed lookup keys from a `.env` file, if it exists and is readable, and records
/// its malformed lines.
fn take_dotenv(creds: &mut Credentials, path: &Path, source: Source) {
    let Some(text) = read_optional(path) else {
        return;
    };
    let (pairs, skipped) = dotenv::parse_report(&text);
    for skipped in skipped {
        tracing::warn!(path = %path.display(), line = skipped.line, why = %skipped.why, "malformed .env line skipped");
        creds.warn(DotenvWarning {
            path: path.to_path_buf(),
            skipped: DotenvSkip::Line(skipped),
        });
    }
    for (key, value) in pairs {
        if LOOKUP_KEYS.contains(&key.as_str()) {
            creds.claim(&key, &value, &source);
        }
    }
}

/// Fills unclaimed credential keys from a Claude Code settings file's `env` object. A missing
/// file, invalid JSON or a non-object `env` contributes nothing.
fn take_claude_settings(creds: &mut Credentials, path: &Path) {
    let Some(text) = read_optional(path) else {
        return;
    };
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring malformed settings file");
            return;
        }
    };
    let Some(env) = json.get("env").and_then(|e| e.as_object()) else {
        return;
    };
    let source = Source::ClaudeSettings(path.to_path_buf());
    for key in CREDENTIAL_KEYS {
        if let Some(value) = env.get(key).and_then(|v| v.as_str()) {
            creds.claim(key, value, &source);
        }
    }
}

/// Reads a file; `None` when it does not exist or cannot be read (the latter is logged).
fn read_optional(path: &Path) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "credential file unreadable, skipped");
            None
        }
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
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].contains("ANTHROPIC_BASE_URL、OPENAI_BASE_URL"),
            "{told:?}"
        );
        // The user's own endpoint still counts; the project's is only ignored.
        write(
            &d.home.join(".config/flower/.env"),
            "ANTHROPIC_API_KEY=sk-ant-real\nANTHROPIC_BASE_URL=https://gateway.example\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gateway.example"));
        // With its own secret the project's file is the user's choice, as in flower.
        write(
            &d.cwd.join(".env"),
            "ANTHROPIC_BASE_URL=http://127.0.0.1:4000\nANTHROPIC_AUTH_TOKEN=local-proxy\n",
        );
        let c = lookup(&d, &[]).discover();
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:4000"));
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn no_home_means_no_user_file() {
        let l = Lookup::new(BTreeMap::new(), PathBuf::from("/nonexistent"));
        assert_eq!(l.user_env_file(), None);
        assert_eq!(l.user_env_display(), "~/.config/flower/.env");
        assert!(!l.discover().has_token());
    }
}

//! The credential chain seen through the real binary: HOME, XDG_CONFIG_HOME and the working
//! directory are the child's (temporary) ones; `-v` shows which source won each key, with
//! secrets masked. This test process's own environment is never changed.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

struct Scene {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
}

impl Scene {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let home = root.join("home");
        let cwd = root.join("proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        Self {
            _tmp: tmp,
            home,
            cwd,
        }
    }

    /// `flowerbox -v once hi`: passes the gate when a token is found (then stops at the runtime
    /// seam with exit 1), prints the 4-line message otherwise.
    fn verbose_once(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            // An endpoint that fails at once: the run context is reached, nothing waits.
            .env("ANTHROPIC_BASE_URL", "notaurl")
            .current_dir(&self.cwd)
            .args(["-v", "once", "hi"])
            .write_stdin("");
        c
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn claude_settings_are_the_last_fallback() {
    let s = Scene::new();
    let settings = s.home.join(".claude/settings.json");
    write(
        &settings,
        r#"{"env":{"ANTHROPIC_AUTH_TOKEN":"claude-borrowed-token","ANTHROPIC_MODEL":"from-claude"},"hooks":{}}"#,
    );
    s.verbose_once()
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains(format!(
                "ANTHROPIC_AUTH_TOKEN=clau…  ({})",
                settings.display()
            ))
            .and(predicate::str::contains("ANTHROPIC_MODEL=from-claude"))
            .and(predicate::str::contains("borrowed").not()),
        )
        .stderr(predicate::str::contains("bad endpoint URL notaurl"));
}

#[test]
fn project_env_beats_user_env_per_key() {
    let s = Scene::new();
    write(
        &s.cwd.join(".env"),
        "# project\r\nexport ANTHROPIC_MODEL=\"project-model\"\r\n",
    );
    let user = s.home.join(".config/flower/.env");
    write(
        &user,
        "ANTHROPIC_MODEL=user-model\nANTHROPIC_API_KEY='sk-ant-user-key-1'\n",
    );
    s.verbose_once().assert().code(1).stdout(
        predicate::str::contains(format!(
            "ANTHROPIC_MODEL=project-model  ({})",
            s.cwd.join(".env").display()
        ))
        .and(predicate::str::contains(format!(
            "ANTHROPIC_API_KEY=sk-a…  ({})",
            user.display()
        ))),
    );
}

#[test]
fn process_environment_wins() {
    let s = Scene::new();
    write(&s.cwd.join(".env"), "ANTHROPIC_MODEL=from-file\n");
    s.verbose_once()
        .env("ANTHROPIC_MODEL", "from-env")
        .env("ANTHROPIC_AUTH_TOKEN", "env-token-12345")
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("ANTHROPIC_MODEL=from-env  (进程环境)").and(
                predicate::str::contains("ANTHROPIC_AUTH_TOKEN=env-…  (进程环境)"),
            ),
        );
}

#[test]
fn xdg_config_home_is_honoured() {
    let s = Scene::new();
    let xdg = s.home.join("elsewhere");
    write(
        &xdg.join("flower/.env"),
        "ANTHROPIC_AUTH_TOKEN=xdg-token-123456\n",
    );
    // The default location is ignored once XDG_CONFIG_HOME is set.
    write(
        &s.home.join(".config/flower/.env"),
        "ANTHROPIC_AUTH_TOKEN=default-token-1\n",
    );
    s.verbose_once()
        .env("XDG_CONFIG_HOME", &xdg)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(format!(
            "ANTHROPIC_AUTH_TOKEN=xdg-…  ({})",
            xdg.join("flower/.env").display()
        )));
}

#[test]
fn dotenv_is_read_from_the_current_directory_not_the_workspace() {
    let s = Scene::new();
    write(
        &s.cwd.join("ws/.env"),
        "ANTHROPIC_AUTH_TOKEN=workspace-token-1\n",
    );
    s.verbose_once()
        .args(["-w", "ws"])
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with("缺少凭证"));
}

#[test]
fn empty_value_claims_the_key() {
    let s = Scene::new();
    write(&s.cwd.join(".env"), "ANTHROPIC_AUTH_TOKEN=\n");
    write(
        &s.home.join(".config/flower/.env"),
        "ANTHROPIC_AUTH_TOKEN=global-token-1\n",
    );
    s.verbose_once()
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with("缺少凭证"));
}

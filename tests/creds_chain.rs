//! The credential chain seen through the real binary: HOME, XDG_CONFIG_HOME and the working
//! directory are the child's (temporary) ones; `-v` shows which source won each key, with
//! secrets masked. This test process's own environment is never changed.

use assert_cmd::Command;
use predicates::prelude::*;

mod cli_support;
use cli_support::{write, Scene};

/// `flowerbox -v once hi`: passes the gate when a token is found (then stops at the runtime
/// seam with exit 1), prints the 4-line message otherwise.
fn verbose_once(s: &Scene) -> Command {
    let mut c = s.cmd();
    // An endpoint that fails at once: the run context is reached, nothing waits.
    c.env("ANTHROPIC_BASE_URL", "notaurl")
        .args(["-v", "once", "hi"]);
    c
}

#[test]
fn claude_settings_are_the_last_fallback() {
    let s = Scene::new();
    let settings = s.home.join(".claude/settings.json");
    write(
        &settings,
        r#"{"env":{"ANTHROPIC_AUTH_TOKEN":"claude-borrowed-token","ANTHROPIC_MODEL":"from-claude"},"hooks":{}}"#,
    );
    verbose_once(&s)
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
    verbose_once(&s).assert().code(1).stdout(
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
    verbose_once(&s)
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
    verbose_once(&s)
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
    verbose_once(&s)
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
    verbose_once(&s)
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with("缺少凭证"));
}

//! The credential chain seen through the real binary: HOME, XDG_CONFIG_HOME and the working
//! directory are the child's (temporary) ones; `-v` shows which source won each key, with
//! secrets masked. This test process's own environment is never changed.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

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

#[test]
fn a_binary_env_is_one_line_and_an_open_quote_is_named_with_file_and_line() {
    // Issue 26 §4: a binary `.env` printed one warning per line; an unterminated quote was
    // kept without a word.
    let s = Scene::new();
    let mut bytes = b"ANTHROPIC_MODEL=m\n".to_vec();
    bytes.extend((0..20_000u32).map(|i| if i % 97 == 0 { b'\n' } else { (i % 251) as u8 }));
    std::fs::write(s.cwd.join(".env"), &bytes).unwrap();
    write(
        &s.home.join(".config/flower/.env"),
        "ANTHROPIC_AUTH_TOKEN=\"user-token-123456\nANTHROPIC_MODEL=user-model\n",
    );
    let out = verbose_once(&s).assert().code(1).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("! ")).collect();
    assert_eq!(
        warnings,
        [
            format!(
                "! {} 不是文本文件(里面有 NUL 字节),整个没用",
                s.cwd.join(".env").display()
            ),
            format!(
                "! {} 第 1 行 ANTHROPIC_AUTH_TOKEN 的引号没配对:落单的引号去掉了,其余照用(值不能跨行)",
                s.home.join(".config/flower/.env").display()
            ),
        ],
        "{err}"
    );
    // Nothing of the binary file is used; the token is used without its stray quote.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ANTHROPIC_MODEL=user-model"), "{stdout}");
    assert!(!err.contains("user-token-123456") && !stdout.contains("user-token-123456"));
}

#[test]
fn a_fifo_or_a_link_to_dev_zero_as_dotenv_is_named_and_skipped_at_once() {
    for plant in ["fifo", "zero"] {
        let s = Scene::new();
        let env = s.cwd.join(".env");
        match plant {
            "fifo" => nix::unistd::mkfifo(&env, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            _ => std::os::unix::fs::symlink("/dev/zero", &env).unwrap(),
        }
        write(
            &s.home.join(".config/flower/.env"),
            "ANTHROPIC_AUTH_TOKEN=user-token-123456\n",
        );
        let mut c = verbose_once(&s);
        c.timeout(std::time::Duration::from_secs(60));
        c.assert().code(1).stderr(
            predicate::str::contains(format!("! {} 读不了:", env.display()))
                .and(predicate::str::contains("bad endpoint URL notaurl")),
        );
    }
}

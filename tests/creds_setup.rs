//! `setup` and the two credential gates, driven through in-memory input and output with a
//! temporary HOME: the screen text, the 0600 file, the key mapping, the immediate reload, and
//! the gates' decisions against a local HTTP server (auth → one reconfiguration → ok; refused
//! twice; non-interactive refusals; net let through; no token).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::Cursor;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use flowerbox::creds::input::{LineRead, ReaderLines};
use flowerbox::creds::setup::{configure, setup_command, HEADER_COMMENT};
use flowerbox::creds::{
    ensure_credentials, Credentials, CredsError, EnsurePolicy, Lookup, ProbeSettings, Refusal,
    Source,
};
use flowerbox_testkit::ScriptedLines;

mod cli_support;
use cli_support::Scene;

/// A lookup as `s`'s user would see it: HOME, the project directory and `vars`.
fn lookup_in(s: &Scene, vars: &[(&str, &str)]) -> Lookup {
    let mut map = BTreeMap::new();
    map.insert("HOME".to_string(), s.home.display().to_string());
    for (k, v) in vars {
        map.insert(k.to_string(), v.to_string());
    }
    Lookup::new(map, s.cwd.clone())
}

/// `s`'s user file, `~/.config/flower/.env`.
fn user_file(s: &Scene) -> PathBuf {
    s.home.join(".config/flower/.env")
}

fn input(text: &str) -> ReaderLines<Cursor<Vec<u8>>> {
    ReaderLines(Cursor::new(text.as_bytes().to_vec()))
}

#[test]
fn setup_screen_and_file() {
    let s = Scene::new();
    let mut out = Vec::new();
    let (written, creds) = setup_command(
        &lookup_in(&s, &[]),
        &mut input("  sk-ant-abc-123456789  \r\nhttps://gw.example\nclaude-opus-5[1m]\n"),
        &mut out,
    )
    .unwrap();
    let screen = String::from_utf8(out).unwrap();
    let path = user_file(&s);
    assert_eq!(written.path, path);
    let expected_head = format!(
        "== 配置 flower ========================================\n还没配过凭证。\n凭证会存到 {}(只你可读)。装一次,处处生效。\n\n1. 你的 API key 或网关 token (Anthropic 官方的 sk-ant-… 或第三方网关签发的)\n   > \n2. 网关地址 (直接回车 = Anthropic 官方;第三方网关填它的 BASE_URL)\n   > \n3. 模型名 (直接回车 = 默认;网关有自己的模型名就填,如 claude-opus-5[1m])\n   > \n+ 存好了:{}\n",
        path.display(),
        path.display()
    );
    assert_eq!(screen, expected_head);

    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        format!(
            "# {HEADER_COMMENT}\nANTHROPIC_API_KEY=sk-ant-abc-123456789\nANTHROPIC_BASE_URL=https://gw.example\nANTHROPIC_MODEL=claude-opus-5[1m]\nANTHROPIC_DEFAULT_OPUS_MODEL=claude-opus-5[1m]\nANTHROPIC_DEFAULT_SONNET_MODEL=claude-opus-5[1m]\n"
        )
    );
    assert!(HEADER_COMMENT.contains("别提交进版本库"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Loaded at once.
    assert_eq!(creds.get("ANTHROPIC_API_KEY"), Some("sk-ant-abc-123456789"));
    assert_eq!(
        creds.source("ANTHROPIC_API_KEY"),
        Some(&Source::Setup(path))
    );
}

#[test]
fn setup_overwrites_the_whole_file_and_skips_empty_values() {
    let s = Scene::new();
    let path = user_file(&s);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "ANTHROPIC_BASE_URL=http://old\nOTHER=keep?\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut out = Vec::new();
    setup_command(
        &lookup_in(&s, &[]),
        &mut input("gw-token-xyz\n\n\n"),
        &mut out,
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        format!("# {HEADER_COMMENT}\nANTHROPIC_AUTH_TOKEN=gw-token-xyz\n")
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn setup_reason_says_reconfigure_when_a_token_exists() {
    let s = Scene::new();
    let mut out = Vec::new();
    setup_command(
        &lookup_in(&s, &[("ANTHROPIC_AUTH_TOKEN", "already")]),
        &mut input("new-token-1234\n\n\n"),
        &mut out,
    )
    .unwrap();
    assert!(String::from_utf8(out).unwrap().contains("\n重新配置。\n"));
}

#[test]
fn setup_without_token_writes_nothing() {
    let s = Scene::new();
    for script in [
        vec![LineRead::Line("   ".into())],
        vec![LineRead::Eof],
        vec![LineRead::Interrupted],
    ] {
        let mut out = Vec::new();
        let err = configure(
            &lookup_in(&s, &[]),
            "r",
            &mut ScriptedLines(script.into()),
            &mut out,
        )
        .unwrap_err();
        assert!(matches!(err, CredsError::SetupCancelled));
        assert_eq!(err.to_string(), "没给 token,取消。");
        assert!(!user_file(&s).exists());
    }
}

#[test]
fn setup_respects_xdg_config_home() {
    let s = Scene::new();
    let xdg = s.home.join("cfg");
    let mut out = Vec::new();
    let (written, _) = setup_command(
        &lookup_in(&s, &[("XDG_CONFIG_HOME", &xdg.display().to_string())]),
        &mut input("tok-abcdef\n\n\n"),
        &mut out,
    )
    .unwrap();
    assert_eq!(written.path, xdg.join("flower/.env"));
    assert!(written.path.exists());
}

#[test]
fn setup_needs_somewhere_to_write() {
    let lookup = Lookup::new(BTreeMap::new(), PathBuf::from("/"));
    let err = configure(&lookup, "r", &mut input("tok\n"), &mut Vec::new()).unwrap_err();
    assert!(matches!(err, CredsError::NoConfigDir));
}

// ---- the gates ----

/// A server that accepts only `good` as x-api-key or bearer token; others get `bad_status`.
async fn gatekeeper(good: &'static str, bad_status: u16) -> (String, Arc<Mutex<u32>>) {
    let hits = Arc::new(Mutex::new(0));
    let count = hits.clone();
    let app = Router::new().route(
        "/v1/messages",
        post(move |headers: HeaderMap| {
            let count = count.clone();
            async move {
                *count.lock().unwrap() += 1;
                let key = headers
                    .get("x-api-key")
                    .or_else(|| headers.get("authorization"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .trim_start_matches("Bearer ")
                    .to_string();
                if key == good {
                    (StatusCode::OK, "{}".to_string())
                } else {
                    (
                        StatusCode::from_u16(bad_status).unwrap(),
                        r#"{"error":{"type":"not_found_error","message":"rejected"}}"#.to_string(),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, hits)
}

fn policy(interactive: bool, probe: bool) -> EnsurePolicy {
    EnsurePolicy {
        interactive,
        probe,
        probe_settings: ProbeSettings {
            timeout: Duration::from_secs(5),
        },
    }
}

/// The credential gate as `s`'s user with `vars` in the environment, under
/// `policy(interactive, probe)`, the user typing `typed` (no input at all: `None`): its outcome
/// and what it printed.
async fn gate(
    s: &Scene,
    vars: &[(&str, &str)],
    interactive: bool,
    probe: bool,
    typed: Option<&str>,
) -> (Result<Credentials, CredsError>, String) {
    let mut out = Vec::new();
    let lookup = lookup_in(s, vars);
    let policy = policy(interactive, probe);
    let r = match typed {
        Some(text) => ensure_credentials(&lookup, &policy, &mut input(text), &mut out).await,
        None => ensure_credentials(&lookup, &policy, &mut ScriptedLines::default(), &mut out).await,
    };
    (r, String::from_utf8(out).unwrap())
}

#[tokio::test]
async fn non_interactive_without_token_is_missing() {
    let s = Scene::new();
    let (err, out) = gate(&s, &[], false, false, None).await;
    let err = err.unwrap_err();
    let text = err.to_string();
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.contains(&user_file(&s).display().to_string()));
    assert!(text.contains("flowerbox setup"));
    assert!(text.contains("也会读 ~/.claude/settings.json"));
    assert!(out.is_empty());
}

#[tokio::test]
async fn interactive_without_token_configures_then_probes() {
    let s = Scene::new();
    let (base, hits) = gatekeeper("sk-ant-fresh-0001", 401).await;
    let (creds, screen) = gate(
        &s,
        &[("ANTHROPIC_BASE_URL", &base)],
        true,
        true,
        Some("sk-ant-fresh-0001\n\n\n"),
    )
    .await;
    let creds = creds.unwrap();
    assert!(screen.contains("还没配过凭证。"), "{screen}");
    assert!(screen.ends_with("- 验一下凭证…\n"), "{screen}");
    assert_eq!(creds.get("ANTHROPIC_API_KEY"), Some("sk-ant-fresh-0001"));
    assert_eq!(*hits.lock().unwrap(), 1);
}

#[tokio::test]
async fn refused_token_gets_one_reconfiguration() {
    let s = Scene::new();
    let (base, hits) = gatekeeper("good-token-999", 401).await;
    let (creds, screen) = gate(
        &s,
        &[
            ("ANTHROPIC_BASE_URL", &base),
            ("ANTHROPIC_AUTH_TOKEN", "bad"),
        ],
        true,
        true,
        Some("good-token-999\n\n\n"),
    )
    .await;
    let creds = creds.unwrap();
    assert!(screen.contains("! 凭证被拒:{\"error\""), "{screen}");
    assert!(screen.contains("凭证被拒了,重新配一次。"), "{screen}");
    // The value just written beats the process environment's bad token.
    assert_eq!(creds.get("ANTHROPIC_AUTH_TOKEN"), Some("good-token-999"));
    assert_eq!(*hits.lock().unwrap(), 2);
}

#[tokio::test]
async fn refused_twice_exits() {
    let s = Scene::new();
    let (base, hits) = gatekeeper("never", 403).await;
    let err = gate(
        &s,
        &[
            ("ANTHROPIC_BASE_URL", &base),
            ("ANTHROPIC_AUTH_TOKEN", "bad"),
        ],
        true,
        true,
        Some("still-bad-token\n\n\n"),
    )
    .await
    .0
    .unwrap_err();
    assert!(matches!(
        err,
        CredsError::Refused {
            refusal: Refusal::Auth,
            after_reconfigure: true
        }
    ));
    assert_eq!(*hits.lock().unwrap(), 2);
}

#[tokio::test]
async fn non_interactive_refusals_use_the_seed_messages() {
    let s = Scene::new();
    // Each refusal's message, and what the screen says before it (`None`: not checked).
    for (status, says, screen) in [
        (
            401,
            "凭证被拒,且无法交互配置。跑 `flowerbox setup` 重配。",
            None,
        ),
        (
            404,
            "网关地址或模型名不对,且无法交互配置。跑 `flowerbox setup` 重配。",
            Some("! 网关地址或模型名不对:"),
        ),
    ] {
        let (base, _) = gatekeeper("never", status).await;
        let vars = [
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-x"),
        ];
        let (err, out) = gate(&s, &vars, false, true, None).await;
        assert_eq!(err.unwrap_err().to_string(), says, "HTTP {status}");
        if let Some(screen) = screen {
            assert!(out.contains(screen), "HTTP {status}: {out}");
        }
    }
}

#[tokio::test]
async fn network_trouble_is_reported_and_let_through() {
    let s = Scene::new();
    let (base, _) = gatekeeper("never", 503).await;
    let (creds, screen) = gate(
        &s,
        &[("ANTHROPIC_BASE_URL", &base), ("ANTHROPIC_AUTH_TOKEN", "t")],
        true,
        true,
        None,
    )
    .await;
    let creds = creds.unwrap();
    assert!(creds.has_token());
    assert!(
        screen.contains("  (探针没打通:HTTP 503: ")
            && screen.contains(" —— 当作网络问题,照常开跑)"),
        "{screen}"
    );
}

#[tokio::test]
async fn no_probe_policy_sends_nothing() {
    let s = Scene::new();
    let (base, hits) = gatekeeper("never", 401).await;
    let lookup = lookup_in(
        &s,
        &[
            ("ANTHROPIC_BASE_URL", &base),
            ("ANTHROPIC_AUTH_TOKEN", "t"),
            ("FLOWER_NO_PROBE", "1"),
        ],
    );
    let policy = EnsurePolicy::standard(true, &lookup);
    assert!(!policy.probe);
    assert!(!EnsurePolicy::standard(false, &lookup_in(&s, &[])).probe);
    assert!(EnsurePolicy::standard(true, &lookup_in(&s, &[])).probe);
    ensure_credentials(
        &lookup,
        &policy,
        &mut ScriptedLines::default(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(*hits.lock().unwrap(), 0);
}

#[tokio::test]
async fn openai_provider_skips_the_gates() {
    let s = Scene::new();
    let creds = gate(
        &s,
        &[
            ("FLOWERBOX_PROVIDER", "openai"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:1"),
        ],
        false,
        true,
        None,
    )
    .await
    .0
    .unwrap();
    assert_eq!(creds.get("OPENAI_BASE_URL"), Some("http://127.0.0.1:1"));
    let err = gate(&s, &[("FLOWERBOX_PROVIDER", "bard")], false, false, None)
        .await
        .0
        .unwrap_err();
    assert!(matches!(err, CredsError::UnknownProvider(_)));
}

//! The agent image builds from nothing on a registry-less engine (the first test to need it
//! builds it, every later test reuses it by tag); `doctor` reports engine, image and tools.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::*;
use flowerbox::sandbox::docker::image::{base_image, default_image, image_exists};

#[tokio::test]
async fn image_builds_from_nothing_on_this_registry_less_engine() {
    let Some(engine) =
        engine_or_skip("image_builds_from_nothing_on_this_registry_less_engine").await
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let image = agent_image(&engine).await;
    assert_eq!(image, default_image());
    assert!(image_exists(&engine, &image).await.unwrap());
    // Built offline: from our debootstrap base unless a slim base was present already.
    let from_base = image_exists(&engine, &base_image()).await.unwrap();
    let from_slim = image_exists(&engine, "debian:bookworm-slim").await.unwrap();
    assert!(from_base || from_slim);
}

#[tokio::test]
async fn doctor_checks_engine_image_tools_git_and_credentials_by_name() {
    use flowerbox::sandbox::docker::DockerBackend;
    use flowerbox::sandbox::doctor::{doctor, exit_code, CheckStatus, DoctorInput};
    let Some(engine) = engine_or_skip("doctor").await else {
        return;
    };
    agent_image(&engine).await;
    let (_dir, ws) = odd_workspace();
    let mut backend = DockerBackend {
        docker_host: None,
        image: None,
        egress: Default::default(),
        ping_timeout: std::time::Duration::from_secs(5),
        remote: false,
    };
    let mut input = DoctorInput {
        workspace: ws,
        credential_names: vec!["ANTHROPIC_API_KEY".into()],
        egress: Default::default(),
    };
    let checks = doctor(&backend, &input).await;
    let status = |name: &str| checks.iter().find(|c| c.name == name).map(|c| c.status);
    for name in [
        "engine",
        "image",
        "tools",
        "init",
        "shared",
        "exec",
        "egress",
        "git",
        "credentials",
    ] {
        assert_eq!(status(name), Some(CheckStatus::Pass), "{name}: {checks:#?}");
    }
    assert_eq!(
        status("workspace"),
        Some(CheckStatus::Warn),
        "not a git repository"
    );
    assert_eq!(exit_code(&checks), 0);
    for line in checks.iter().map(ToString::to_string) {
        assert!(
            line.starts_with("通过  ") || line.starts_with("注意  "),
            "{line}"
        );
    }
    let detail = |name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.detail.clone())
            .unwrap_or_default()
    };
    let kind = engine.kind();
    assert!(
        detail("engine").starts_with(&format!("{} 引擎 ", kind.label())),
        "{checks:#?}"
    );
    // Podman gets a line of its own naming each difference flowerbox handles; Docker none.
    if kind.is_podman() {
        assert_eq!(status("podman"), Some(CheckStatus::Pass), "{checks:#?}");
        assert!(
            detail("podman").starts_with("引擎是 Podman "),
            "{checks:#?}"
        );
        for difference in kind.differences() {
            assert!(detail("podman").contains(&difference), "{checks:#?}");
        }
    } else {
        assert_eq!(status("podman"), None, "{checks:#?}");
        assert!(detail("engine").starts_with("Docker 引擎 "), "{checks:#?}");
    }
    assert!(detail("engine").contains("有回应(API "), "{checks:#?}");
    assert_eq!(detail("image"), format!("有 {}", default_image()));
    assert!(
        detail("tools").starts_with(&format!("{} 里有 bash, git, file, lsof", default_image())),
        "{checks:#?}"
    );
    assert!(detail("workspace").ends_with(" 不在 git 仓库里(--isolate 要有仓库)"));
    // What a run keeps warm, and an idle container's memory measured on this engine (Docker
    // reports it; Podman's stats are not checked here: no Podman on the machine that wrote this).
    if kind.is_podman() {
        assert!(status("warm").is_some(), "{checks:#?}");
    } else {
        assert_eq!(status("warm"), Some(CheckStatus::Pass), "{checks:#?}");
        assert!(
            detail("warm").contains("一个空闲的执行者容器(含 exec 服务)在引擎上常驻 "),
            "{checks:#?}"
        );
        assert!(detail("warm").ends_with(" MiB"), "{checks:#?}");
    }
    assert_eq!(detail("credentials"), "找到了 ANTHROPIC_API_KEY");
    // The workspace is fresh: nothing of it can be orphaned.
    assert_eq!(detail("orphans"), "没有残留的容器", "{checks:#?}");
    assert!(
        detail("git").starts_with("有 git(git version "),
        "{checks:#?}"
    );

    backend.image = Some("flowerbox-no-such-image:0".into());
    input.credential_names.clear();
    let checks = doctor(&backend, &input).await;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .map(|c| c.name)
        .collect();
    assert_eq!(failed, ["image", "credentials"]);
    let lines: Vec<String> = checks.iter().map(ToString::to_string).collect();
    assert!(
        lines.contains(&"不行  image       引擎上没有 flowerbox-no-such-image:0(--image / FLOWERBOX_IMAGE 选的)".to_string()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"不行  credentials 一个凭证都没找到".to_string()),
        "{lines:#?}"
    );
    assert_eq!(exit_code(&checks), 1);
}

#[tokio::test]
async fn a_selected_image_must_exist() {
    use flowerbox::sandbox::docker::ensure_image;
    use flowerbox::sandbox::SandboxError;
    let Some(engine) = engine_or_skip("selected_image").await else {
        return;
    };
    let err = ensure_image(&engine, Some("flowerbox-no-such-image:0"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::Image(m) if m.contains("--image") && m.contains("flowerbox-no-such-image:0")),
        "{err}"
    );
}

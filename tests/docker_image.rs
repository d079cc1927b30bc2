//! The agent image builds from nothing on a registry-less engine (the first test to need it
//! builds it, every later test reuses it by tag); `doctor` reports engine, image and tools.

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
    use flowerbox::sandbox::doctor::{doctor, exit_code, CheckStatus, DoctorInput};
    let Some(engine) = engine_or_skip("doctor").await else {
        return;
    };
    agent_image(&engine).await;
    let (_dir, ws) = odd_workspace();
    let mut input = DoctorInput {
        docker_host: None,
        image: None,
        workspace: ws,
        credential_names: vec!["ANTHROPIC_API_KEY".into()],
        timeout: std::time::Duration::from_secs(5),
    };
    let checks = doctor(&input).await;
    let status = |name: &str| checks.iter().find(|c| c.name == name).map(|c| c.status);
    for name in ["engine", "image", "tools", "git", "credentials"] {
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
            line.starts_with("pass") || line.starts_with("warn"),
            "{line}"
        );
    }

    input.image = Some("flowerbox-no-such-image:0".into());
    input.credential_names.clear();
    let checks = doctor(&input).await;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .map(|c| c.name)
        .collect();
    assert_eq!(failed, ["image", "credentials"]);
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

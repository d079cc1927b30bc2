//! The agent image builds from nothing on a registry-less engine and has the agent tools.

mod docker_support;

use docker_support::*;
use flowerbox::sandbox::docker::image::{base_image, default_image, image_exists};

#[tokio::test]
async fn image_builds_on_this_engine_and_has_the_tools() {
    let Some(engine) = engine_or_skip("image_builds_on_this_engine_and_has_the_tools").await else {
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

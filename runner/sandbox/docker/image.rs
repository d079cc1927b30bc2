//! The agent image: built on first use when missing, offline (DESIGN.md "Images", issue
//! "Image").
//!
//! The files of `image/` are compiled into the binary, so it can build its image anywhere. The
//! tag is a content hash of those files, `flowerbox-agent:<12 hex>`, so a changed `image/`
//! means a new image and an unchanged one is never rebuilt. The base comes from, in order: our
//! own offline base `flowerbox-base:bookworm-<12 hex>` when present; `debian:bookworm-slim`
//! when present (then the Dockerfile installs what is missing); otherwise `build-base.sh`
//! (debootstrap, needs root) builds a rootfs that is imported through the API. The build context
//! goes to the engine as a tar stream; a file lock keeps concurrent processes from building
//! twice. `--image NAME` / `FLOWERBOX_IMAGE` select another image, which must already exist.

use bollard::query_parameters::{BuildImageOptions, CreateImageOptions};
use bollard::{body_full, body_try_stream};
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::build_progress::{BuildProgress, Shown};
use super::engine::{status_code, Engine};
use crate::sandbox::SandboxError;

/// Repository of flowerbox's agent image.
pub const IMAGE_REPO: &str = "flowerbox-agent";
/// Repository of the offline base image.
pub const BASE_REPO: &str = "flowerbox-base";
/// Used as the base when present and our own base is not.
pub const SLIM_BASE: &str = "debian:bookworm-slim";

/// The files of `image/`, as compiled in.
pub const IMAGE_FILES: &[(&str, &[u8])] = &[
    ("Dockerfile", include_bytes!("../../../image/Dockerfile")),
    (
        "build-base.sh",
        include_bytes!("../../../image/build-base.sh"),
    ),
    (
        "packages.txt",
        include_bytes!("../../../image/packages.txt"),
    ),
];

fn hash_files(names: &[&str]) -> String {
    let mut h = Sha256::new();
    for (name, bytes) in IMAGE_FILES
        .iter()
        .filter(|(n, _)| names.is_empty() || names.contains(n))
    {
        h.update(name.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    }
    hex::encode(h.finalize())[..12].to_string()
}

/// `flowerbox-agent:<first 12 hex of sha256 over image/>`.
pub fn default_image() -> String {
    format!("{IMAGE_REPO}:{}", hash_files(&[]))
}

/// `flowerbox-base:bookworm-<12 hex over build-base.sh and packages.txt>`.
pub fn base_image() -> String {
    format!(
        "{BASE_REPO}:bookworm-{}",
        hash_files(&["build-base.sh", "packages.txt"])
    )
}

/// What [`ensure_image`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredImage {
    /// The image to run.
    pub image: String,
    /// The agent image was built now.
    pub built: bool,
    /// The base image was built (debootstrap) now.
    pub base_built: bool,
    /// Time spent building, zero when nothing was built.
    pub elapsed: Duration,
}

/// Whether the engine has `name` (404 means no; other errors are errors).
pub async fn image_exists(engine: &Engine, name: &str) -> Result<bool, SandboxError> {
    match engine.docker().inspect_image(name).await {
        Ok(_) => Ok(true),
        Err(e) if status_code(&e) == Some(404) => Ok(false),
        Err(e) => Err(super::error::image(format!("inspecting image {name}"))(e)),
    }
}

/// Makes sure the image to run exists and returns it: `requested` (`--image` /
/// `FLOWERBOX_IMAGE`) must exist already; otherwise [`default_image`] is built when missing,
/// with its progress on stderr when `progress` is true (a spinner on a terminal, plain lines
/// otherwise).
///
/// Errors: [`SandboxError::Image`] naming what is missing and how to get it.
pub async fn ensure_image(
    engine: &Engine,
    requested: Option<&str>,
    progress: bool,
) -> Result<EnsuredImage, SandboxError> {
    let shown = if progress { Shown::Live } else { Shown::Hidden };
    ensure_image_shown(engine, requested, shown).await
}

/// [`ensure_image`] with the build's progress shown as `shown` says.
pub(super) async fn ensure_image_shown(
    engine: &Engine,
    requested: Option<&str>,
    shown: Shown,
) -> Result<EnsuredImage, SandboxError> {
    let nothing = |image: String| EnsuredImage {
        image,
        built: false,
        base_built: false,
        elapsed: Duration::ZERO,
    };
    if let Some(name) = requested.filter(|n| !n.is_empty()) {
        if image_exists(engine, name).await? {
            return Ok(nothing(name.to_string()));
        }
        return Err(SandboxError::Image(format!(
            "image {name} (--image / FLOWERBOX_IMAGE) is not on the Docker engine at {} and flowerbox \
             does not pull images: build or load it first, or leave --image unset to use flowerbox's \
             own image",
            engine.endpoint().host
        )));
    }
    let image = default_image();
    if image_exists(engine, &image).await? {
        return Ok(nothing(image));
    }
    let _lock = BuildLock::acquire().await?;
    if image_exists(engine, &image).await? {
        return Ok(nothing(image)); // another process built it while we waited
    }
    let started = Instant::now();
    let bar = BuildProgress::stderr(shown);
    let (base, base_built) = ensure_base(engine, &bar).await?;
    build_agent(engine, &image, &base, &bar).await?;
    let elapsed = started.elapsed();
    bar.finish(format!(
        "agent image {image} ready ({:.0} s)",
        elapsed.as_secs_f64()
    ));
    Ok(EnsuredImage {
        image,
        built: true,
        base_built,
        elapsed,
    })
}

/// An exclusive lock on a file in the temporary directory, held while building.
struct BuildLock(#[allow(dead_code)] std::fs::File);

impl BuildLock {
    async fn acquire() -> Result<BuildLock, SandboxError> {
        let path = std::env::temp_dir().join("flowerbox-image-build.lock");
        tokio::task::spawn_blocking(move || {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            fs4::fs_std::FileExt::lock_exclusive(&f)?;
            Ok(BuildLock(f))
        })
        .await
        .map_err(|e| SandboxError::Image(format!("build lock: {e}")))?
    }
}

async fn ensure_base(engine: &Engine, bar: &BuildProgress) -> Result<(String, bool), SandboxError> {
    let base = base_image();
    if image_exists(engine, &base).await? {
        return Ok((base, false));
    }
    if image_exists(engine, SLIM_BASE).await? {
        return Ok((SLIM_BASE.to_string(), false));
    }
    build_base(engine, &base, bar).await?;
    Ok((base, true))
}

/// Runs the compiled-in `build-base.sh` (as root, or through `sudo -n`) and imports the rootfs.
#[allow(clippy::expect_used, reason = "spawned with piped stdio")]
async fn build_base(engine: &Engine, base: &str, bar: &BuildProgress) -> Result<(), SandboxError> {
    let dir = tempfile::Builder::new()
        .prefix("flowerbox-base-")
        .tempdir_in(std::env::temp_dir())?;
    for (name, bytes) in IMAGE_FILES {
        std::fs::write(dir.path().join(name), bytes)?;
    }
    let script = dir.path().join("build-base.sh");
    let tarball = dir.path().join("rootfs.tar");
    let mut cmd = if nix::unistd::geteuid().is_root() {
        tokio::process::Command::new("bash")
    } else {
        let sudo_ok = tokio::process::Command::new("sudo")
            .args(["-n", "true"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .map(|s| s.success())
            .unwrap_or(false);
        if !sudo_ok {
            return Err(SandboxError::Image(format!(
                "no base image: {base}, {SLIM_BASE} are both missing, and building {base} needs root \
                 (debootstrap). Run once: sudo bash image/build-base.sh --import {base}"
            )));
        }
        let mut c = tokio::process::Command::new("sudo");
        c.args(["-n", "bash"]);
        c
    };
    bar.stage(format!(
        "building base image {base} with debootstrap (about a minute)"
    ));
    let mut child = cmd
        .arg(&script)
        .arg(&tarball)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut last = VecDeque::new();
    let out = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let err = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut lines = futures::stream::select(
        tokio_stream_lines(out).boxed(),
        tokio_stream_lines(err).boxed(),
    );
    while let Some(line) = lines.next().await {
        bar.detail(format!(
            "base image: {}",
            line.chars().take(100).collect::<String>()
        ));
        last.push_back(line);
        if last.len() > 15 {
            last.pop_front();
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        return Err(SandboxError::Image(format!(
            "building the base image failed ({status}):\n{}",
            Vec::from(last).join("\n")
        )));
    }
    bar.stage(format!("importing base image {base}"));
    // The whole reference as `repo`, no `tag`: Docker reads the tag from it, and Podman's
    // compat API (4.3) ignores a separate `tag` (the import would be `…:latest`).
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(base.into()),
        changes: vec!["CMD [\"bash\"]".into()],
        ..Default::default()
    };
    let file = tokio::fs::File::open(&tarball).await?;
    let body = futures::stream::unfold(file, |mut f| async move {
        let mut buf = vec![0u8; 1 << 20];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    });
    let mut import = engine
        .docker()
        .create_image(Some(options), Some(body_try_stream(body)), None);
    while let Some(item) = import.next().await {
        item.map_err(super::error::image(format!("importing {base}")))?;
    }
    Ok(())
}

fn tokio_stream_lines<R: tokio::io::AsyncBufRead + Unpin + Send + 'static>(
    lines: tokio::io::Lines<R>,
) -> impl futures::Stream<Item = String> + Send {
    futures::stream::unfold(lines, |mut l| async move {
        l.next_line().await.ok().flatten().map(|s| (s, l))
    })
}

/// The build context: every file of `image/`, as a tar archive.
pub fn build_context() -> Result<Vec<u8>, SandboxError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in IMAGE_FILES {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(if name.ends_with(".sh") { 0o755 } else { 0o644 });
        header.set_mtime(0);
        builder.append_data(&mut header, Path::new(name), *bytes)?;
    }
    Ok(builder.into_inner()?)
}

async fn build_agent(
    engine: &Engine,
    image: &str,
    base: &str,
    bar: &BuildProgress,
) -> Result<(), SandboxError> {
    bar.stage(format!("building agent image {image} from {base}"));
    let mut labels = HashMap::new();
    labels.insert("flowerbox.image".to_string(), hash_files(&[]));
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(image.into()),
        buildargs: Some(HashMap::from([("BASE".to_string(), base.to_string())])),
        labels: Some(labels),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let context = build_context()?;
    let mut stream = engine
        .docker()
        .build_image(options, None, Some(body_full(context.into())));
    let mut last = VecDeque::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(text) = info
                    .stream
                    .as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                {
                    bar.detail(format!(
                        "agent image: {}",
                        text.chars().take(100).collect::<String>()
                    ));
                    last.push_back(text.to_string());
                    if last.len() > 15 {
                        last.pop_front();
                    }
                }
            }
            Err(e) => {
                return Err(SandboxError::Image(format!(
                    "building {image} failed: {e}\n{}",
                    Vec::from(last).join("\n")
                )))
            }
        }
    }
    if !image_exists(engine, image).await? {
        return Err(SandboxError::Image(format!(
            "building {image} ended without the image"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_image_dir_is_compiled_in() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("image");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut compiled: Vec<String> = IMAGE_FILES.iter().map(|(n, _)| n.to_string()).collect();
        compiled.sort();
        assert_eq!(on_disk, compiled);
    }

    #[test]
    fn tags_are_content_hashes() {
        let img = default_image();
        let (repo, tag) = img.split_once(':').unwrap();
        assert_eq!(repo, IMAGE_REPO);
        assert_eq!(tag.len(), 12);
        assert!(tag.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(base_image().starts_with("flowerbox-base:bookworm-"));
        assert_ne!(hash_files(&["Dockerfile"]), hash_files(&[]));
    }

    #[test]
    fn context_is_a_tar_of_the_files() {
        let bytes = build_context().unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let n = ar.entries().unwrap().count();
        assert_eq!(n, IMAGE_FILES.len());
    }

    #[test]
    fn dockerfile_and_base_share_the_package_list() {
        let dockerfile = String::from_utf8_lossy(IMAGE_FILES[0].1);
        let script = String::from_utf8_lossy(IMAGE_FILES[1].1);
        assert!(dockerfile.contains("packages.txt") && script.contains("packages.txt"));
        let pkgs = String::from_utf8_lossy(IMAGE_FILES[2].1);
        for tool in [
            "git",
            "file",
            "lsof",
            "procps",
            "tini",
            "ripgrep",
            "python3",
            "build-essential",
        ] {
            assert!(pkgs.lines().any(|l| l.trim() == tool), "{tool}");
        }
    }
}

//! The Docker engine's errors as they cross the seam: a bollard error is wrapped in
//! [`DockerError`], classified once by typed facts (the HTTP status, the `io::ErrorKind` in its
//! chain), and handed on as an [`EngineFault`]: callers see its [`EngineErrorKind`], never
//! bollard.

use thiserror::Error;

use super::engine::{io_kind, EngineError};
use crate::sandbox::{EngineErrorKind, EngineFault, SandboxError};

/// The backend's name in the faults it reports.
pub(crate) const BACKEND: &str = "docker";

/// One error of the engine's API (bollard's), with its kind.
#[derive(Debug, Error)]
#[error(transparent)]
pub struct DockerError(#[from] pub bollard::errors::Error);

impl DockerError {
    /// The HTTP status of the engine's answer, when it answered with an error.
    pub fn status(&self) -> Option<u16> {
        match &self.0 {
            bollard::errors::Error::DockerResponseServerError { status_code, .. } => {
                Some(*status_code)
            }
            _ => None,
        }
    }

    /// What it means to a caller.
    pub fn kind(&self) -> EngineErrorKind {
        use bollard::errors::Error as B;
        match self.status() {
            Some(404) => return EngineErrorKind::NotFound,
            Some(409) => return EngineErrorKind::Conflict,
            Some(400 | 403) => return EngineErrorKind::Rejected,
            Some(_) => return EngineErrorKind::Other,
            None => {}
        }
        match &self.0 {
            B::SocketNotFoundError(_) | B::RequestTimeoutError => EngineErrorKind::Unavailable,
            e if io_kind(e).is_some() => EngineErrorKind::Unavailable,
            _ => EngineErrorKind::Other,
        }
    }
}

impl From<DockerError> for EngineFault {
    fn from(e: DockerError) -> Self {
        EngineFault::new(BACKEND, e.kind(), e)
    }
}

impl From<bollard::errors::Error> for EngineFault {
    fn from(e: bollard::errors::Error) -> Self {
        DockerError(e).into()
    }
}

impl From<bollard::errors::Error> for SandboxError {
    fn from(e: bollard::errors::Error) -> Self {
        SandboxError::Engine(e.into())
    }
}

impl From<EngineError> for SandboxError {
    fn from(e: EngineError) -> Self {
        SandboxError::EngineUnavailable(EngineFault::new(BACKEND, EngineErrorKind::Unavailable, e))
    }
}

/// A failed request about container `what`.
pub(crate) fn container(
    what: impl Into<String>,
) -> impl FnOnce(bollard::errors::Error) -> SandboxError {
    let what = what.into();
    move |e| SandboxError::ContainerRequest {
        what,
        source: e.into(),
    }
}

/// A failed request about image `what`.
pub(crate) fn image(
    what: impl Into<String>,
) -> impl FnOnce(bollard::errors::Error) -> SandboxError {
    let what = what.into();
    move |e| SandboxError::ImageRequest {
        what,
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status_code: u16) -> DockerError {
        DockerError(bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: "x".into(),
        })
    }

    #[test]
    fn statuses_become_kinds() {
        assert_eq!(answered(404).kind(), EngineErrorKind::NotFound);
        assert_eq!(answered(409).kind(), EngineErrorKind::Conflict);
        assert_eq!(answered(400).kind(), EngineErrorKind::Rejected);
        assert_eq!(answered(500).kind(), EngineErrorKind::Other);
        let timeout = DockerError(bollard::errors::Error::RequestTimeoutError);
        assert_eq!(timeout.kind(), EngineErrorKind::Unavailable);
        let e = SandboxError::from(answered(404).0);
        assert_eq!(e.engine_kind(), Some(EngineErrorKind::NotFound));
        assert!(e.to_string().starts_with("docker: "), "{e}");
    }
}

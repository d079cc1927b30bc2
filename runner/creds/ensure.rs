//! `ensure_credentials`: the two gates every model-using entry (`go`, `run`, `once`) passes
//! first (seed 000, "首次运行的配置流程").
//!
//! Gate one: a token somewhere in the chain; if none, the interactive configuration on a
//! terminal, or [`CredsError::Missing`] otherwise. Gate two: the probe, only when the policy
//! allows it (a terminal and no `FLOWER_NO_PROBE`): `auth`/`config` verdicts get one
//! reconfiguration and a second probe, `net` is reported and let through, `ok` is silent.
//! A provider other than Anthropic skips both gates (the probe speaks Anthropic's API; an
//! OpenAI-compatible local server may need no key).

use std::io::Write;

use super::chain::Lookup;
use super::credentials::{Credentials, ProviderKind};
use super::error::{CredsError, Refusal};
use super::input::LineSource;
use super::probe::{probe, ProbeSettings, Verdict};
use super::setup;

/// How the gates may behave.
#[derive(Debug, Clone)]
pub struct EnsurePolicy {
    /// stdin is a terminal: configuration may ask questions.
    pub interactive: bool,
    /// Whether to send the probe at all.
    pub probe: bool,
    /// The probe's timeout.
    pub probe_settings: ProbeSettings,
}

impl EnsurePolicy {
    /// flower's rule: probe only on a terminal and when `FLOWER_NO_PROBE` is unset or empty.
    pub fn standard(interactive: bool, lookup: &Lookup) -> Self {
        Self {
            interactive,
            probe: interactive && lookup.var("FLOWER_NO_PROBE").is_none(),
            probe_settings: ProbeSettings::default(),
        }
    }
}

/// Runs both gates and returns the credentials to use. Questions and probe lines go to `out`.
///
/// Errors: [`CredsError::Missing`] (non-interactive, no token), [`CredsError::Refused`]
/// (probe refused and no reconfiguration possible or left), [`CredsError::SetupCancelled`]
/// and the other configuration errors, [`CredsError::UnknownProvider`].
pub async fn ensure_credentials(
    lookup: &Lookup,
    policy: &EnsurePolicy,
    input: &mut dyn LineSource,
    out: &mut dyn Write,
) -> Result<Credentials, CredsError> {
    ensure_discovered(lookup, lookup.discover(), policy, input, out).await
}

/// [`ensure_credentials`] on what `lookup` already discovered (the caller printed its
/// warnings): the files are read once, so what was reported is what is used.
///
/// Errors: as [`ensure_credentials`].
pub async fn ensure_discovered(
    lookup: &Lookup,
    discovered: Credentials,
    policy: &EnsurePolicy,
    input: &mut dyn LineSource,
    out: &mut dyn Write,
) -> Result<Credentials, CredsError> {
    let mut creds = discovered;
    if creds.provider()? == ProviderKind::OpenAi {
        return Ok(creds);
    }
    if !creds.has_token() {
        if !policy.interactive {
            return Err(CredsError::Missing {
                user_file: lookup.user_env_display(),
            });
        }
        let written = setup::configure(lookup, setup::REASON_FIRST, input, out)?;
        creds = setup::reload(lookup, &written);
    }
    if !policy.probe {
        return Ok(creds);
    }
    let mut reconfigured = false;
    loop {
        writeln!(out, "- 验一下凭证…")?;
        out.flush()?;
        let (refusal, reason) = match probe(&creds, &policy.probe_settings).await {
            Verdict::Ok => return Ok(creds),
            Verdict::Net(m) => {
                writeln!(out, "  (探针没打通:{m} —— 当作网络问题,照常开跑)")?;
                return Ok(creds);
            }
            Verdict::Auth(body) => {
                writeln!(out, "! 凭证被拒:{body}")?;
                (Refusal::Auth, "凭证被拒了,重新配一次。")
            }
            Verdict::Config(body) => {
                writeln!(out, "! 网关地址或模型名不对:{body}")?;
                (Refusal::Config, "网关地址或模型名不对,重新配一次。")
            }
        };
        if !policy.interactive || reconfigured {
            return Err(CredsError::Refused {
                refusal,
                after_reconfigure: reconfigured,
            });
        }
        reconfigured = true;
        let written = setup::configure(lookup, reason, input, out)?;
        creds = setup::reload(lookup, &written);
    }
}

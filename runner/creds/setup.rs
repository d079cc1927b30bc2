//! `flowerbox setup` and the first-run configuration (seed 000, "交互配置问什么", "写出来的键"):
//! three questions, the key mapping, a whole-file `.env` rewrite with mode 0600, and the
//! values loaded at once.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::chain::Lookup;
use super::credentials::{Credentials, Source};
use super::dotenv;
use super::error::CredsError;
use super::input::{LineRead, LineSource};

/// The comment on the first line of the written file.
pub const HEADER_COMMENT: &str =
    "由 `flowerbox setup` 写。里面是你的密钥:别提交进版本库(文件只你可读,0600)。";

/// `setup`'s reason line when credentials already exist somewhere in the chain.
pub const REASON_RECONFIGURE: &str = "重新配置。";
/// The reason line when no token exists yet.
pub const REASON_FIRST: &str = "还没配过凭证。";

/// The three answers, trimmed. Only `token` is required.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Answers {
    /// Question 1: an Anthropic key (`sk-ant-…`) or a gateway token.
    pub token: String,
    /// Question 2: the gateway's base URL (empty = Anthropic's official endpoint).
    pub base_url: String,
    /// Question 3: the model name (empty = the endpoint's default).
    pub model: String,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers")
            .field("token", &super::mask(&self.token))
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish()
    }
}

impl Answers {
    /// The keys to write (seed 000, "写出来的键"): a `sk-ant-` token is `ANTHROPIC_API_KEY`,
    /// any other `ANTHROPIC_AUTH_TOKEN`; a base URL is `ANTHROPIC_BASE_URL`; a model name goes
    /// to `ANTHROPIC_MODEL`, `ANTHROPIC_DEFAULT_OPUS_MODEL` and `ANTHROPIC_DEFAULT_SONNET_MODEL`.
    /// Empty answers write nothing.
    pub fn env_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if !self.token.is_empty() {
            let key = if self.token.starts_with("sk-ant-") {
                super::ANTHROPIC_API_KEY
            } else {
                super::ANTHROPIC_AUTH_TOKEN
            };
            pairs.push((key, self.token.clone()));
        }
        if !self.base_url.is_empty() {
            pairs.push((super::var::ANTHROPIC_BASE_URL, self.base_url.clone()));
        }
        if !self.model.is_empty() {
            for key in [
                super::var::ANTHROPIC_MODEL,
                super::var::ANTHROPIC_DEFAULT_OPUS_MODEL,
                super::var::ANTHROPIC_DEFAULT_SONNET_MODEL,
            ] {
                pairs.push((key, self.model.clone()));
            }
        }
        pairs
    }
}

/// What a completed configuration wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// The file, `${XDG_CONFIG_HOME:-~/.config}/flower/.env`.
    pub path: PathBuf,
    /// The keys and values in it, in file order.
    pub pairs: Vec<(&'static str, String)>,
}

/// Writes `pairs` as the whole content of `path` (parent directories created), header comment
/// first, then `chmod 0600`. The file is replaced atomically and is never readable by others,
/// not even for a moment (the temporary file is created 0600).
///
/// Errors: [`CredsError::Write`].
pub fn write_env_file(path: &Path, pairs: &[(&'static str, String)]) -> Result<(), CredsError> {
    let fail = |source| CredsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    tmp.write_all(dotenv::render(HEADER_COMMENT, pairs).as_bytes())
        .map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(())
}

/// Asks the three questions on `out`, reading answers from `input`, and writes the file.
/// `reason` is the line under the title (e.g. [`REASON_FIRST`]).
///
/// Errors: [`CredsError::SetupCancelled`] when question 1 is left empty or input ends or is
/// interrupted there (nothing is written); [`CredsError::NoConfigDir`]; [`CredsError::Write`];
/// [`CredsError::Terminal`].
pub fn configure(
    lookup: &Lookup,
    reason: &str,
    input: &mut dyn LineSource,
    out: &mut dyn Write,
) -> Result<Written, CredsError> {
    let path = lookup.user_env_file().ok_or(CredsError::NoConfigDir)?;
    writeln!(out, "== 配置 flower {}", "=".repeat(40))?;
    writeln!(out, "{reason}")?;
    writeln!(
        out,
        "凭证会存到 {}(只你可读)。装一次,处处生效。",
        path.display()
    )?;
    let token = ask_secret(
        input,
        out,
        "1. 你的 API key 或网关 token (Anthropic 官方的 sk-ant-… 或第三方网关签发的)",
    )?;
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err(CredsError::SetupCancelled);
    };
    let base_url = ask(
        input,
        out,
        "2. 网关地址 (直接回车 = Anthropic 官方;第三方网关填它的 BASE_URL)",
    )?
    .unwrap_or_default();
    let model = ask(
        input,
        out,
        "3. 模型名 (直接回车 = 默认;网关有自己的模型名就填,如 claude-opus-5[1m])",
    )?
    .unwrap_or_default();
    let answers = Answers {
        token,
        base_url,
        model,
    };
    let pairs = answers.env_pairs();
    write_env_file(&path, &pairs)?;
    writeln!(out, "\n+ 存好了:{}", path.display())?;
    out.flush()?;
    tracing::info!(path = %path.display(), keys = ?pairs.iter().map(|(k, _)| *k).collect::<Vec<_>>(), "credentials written");
    Ok(Written { path, pairs })
}

/// One question; `None` for end of input or Ctrl-C.
fn ask(
    input: &mut dyn LineSource,
    out: &mut dyn Write,
    question: &str,
) -> Result<Option<String>, CredsError> {
    write!(out, "\n{question}\n   > ")?;
    out.flush()?;
    Ok(match input.read_line()? {
        LineRead::Line(l) => Some(l.trim().to_string()),
        LineRead::Eof | LineRead::Interrupted => None,
    })
}

/// A question whose answer a terminal does not show (the token): the typed characters are not
/// echoed (the screen is the seed's; only the token stays off it).
fn ask_secret(
    input: &mut dyn LineSource,
    out: &mut dyn Write,
    question: &str,
) -> Result<Option<String>, CredsError> {
    let mut prompt = || {
        write!(out, "\n{question}\n   > ")?;
        out.flush()
    };
    Ok(match input.read_secret(&mut prompt)? {
        LineRead::Line(l) => Some(l.trim().to_string()),
        LineRead::Eof | LineRead::Interrupted => None,
    })
}

/// The credentials after a configuration: the chain read again (the file is new), with the
/// values just written on top of every other source ("立刻加载生效"), bound again (a project
/// file's endpoint never gets the token just typed).
pub fn reload(lookup: &Lookup, written: &Written) -> Credentials {
    let mut creds = lookup.discover();
    creds.put_first(Source::Setup(written.path.clone()), &written.pairs);
    creds
}

/// `flowerbox setup`: reads the chain to pick the reason line ([`REASON_RECONFIGURE`] when a
/// token exists, else [`REASON_FIRST`]), runs [`configure`], and returns the reloaded
/// credentials.
///
/// Errors: as [`configure`].
pub fn setup_command(
    lookup: &Lookup,
    input: &mut dyn LineSource,
    out: &mut dyn Write,
) -> Result<(Written, Credentials), CredsError> {
    let reason = if lookup.discover().has_token() {
        REASON_RECONFIGURE
    } else {
        REASON_FIRST
    };
    let written = configure(lookup, reason, input, out)?;
    let creds = reload(lookup, &written);
    Ok((written, creds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(token: &str, base: &str, model: &str) -> Answers {
        Answers {
            token: token.into(),
            base_url: base.into(),
            model: model.into(),
        }
    }

    #[test]
    fn key_mapping() {
        let keys = |a: &Answers| {
            a.env_pairs()
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&answers("sk-ant-abc", "", "")), ["ANTHROPIC_API_KEY"]);
        assert_eq!(keys(&answers("gw-token", "", "")), ["ANTHROPIC_AUTH_TOKEN"]);
        assert_eq!(
            keys(&answers("gw-token", "https://gw", "m[1m]")),
            [
                "ANTHROPIC_AUTH_TOKEN",
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
                "ANTHROPIC_DEFAULT_OPUS_MODEL",
                "ANTHROPIC_DEFAULT_SONNET_MODEL"
            ]
        );
        assert!(answers("", "", "").env_pairs().is_empty());
    }

    #[test]
    fn debug_masks_the_token() {
        let a = answers("sk-ant-very-secret-token", "", "");
        assert!(!format!("{a:?}").contains("very-secret"));
    }
}

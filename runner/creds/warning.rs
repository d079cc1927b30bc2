//! What the chain tells the user about the files it read and the endpoints it refused: one
//! [`DotenvWarning`] per finding, printed once before anything runs. Values are never part of
//! a warning (a malformed line may be a bare token); keys, paths and URLs are, and the command
//! line sanitises every line it prints.

use std::fmt;
use std::path::PathBuf;

use super::dotenv::{QuoteNote, Skipped};

/// At most this many malformed lines of one file are named; the rest are counted.
pub(super) const NAMED_LINES: usize = 3;

/// What the chain found in one of its files, or did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DotenvSkip {
    /// A malformed line (skipped, as in flower).
    Line(Skipped),
    /// More malformed lines than [`NAMED_LINES`]: how many more (skipped too).
    MoreLines(usize),
    /// A key flowerbox reads whose value's quotes were odd (used as parsed).
    Quote(QuoteNote),
    /// The file holds NUL bytes: not text; nothing of it is used.
    Binary,
    /// The file could not be read (a FIFO, a device, a symlink out of the workspace, over the
    /// size cap, ...): why; nothing of it is used.
    Unreadable(String),
    /// Endpoint choices of a project file (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`,
    /// `FLOWERBOX_PROVIDER`) that would have sent a credential this file did not give (an
    /// agent that can write the workspace could have planted them): ignored.
    Unbound {
        /// The keys ignored.
        keys: Vec<String>,
        /// The credential that would have been sent.
        credential: String,
        /// Where that credential came from (as [`super::Source`] shows it).
        from: String,
    },
    /// This run's requests go to an address a project file names, with that file's own
    /// credential (or none): said once, so the user sees where their requests go.
    ProjectEndpoint {
        /// The endpoint key.
        key: String,
        /// The address.
        url: String,
        /// The credential sent there (from the same file), if any.
        credential: Option<String>,
    },
}

impl DotenvSkip {
    /// True for what the endpoint binding says (recomputed whenever the sources change).
    pub(super) fn is_binding(&self) -> bool {
        matches!(
            self,
            DotenvSkip::Unbound { .. } | DotenvSkip::ProjectEndpoint { .. }
        )
    }
}

/// One finding of the chain in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvWarning {
    /// The file.
    pub path: PathBuf,
    /// What was found or done.
    pub skipped: DotenvSkip,
}

impl fmt::Display for DotenvWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match &self.skipped {
            DotenvSkip::Line(s) => write!(f, "! {path} 第 {} 行看不懂({}),跳过了", s.line, s.why),
            DotenvSkip::MoreLines(n) => write!(f, "! {path} 还有 {n} 行看不懂,也跳过了"),
            DotenvSkip::Quote(q) => write!(f, "! {path} 第 {} 行 {} 的{}", q.line, q.key, q.why),
            DotenvSkip::Binary => {
                write!(f, "! {path} 不是文本文件(里面有 NUL 字节),整个没用")
            }
            DotenvSkip::Unreadable(why) => write!(f, "! {path} 读不了:{why};这次不用它"),
            DotenvSkip::Unbound {
                keys,
                credential,
                from,
            } => write!(
                f,
                "! {path} 设了 {},可要发过去的 {credential} 来自 {from},不是这个文件给的:\
                 别处的密钥不送去项目文件选的地址,这次不用它们(要用,就写进进程环境或 \
                 flowerbox setup 写的文件,或者把要发的密钥也写进这个文件)",
                keys.join("、")
            ),
            DotenvSkip::ProjectEndpoint {
                key,
                url,
                credential,
            } => match credential {
                Some(c) => write!(
                    f,
                    "- 模型请求发往 {url}:{key} 和要发的 {c} 都来自项目文件 {path}"
                ),
                None => write!(
                    f,
                    "- 模型请求发往 {url}:{key} 来自项目文件 {path}(不带密钥)"
                ),
            },
        }
    }
}

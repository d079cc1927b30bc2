//! Errors of the credentials area. Every variant is a deliberate exit-1 message (seed 000,
//! "退出码"), printed as is on stderr.

use std::path::PathBuf;

use thiserror::Error;

/// Which probe verdict refused the credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// HTTP 401/403 (or no credentials at all): the token was refused.
    Auth,
    /// HTTP 404, or a 400 that says the model/endpoint does not exist.
    Config,
}

/// A credentials failure that ends the run with exit code 1.
#[derive(Debug, Error)]
pub enum CredsError {
    /// Non-interactive and no `ANTHROPIC_API_KEY`/`ANTHROPIC_AUTH_TOKEN` anywhere in the chain.
    /// The seed's 4 lines, with the last two reworded to what flowerbox really does.
    #[error(
        "缺少凭证:需要 ANTHROPIC_API_KEY 或 ANTHROPIC_AUTH_TOKEN。\n\
         最省事:跑一次 `flowerbox setup`,把 token 存到 {user_file}(装一次,处处生效)。\n\
         或者:在当前目录建 `.env`,或 export 进进程环境。\n\
         flowerbox 也会读 ~/.claude/settings.json 和 settings.local.json 的 env 块(只借其中 9 个凭证键),那里也没有。"
    )]
    Missing {
        /// Where `setup` would write (`${XDG_CONFIG_HOME:-~/.config}/flower/.env`).
        user_file: String,
    },
    /// The probe refused the credentials and they cannot be (or were already once)
    /// reconfigured.
    #[error("{}", refusal_text(*.refusal, *.after_reconfigure))]
    Refused {
        /// Which verdict.
        refusal: Refusal,
        /// False: stdin is not a terminal (the seed's message); true: the one reconfiguration
        /// chance was used and the probe still refused.
        after_reconfigure: bool,
    },
    /// The human left question 1 (the token) empty, or closed the input.
    #[error("没给 token,取消。")]
    SetupCancelled,
    /// Neither `HOME` nor `XDG_CONFIG_HOME` is set: there is nowhere to write the user file.
    #[error("找不到放凭证的地方:HOME 和 XDG_CONFIG_HOME 都没设。")]
    NoConfigDir,
    /// The credentials file could not be written.
    #[error("凭证写不进 {}:{source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `FLOWERBOX_PROVIDER` names no provider flowerbox has.
    #[error("FLOWERBOX_PROVIDER={0} 不认识:只能是 anthropic 或 openai。")]
    UnknownProvider(String),
    /// Reading the answers or writing the questions failed.
    #[error("终端读写失败:{0}")]
    Terminal(#[from] std::io::Error),
}

fn refusal_text(refusal: Refusal, after_reconfigure: bool) -> &'static str {
    match (refusal, after_reconfigure) {
        (Refusal::Auth, false) => "凭证被拒,且无法交互配置。跑 `flowerbox setup` 重配。",
        (Refusal::Config, false) => {
            "网关地址或模型名不对,且无法交互配置。跑 `flowerbox setup` 重配。"
        }
        (Refusal::Auth, true) => "凭证还是被拒,重配的机会已经用过。跑 `flowerbox setup` 重配。",
        (Refusal::Config, true) => {
            "网关地址或模型名还是不对,重配的机会已经用过。跑 `flowerbox setup` 重配。"
        }
    }
}

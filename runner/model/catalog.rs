//! What flowerbox knows about model ids: list prices, output caps and context windows.
//!
//! Keyed by model id, matched after normalisation (lowercase, a gateway prefix such as
//! `anthropic/` dropped, `.` read as `-`, a Claude date suffix `-20250929` / `@20250929` and
//! `-latest` dropped). A model that is not here is unknown: its cost is `None`, never 0
//! (DESIGN.md invariant 7). Prices are USD per million tokens, from the providers' public price
//! lists; cache writes are the 5-minute tier.

/// Prices of one model in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Prompt-cache writes.
    pub cache_write: f64,
    /// Prompt-cache reads.
    pub cache_read: f64,
}

/// What is known about one model family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInfo {
    /// Normalised id (see the module doc).
    pub id: &'static str,
    /// List prices.
    pub prices: Prices,
    /// Prices when a request's prompt exceeds `threshold` tokens (long-context tier), if any.
    pub long_context: Option<(u64, Prices)>,
    /// Largest `max_tokens` the model accepts, in tokens. The agent runtime raises `max_tokens`
    /// up to this after a turn was cut off inside a tool call.
    pub max_output_tokens: u32,
    /// Context window in tokens (the default one, without beta headers).
    pub context_window: u64,
}

const fn p(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Prices {
    Prices {
        input,
        output,
        cache_write,
        cache_read,
    }
}

const fn m(
    id: &'static str,
    prices: Prices,
    max_output_tokens: u32,
    context_window: u64,
) -> ModelInfo {
    ModelInfo {
        id,
        prices,
        long_context: None,
        max_output_tokens,
        context_window,
    }
}

const SONNET: Prices = p(3.0, 15.0, 3.75, 0.30);
/// Sonnet 4 / 4.5 above 200k input tokens (1M-context beta).
const SONNET_LONG: Option<(u64, Prices)> = Some((200_000, p(6.0, 22.50, 7.50, 0.60)));
const OPUS_4: Prices = p(15.0, 75.0, 18.75, 1.50);

/// The table. OpenAI ids are matched without date stripping (their snapshots differ in price).
pub const MODELS: &[ModelInfo] = &[
    m("claude-opus-4-5", p(5.0, 25.0, 6.25, 0.50), 64_000, 200_000),
    m("claude-opus-4-1", OPUS_4, 32_000, 200_000),
    m("claude-opus-4", OPUS_4, 32_000, 200_000),
    m("claude-opus-4-0", OPUS_4, 32_000, 200_000),
    ModelInfo {
        long_context: SONNET_LONG,
        ..m("claude-sonnet-4-5", SONNET, 64_000, 200_000)
    },
    ModelInfo {
        long_context: SONNET_LONG,
        ..m("claude-sonnet-4", SONNET, 64_000, 200_000)
    },
    ModelInfo {
        long_context: SONNET_LONG,
        ..m("claude-sonnet-4-0", SONNET, 64_000, 200_000)
    },
    m("claude-3-7-sonnet", SONNET, 64_000, 200_000),
    m("claude-3-5-sonnet", SONNET, 8_192, 200_000),
    m("claude-haiku-4-5", p(1.0, 5.0, 1.25, 0.10), 64_000, 200_000),
    m("claude-3-5-haiku", p(0.80, 4.0, 1.0, 0.08), 8_192, 200_000),
    m("claude-3-haiku", p(0.25, 1.25, 0.30, 0.03), 4_096, 200_000),
    m("claude-3-opus", OPUS_4, 4_096, 200_000),
    m("gpt-4o", p(2.50, 10.0, 2.50, 1.25), 16_384, 128_000),
    m("gpt-4o-mini", p(0.15, 0.60, 0.15, 0.075), 16_384, 128_000),
    m("gpt-4-1", p(2.0, 8.0, 2.0, 0.50), 32_768, 1_047_576),
    m("gpt-4-1-mini", p(0.40, 1.60, 0.40, 0.10), 32_768, 1_047_576),
    m(
        "gpt-4-1-nano",
        p(0.10, 0.40, 0.10, 0.025),
        32_768,
        1_047_576,
    ),
];

/// Normalises a model id for lookup (see the module doc).
pub fn normalize(model: &str) -> String {
    let mut id = model.trim().to_ascii_lowercase();
    if let Some(pos) = id.rfind('/') {
        id = id[pos + 1..].to_string();
    }
    id = id.replace('.', "-");
    if let Some(stripped) = id.strip_suffix("-latest") {
        id = stripped.to_string();
    }
    if id.starts_with("claude") {
        let bytes = id.as_bytes();
        let n = bytes.len();
        if n > 9
            && (bytes[n - 9] == b'-' || bytes[n - 9] == b'@')
            && bytes[n - 8..].iter().all(u8::is_ascii_digit)
        {
            id.truncate(n - 9);
        }
    }
    id
}

/// The entry for `model`, if known.
pub fn lookup(model: &str) -> Option<&'static ModelInfo> {
    let id = normalize(model);
    MODELS.iter().find(|m| m.id == id)
}

/// The context window of `model` in tokens, if known.
pub fn context_window(model: &str) -> Option<u64> {
    lookup(model).map(|m| m.context_window)
}

/// The largest `max_tokens` `model` accepts, if known.
pub fn max_output_tokens(model: &str) -> Option<u32> {
    lookup(model).map(|m| m.max_output_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_normalise_to_families() {
        assert_eq!(normalize("claude-sonnet-4-5-20250929"), "claude-sonnet-4-5");
        assert_eq!(
            normalize("anthropic/claude-sonnet-4.5"),
            "claude-sonnet-4-5"
        );
        assert_eq!(normalize("claude-3-5-haiku@20241022"), "claude-3-5-haiku");
        assert_eq!(normalize("claude-3-7-sonnet-latest"), "claude-3-7-sonnet");
        assert_eq!(normalize("gpt-4o-2024-05-13"), "gpt-4o-2024-05-13");
        assert_eq!(
            lookup("claude-haiku-4-5-20251001").unwrap().prices.input,
            1.0
        );
        assert!(lookup("gpt-4o-2024-05-13").is_none());
        assert!(lookup("qwen2.5-coder:32b").is_none());
    }

    #[test]
    fn table_ids_are_normalised_and_unique() {
        for (i, m) in MODELS.iter().enumerate() {
            assert_eq!(normalize(m.id), m.id);
            assert!(MODELS[i + 1..].iter().all(|o| o.id != m.id), "{}", m.id);
        }
    }

    #[test]
    fn output_caps() {
        assert_eq!(max_output_tokens("claude-opus-4-1-20250805"), Some(32_000));
        assert_eq!(max_output_tokens("my-local-model"), None);
    }
}

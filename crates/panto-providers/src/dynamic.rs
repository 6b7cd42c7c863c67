//! The adapter of a protocol chosen at run time ([`Protocol::adapter`]), behind
//! `dyn Provider`. Apart from `protocol.rs` because every adapter module uses `Protocol`, and
//! this uses every adapter.

use panto_provider::Provider;

use crate::config::{Config, Error};
use crate::protocol::Protocol;

impl Protocol {
    /// Its adapter, built from `config`, behind the [`Provider`] trait.
    ///
    /// # Errors
    /// As the adapter's `new`, or [`Error::NotCompiled`] when its feature is off.
    pub fn adapter(self, config: Config) -> Result<Box<dyn Provider>, Error> {
        let _ = &config;
        match self {
            #[cfg(feature = "anthropic")]
            Protocol::Anthropic => Ok(Box::new(crate::AnthropicProvider::new(config)?)),
            #[cfg(feature = "openai-chat")]
            Protocol::OpenAiChat => Ok(Box::new(crate::OpenAiChatProvider::new(config)?)),
            #[cfg(feature = "openai-responses")]
            Protocol::OpenAiResponses => Ok(Box::new(crate::OpenAiResponsesProvider::new(config)?)),
            #[cfg(feature = "gemini")]
            Protocol::Gemini => Ok(Box::new(crate::GeminiProvider::new(config)?)),
            #[allow(unreachable_patterns, reason = "reached when a feature is off")]
            other => Err(Error::NotCompiled {
                provider: other.name(),
                feature: other.feature(),
            }),
        }
    }
}

//! Building the provider adapter that the configuration names.
//!
//! Keys come only from the environment (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
//! `GEMINI_API_KEY`); the base URL is the resolved configuration value (flag, environment,
//! project file, user file), else the provider's official API. A keyless base URL that is not
//! the official API (a local llama.cpp or Ollama server) works without a key.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use panto_provider::Provider;
use panto_providers::{
    AnthropicProvider, Config as AdapterConfig, Error, GeminiProvider, OpenAiChatProvider,
    OpenAiResponsesProvider,
};

use crate::bad_input;
use crate::config::{Config, ProviderKind};

/// The provider adapter for `kind`.
///
/// # Errors
/// Bad input (exit 2) when the key is missing (the message names the variable), or the base URL
/// or key cannot be used.
pub fn build(kind: ProviderKind, config: &Config) -> Result<Arc<dyn Provider>> {
    let Some((_, url_var)) = kind.env_vars() else {
        bail!("the offline summarizer is not an HTTP provider");
    };
    let base_url = config.base_url.value.clone();
    // The adapters read the key from the environment; the base URL is the resolved setting.
    let lookup = |var: &str| {
        if var == url_var {
            base_url.clone()
        } else {
            std::env::var(var).ok()
        }
    };
    let built = match kind {
        ProviderKind::Anthropic => adapter(
            AnthropicProvider::config_from_env(lookup),
            AnthropicProvider::new,
            config,
        ),
        ProviderKind::Openai => adapter(
            OpenAiChatProvider::config_from_env(lookup),
            OpenAiChatProvider::new,
            config,
        ),
        ProviderKind::OpenaiResponses => adapter(
            OpenAiResponsesProvider::config_from_env(lookup),
            OpenAiResponsesProvider::new,
            config,
        ),
        ProviderKind::Gemini => adapter(
            GeminiProvider::config_from_env(lookup),
            GeminiProvider::new,
            config,
        ),
        ProviderKind::Offline => unreachable!("handled above"),
    };
    built.map_err(|e| match e {
        Error::Client { .. } => anyhow::anyhow!(e),
        other => bad_input(other),
    })
}

/// Builds one adapter from its environment configuration, tuned by `config`.
fn adapter<P: Provider + 'static>(
    from_env: Result<AdapterConfig, Error>,
    new: fn(AdapterConfig) -> Result<P, Error>,
    config: &Config,
) -> Result<Arc<dyn Provider>, Error> {
    let provider = new(tune(from_env?, config))?;
    Ok(Arc::new(provider))
}

/// Applies the configured timeouts, retries and response cap.
fn tune(mut c: AdapterConfig, config: &Config) -> AdapterConfig {
    c.connect_timeout = Duration::from_secs(config.connect_timeout_secs.value);
    c.request_timeout = Duration::from_secs(config.timeout_secs.value);
    c.retry.max_retries = config.retries.value;
    c.max_response_bytes = config.max_response_mib.value.saturating_mul(1024 * 1024);
    c
}

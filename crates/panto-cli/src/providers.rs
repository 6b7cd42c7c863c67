//! Building the provider adapter that the configuration names.
//!
//! Keys come only from the environment (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
//! `GEMINI_API_KEY`); the base URL is the resolved configuration value (flag, environment,
//! project file, user file), else the provider's official API. A keyless base URL that is not
//! the official API (a local llama.cpp or Ollama server) works without a key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use panto_model::Message;
use panto_provider::{
    EventSink, NativeCompaction, Provider, ProviderError, Request, StreamEvent, async_trait,
};
use panto_providers::{
    AnthropicProvider, Config as AdapterConfig, Error, GeminiProvider, OpenAiChatProvider,
    OpenAiResponsesProvider,
};

use crate::bad_input;
use crate::config::{Config, ProviderKind};
use crate::ui;

/// The provider adapter for `kind`.
///
/// # Errors
/// Bad input (exit 2) when the key is missing (the message names the variable), or the base URL
/// or key cannot be used.
pub(crate) fn build(kind: ProviderKind, config: &Config) -> Result<Arc<dyn Provider>> {
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
    Ok(Arc::new(ShowRetries(provider)))
}

/// A provider whose retries are announced on stderr as they are scheduled, for chat requests
/// and compaction requests alike; every event still reaches the caller's sink. It also
/// remembers the window a context overflow reports, per model, for the context meter.
struct ShowRetries<P>(P);

/// The context windows providers reported in overflow errors during this run, by model.
static LEARNED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// The context window of `model` as far as this run knows it, from the one place that decides
/// it: the limit an overflow error reported for the model during this run (the provider's own
/// word), else the configured `context_window`. The meter and `panto context` ask here, so a
/// window discovered from the server plugs in here too.
pub(crate) fn known_window(config: &Config, model: &str) -> Option<u64> {
    learned_window(model).or(config.context_window.value)
}

/// The context window of `model` as an overflow error reported it during this run, if any.
pub(crate) fn learned_window(model: &str) -> Option<u64> {
    let learned = LEARNED.lock().ok()?;
    learned.iter().find(|(m, _)| m == model).map(|(_, w)| *w)
}

fn learn_window(model: &str, window: u64) {
    if let Ok(mut learned) = LEARNED.lock() {
        learned.retain(|(m, _)| m != model);
        learned.push((model.to_owned(), window));
    }
}

#[async_trait]
impl<P: Provider> Provider for ShowRetries<P> {
    fn name(&self) -> &str {
        self.0.name()
    }

    async fn complete(
        &self,
        request: &Request,
        events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let mut announce = |event: StreamEvent<'_>| {
            match &event {
                StreamEvent::Retry(notice) => ui::notice(&ui::describe_retry(notice)),
                StreamEvent::Notice(text) => ui::notice(&format!("panto: {text}")),
                _ => {}
            }
            events(event);
        };
        let result = self.0.complete(request, &mut announce).await;
        if let Err(ProviderError::ContextOverflow {
            limit: Some(limit), ..
        }) = &result
        {
            learn_window(&request.model, *limit);
        }
        result
    }

    async fn compact_natively(
        &self,
        request: &Request,
        instructions: Option<&str>,
        events: EventSink<'_>,
    ) -> Result<NativeCompaction, ProviderError> {
        self.0.compact_natively(request, instructions, events).await
    }
}

/// Applies the configured waits, retries and response cap.
fn tune(mut c: AdapterConfig, config: &Config) -> AdapterConfig {
    let secs = Duration::from_secs;
    c.connect_timeout = secs(config.connect_timeout_secs.value);
    c.first_byte_timeout = secs(config.first_byte_timeout_secs.value);
    c.idle_timeout = secs(config.idle_timeout_secs.value);
    c.request_timeout = secs(config.timeout_secs.value);
    c.retry.max_retries = config.retries.value;
    c.retry.max_delay = secs(config.max_retry_wait_secs.value);
    c.max_response_bytes = config.max_response_mib.value.saturating_mul(1024 * 1024);
    c
}

//! Building the provider adapter that the configuration names.
//!
//! The adapter, its variables and its official API are panto-providers' (`Protocol`). Keys come
//! only from the environment (the protocol's key variable, such as `ANTHROPIC_API_KEY`); the base
//! URL is the resolved configuration value (flag, environment, project file, user file), else the
//! provider's official API. A keyless base URL that is not the official API (a local llama.cpp
//! or Ollama server) works without a key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use panto_compact::{KnownWindows, Window, WindowSource};
use panto_model::Message;
use panto_provider::{
    EventSink, NativeCompaction, Provider, ProviderError, Request, StreamEvent, async_trait,
};
use panto_providers::{Config as AdapterConfig, Error, Protocol, WindowProbe};

use crate::bad_input;
use crate::config::{Config, ProviderKind};
use crate::ui;
use crate::windows::{self, Key, Record, WindowFile};

/// The provider adapter for `kind`.
///
/// # Errors
/// Bad input (exit 2) when the key is missing (the message names the variable), or the base URL
/// or key cannot be used.
pub(crate) fn build(kind: ProviderKind, config: &Config) -> Result<Arc<dyn Provider>> {
    let ProviderKind::Adapter(protocol) = kind else {
        bail!("the offline summarizer is not an HTTP provider");
    };
    match adapter_config(protocol, config).and_then(|c| protocol.adapter(c)) {
        Ok(adapter) => Ok(Arc::new(ShowRetries(adapter))),
        Err(e @ Error::Client { .. }) => Err(anyhow::anyhow!(e)),
        Err(other) => Err(bad_input(other)),
    }
}

/// The adapter configuration of `protocol`: the key from its variable, the base URL from the
/// resolved setting, and the configured waits, retries and response cap.
fn adapter_config(protocol: Protocol, config: &Config) -> Result<AdapterConfig, Error> {
    let url_var = protocol.environment().base_url_variable;
    let base_url = config.base_url.value.clone();
    // The adapters read the key from the environment; the base URL is the resolved setting.
    let lookup = |var: &str| {
        if var == url_var {
            base_url.clone()
        } else {
            std::env::var(var).ok()
        }
    };
    protocol
        .config_from_env(lookup)
        .map(|from_env| tune(from_env, config))
}

/// A provider whose retries are announced on stderr as they are scheduled, for chat requests
/// and compaction requests alike; every event still reaches the caller's sink.
struct ShowRetries<P>(P);

/// Everything the CLI knows of the window of `model` on the configured provider and server at
/// the start of a command: the configured `context_window`, the learned and discovered windows
/// kept in the data folder ([`crate::windows`]) and panto's catalogue of well-known models; with
/// the kept records, which say where each came from. The value a driver or a compaction run is
/// given (and gives back updated, for [`remember`] to keep), and the one the views show (the
/// smallest known, `KnownWindows::window`).
pub(crate) fn known_windows(config: &Config, model: &str) -> (KnownWindows, Vec<Record>) {
    let mut known = KnownWindows::for_model(model);
    if let Some(configured) = config.context_window.value {
        known.learn(Window::new(configured, WindowSource::Configured));
    }
    let records = kept_windows(config, model);
    for w in records.iter().filter_map(Record::window) {
        known.learn(w);
    }
    if let Some(counts) = records.iter().find_map(|r| r.counts_output) {
        known.counts_output = Some(counts);
    }
    (known, records)
}

/// Whether `window` says nothing of this server: unknown, or only the catalogue's guess from
/// the model's name (which a server of one's own may not serve), so that the server is asked.
pub(crate) fn told_nothing(window: Option<Window>) -> bool {
    window.is_none_or(|w| w.source == WindowSource::Catalogue)
}

/// The window of `model` as far as the CLI knows it ([`known_windows`]).
pub(crate) fn known_window(config: &Config, model: &str) -> Option<Window> {
    known_windows(config, model).0.window()
}

/// The records kept for `model` on the configured provider and server; none when the file
/// cannot be read (said once).
pub(crate) fn kept_windows(config: &Config, model: &str) -> Vec<Record> {
    let Some(path) = windows::path() else {
        return Vec::new();
    };
    match WindowFile::read(&path) {
        Ok(file) => file.of(&Key::of(config, model)).cloned().collect(),
        Err(e) => {
            note_once(&format!("{e:#}; the windows it keeps are not used"));
            Vec::new()
        }
    }
}

/// Where `window` came from, in words for a person: the configuration's source, the request
/// that taught it, or the server and endpoint that said it.
pub(crate) fn window_origin(config: &Config, window: Window, records: &[Record]) -> String {
    let record = records
        .iter()
        .find(|r| r.window() == Some(window))
        .map(|r| r.detail.as_str())
        .filter(|d| !d.is_empty());
    match (window.source, record) {
        (WindowSource::Configured, _) => format!("configured: {}", config.context_window.source),
        (WindowSource::Discovered, Some(detail)) => format!("discovered: {detail}"),
        (WindowSource::Reported, _) => "learned: an overflow error stated it".to_owned(),
        (WindowSource::Bound, Some(detail)) => format!("learned: {detail}"),
        (WindowSource::Catalogue, _) => format!(
            "catalogue: panto's list of well-known models, checked {}",
            panto_compact::catalogue_checked()
        ),
        (source, _) => source.describe().to_owned(),
    }
}

/// Keeps in the data folder what a command learned of the window of `model`, from `known`,
/// the windows the driver or the compaction run gives back: the window learned
/// (`KnownWindows::learned`: a stated limit, or a bound a request that did not fit taught),
/// with whether the server counts the output against it (`KnownWindows::counts_output`). A
/// stated limit replaces what is kept (the provider's latest word); a bound only what it
/// tightens (every bound holds); what was known of the output stays until something says
/// otherwise. A file that cannot be written is said once; the conversation goes on.
pub(crate) fn remember(config: &Config, model: &str, known: &KnownWindows) {
    let Some(window) = known.learned() else {
        return;
    };
    let Some(path) = windows::path() else {
        return;
    };
    let Ok(mut file) = WindowFile::read(&path) else {
        // Said when it was read; a file that cannot be read is never overwritten.
        return;
    };
    let key = Key::of(config, model);
    let kept_record = file
        .of(&key)
        .find(|r| r.window().is_some_and(|w| w.source.is_learned()));
    let kept = kept_record.and_then(Record::window);
    let counts_output = known
        .counts_output
        .or(kept_record.and_then(|r| r.counts_output));
    let same_output = kept_record.is_some_and(|r| r.counts_output == counts_output);
    let (window, keep) = match (kept, window.source) {
        (Some(k), WindowSource::Reported) => (window, k == window),
        (Some(k), _) if k.tokens <= window.tokens => (k, true),
        (_, _) => (window, false),
    };
    if keep && same_output {
        return;
    }
    let detail = match window.source {
        WindowSource::Bound => format!(
            "below a request of about {} tokens that did not fit (an overflow without numbers, or a request the server cut)",
            window.tokens + 1
        ),
        _ => "an overflow error stated it".to_owned(),
    };
    let changed = file.put(Record {
        provider: key.provider,
        base_url: key.base_url,
        model: key.model,
        tokens: window.tokens,
        source: window.source.as_str().to_owned(),
        detail,
        at: windows::now(),
        counts_output,
    });
    if changed && let Err(e) = file.write(&path) {
        note_once(&format!(
            "{e:#}; the window learned is not kept for the next run"
        ));
    }
}

/// Whether the configured server may be asked for its window: a server of the user's own (a
/// base URL that is not the official API of any protocol), which llama-server, Ollama, vLLM and
/// LM Studio are.
pub(crate) fn own_server(config: &Config) -> bool {
    let Some(url) = config.base_url.value.as_deref() else {
        return false;
    };
    config.provider.value != ProviderKind::Offline
        && !Protocol::ALL
            .iter()
            .any(|p| p.environment().is_official(url))
}

/// Asks the configured server for the window it serves `model` with, and keeps the answer
/// (a window, or that it said nothing, so that it is not asked again until forgotten). `None`
/// when the server is not one of the user's own, or cannot be asked (the error is given back).
///
/// # Errors
/// The probe's error (the server down, a refused key), or a configuration that cannot build
/// a client.
pub(crate) async fn discover(config: &Config, model: &str) -> Result<Option<Record>> {
    if !own_server(config) {
        return Ok(None);
    }
    let ProviderKind::Adapter(protocol) = config.provider.value else {
        return Ok(None);
    };
    let probe = WindowProbe::new(adapter_config(protocol, config).map_err(bad_input)?)
        .map_err(bad_input)?;
    let found = probe.discover(model).await?;
    let key = Key::of(config, model);
    let record = Record {
        provider: key.provider.clone(),
        base_url: key.base_url.clone(),
        model: key.model.clone(),
        tokens: found.as_ref().map_or(0, |f| f.tokens),
        source: WindowSource::Discovered.as_str().to_owned(),
        detail: found.as_ref().map_or_else(
            || "the server was asked and said nothing".to_owned(),
            |f| {
                format!(
                    "{} {}{}",
                    f.server,
                    f.endpoint,
                    if f.served {
                        ""
                    } else {
                        " (the model's longest context; the server may serve less)"
                    }
                )
            },
        ),
        at: windows::now(),
        counts_output: None,
    };
    if let Some(path) = windows::path()
        && let Ok(mut file) = WindowFile::read(&path)
        && file.put(record.clone())
        && let Err(e) = file.write(&path)
    {
        note_once(&format!(
            "{e:#}; the window discovered is not kept for the next run"
        ));
    }
    Ok(Some(record))
}

/// Says `text` on stderr once per run.
fn note_once(text: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::screen::notice(&format!("panto: note: {text}"));
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
                StreamEvent::Retry(notice) => crate::screen::notice(&ui::describe_retry(notice)),
                StreamEvent::Notice(text) => crate::screen::notice(&format!("panto: {text}")),
                _ => {}
            }
            events(event);
        };
        self.0.complete(request, &mut announce).await
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

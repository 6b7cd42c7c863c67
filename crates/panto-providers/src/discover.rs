//! Asking a server for the context window it serves a model with: llama-server (`GET /props`),
//! Ollama (`GET /api/ps`, `POST /api/show`), vLLM (`GET /v1/models`) and LM Studio
//! (`GET /api/v1/models`, `GET /api/v0/models`), one small function per kind of server, each
//! through the same transport as the adapters (the key as a bearer token, the configured
//! headers, the waits, the response cap, errors scrubbed of the key). The endpoints and fields
//! are documented in `docs/providers.md`, "Windows the servers tell".

use std::fmt;
use std::time::Duration;

use panto_provider::ProviderError;
use serde_json::{Value, json};

use crate::config::{Config, Error};
use crate::transport::Transport;

/// How long one question to a server may take: a local server answers in milliseconds, and a
/// server that does not answer at all is not worth a conversation's wait.
const PROBE_WAIT: Duration = Duration::from_secs(10);

/// A kind of server that tells its context window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// llama.cpp's `llama-server`.
    LlamaServer,
    /// Ollama.
    Ollama,
    /// vLLM.
    Vllm,
    /// LM Studio.
    LmStudio,
}

impl ServerKind {
    /// Every kind, in the order [`WindowProbe::discover`] asks them.
    pub const ALL: [ServerKind; 4] = [
        ServerKind::LlamaServer,
        ServerKind::Ollama,
        ServerKind::Vllm,
        ServerKind::LmStudio,
    ];

    /// Its name: `llama-server`, `Ollama`, `vLLM`, `LM Studio`.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::LlamaServer => "llama-server",
            ServerKind::Ollama => "Ollama",
            ServerKind::Vllm => "vLLM",
            ServerKind::LmStudio => "LM Studio",
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A context window a server told.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoveredWindow {
    /// The window, in the server's tokens.
    pub tokens: u64,
    /// The kind of server that told it.
    pub server: ServerKind,
    /// The endpoint and field it came from, such as `GET /props
    /// default_generation_settings.n_ctx`.
    pub endpoint: &'static str,
    /// Whether it is the window the server serves the model with now (`true`), or only the
    /// longest context the model takes, which the server may serve less of (Ollama's
    /// `model_info` when no `num_ctx` is set and the model is not loaded, LM Studio's
    /// `max_context_length` for a model not loaded).
    pub served: bool,
}

impl DiscoveredWindow {
    fn new(tokens: u64, server: ServerKind, endpoint: &'static str, served: bool) -> Self {
        DiscoveredWindow {
            tokens,
            server,
            endpoint,
            served,
        }
    }
}

/// Asks a server at the configured base URL for the window it serves a model with.
///
/// The base URL is the one the adapters use (`http://127.0.0.1:8080/v1`); a server's own
/// endpoints are at its root (the base URL without its version segment). Each function asks
/// one kind of server and answers `Ok(None)` when the server is not of that kind or does not
/// say; [`WindowProbe::discover`] asks each in turn.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use panto_providers::{Config, WindowProbe};
///
/// let probe = WindowProbe::new(Config::new("http://127.0.0.1:8080/v1", ""))?;
/// if let Some(found) = probe.discover("local").await? {
///     println!("{} tokens, from {} {}", found.tokens, found.server, found.endpoint);
/// }
/// # Ok(())
/// # }
/// ```
pub struct WindowProbe {
    transport: Transport,
}

impl fmt::Debug for WindowProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowProbe")
            .field("transport", &self.transport)
            .finish()
    }
}

impl WindowProbe {
    /// A probe with this configuration (the base URL, the key, the headers and waits).
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`], as for an adapter.
    pub fn new(config: Config) -> Result<WindowProbe, Error> {
        Ok(WindowProbe {
            transport: Transport::new(config)?,
        })
    }

    /// Asks each kind of server in turn ([`ServerKind::ALL`]) and gives the first window told.
    ///
    /// # Errors
    /// The first error met (a connection that failed, a key refused) when no kind told a
    /// window.
    pub async fn discover(&self, model: &str) -> Result<Option<DiscoveredWindow>, ProviderError> {
        let mut first_error = None;
        for kind in ServerKind::ALL {
            let asked = match kind {
                ServerKind::LlamaServer => self.llama_server(model).await,
                ServerKind::Ollama => self.ollama(model).await,
                ServerKind::Vllm => self.vllm(model).await,
                ServerKind::LmStudio => self.lm_studio(model).await,
            };
            match asked {
                Ok(Some(found)) => return Ok(Some(found)),
                Ok(None) => {}
                // Nothing listens there: no other kind will answer either.
                Err(e @ (ProviderError::Connection { .. } | ProviderError::WaitExpired { .. })) => {
                    return Err(e);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    /// llama-server: `GET /props`, whose `default_generation_settings.n_ctx` is the context of
    /// one slot (the whole context divided by `--parallel`); a router (`--models-dir`) answers
    /// for the model named in `?model=`.
    ///
    /// # Errors
    /// As [`WindowProbe::discover`].
    pub async fn llama_server(
        &self,
        model: &str,
    ) -> Result<Option<DiscoveredWindow>, ProviderError> {
        let root = self.transport.base().root();
        let n_ctx = |props: &Value| {
            positive(&props["default_generation_settings"]["n_ctx"]).or(positive(&props["n_ctx"]))
        };
        let props = self.get(&format!("{root}/props")).await?;
        if let Some(tokens) = props.as_ref().and_then(n_ctx) {
            return Ok(Some(found(tokens, ServerKind::LlamaServer, PROPS, true)));
        }
        if model.is_empty() {
            return Ok(None);
        }
        let mut url = reqwest::Url::parse(&format!("{root}/props")).map_err(|e| {
            ProviderError::MalformedResponse {
                message: format!("cannot build the URL of /props: {e}"),
            }
        })?;
        url.query_pairs_mut().append_pair("model", model);
        let props = self.get(url.as_str()).await?;
        Ok(props
            .as_ref()
            .and_then(n_ctx)
            .map(|tokens| found(tokens, ServerKind::LlamaServer, PROPS, true)))
    }

    /// Ollama: `GET /api/ps`, whose entry for a loaded model has the `context_length` it was
    /// loaded with; else `POST /api/show`, whose `parameters` may set `num_ctx` (the window it
    /// will be served with), else whose `model_info` has the model's own
    /// `<architecture>.context_length` (the longest it takes: Ollama serves its default context
    /// unless told more, and cuts the front of a longer prompt).
    ///
    /// # Errors
    /// As [`WindowProbe::discover`].
    pub async fn ollama(&self, model: &str) -> Result<Option<DiscoveredWindow>, ProviderError> {
        let root = self.transport.base().root();
        if let Some(ps) = self.get(&format!("{root}/api/ps")).await? {
            let loaded = ps["models"].as_array().and_then(|models| {
                models.iter().find_map(|m| {
                    let named = [&m["model"], &m["name"]]
                        .iter()
                        .filter_map(|n| n.as_str())
                        .any(|n| same_ollama_model(n, model));
                    if named {
                        positive(&m["context_length"])
                    } else {
                        None
                    }
                })
            });
            if let Some(tokens) = loaded {
                return Ok(Some(found(tokens, ServerKind::Ollama, OLLAMA_PS, true)));
            }
        }
        let Some(show) = self
            .transport
            .fetch_json(
                &format!("{root}/api/show"),
                Some(&json!({ "model": model })),
                PROBE_WAIT,
            )
            .await?
        else {
            return Ok(None);
        };
        let num_ctx = show["parameters"].as_str().and_then(|parameters| {
            parameters.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next()?.parse::<u64>().ok())
                    .flatten()
                    .filter(|n| *n > 0)
            })
        });
        if let Some(tokens) = num_ctx {
            return Ok(Some(found(
                tokens,
                ServerKind::Ollama,
                OLLAMA_NUM_CTX,
                true,
            )));
        }
        let trained = show["model_info"].as_object().and_then(|info| {
            info.iter()
                .filter(|(key, _)| key.ends_with(".context_length"))
                .find_map(|(_, value)| positive(value))
        });
        Ok(trained.map(|tokens| found(tokens, ServerKind::Ollama, OLLAMA_MODEL_INFO, false)))
    }

    /// vLLM: `GET /v1/models`, whose entry for the model has `max_model_len`, the window the
    /// server was started with.
    ///
    /// # Errors
    /// As [`WindowProbe::discover`].
    pub async fn vllm(&self, model: &str) -> Result<Option<DiscoveredWindow>, ProviderError> {
        let url = self.transport.base().endpoint("v1", "models");
        let Some(listing) = self.get(&url).await? else {
            return Ok(None);
        };
        Ok(entry(&listing["data"], "id", model)
            .and_then(|m| positive(&m["max_model_len"]))
            .map(|tokens| found(tokens, ServerKind::Vllm, VLLM_MODELS, true)))
    }

    /// LM Studio: `GET /api/v1/models`, whose entry for the model (`key`) lists its loaded
    /// instances with the `context_length` each was loaded with, and `max_context_length`, the
    /// longest the model takes; else the older `GET /api/v0/models`, whose entry (`id`) has
    /// `max_context_length`.
    ///
    /// # Errors
    /// As [`WindowProbe::discover`].
    pub async fn lm_studio(&self, model: &str) -> Result<Option<DiscoveredWindow>, ProviderError> {
        let root = self.transport.base().root();
        if let Some(listing) = self.get(&format!("{root}/api/v1/models")).await?
            && let Some(m) = entry(&listing["models"], "key", model)
        {
            let loaded = m["loaded_instances"].as_array().and_then(|instances| {
                instances
                    .iter()
                    .filter_map(|i| positive(&i["config"]["context_length"]))
                    .min()
            });
            if let Some(tokens) = loaded {
                return Ok(Some(found(tokens, ServerKind::LmStudio, LMS_LOADED, true)));
            }
            if let Some(tokens) = positive(&m["max_context_length"]) {
                return Ok(Some(found(tokens, ServerKind::LmStudio, LMS_V1_MAX, false)));
            }
        }
        let Some(listing) = self.get(&format!("{root}/api/v0/models")).await? else {
            return Ok(None);
        };
        Ok(entry(&listing["data"], "id", model)
            .and_then(|m| positive(&m["max_context_length"]))
            .map(|tokens| found(tokens, ServerKind::LmStudio, LMS_V0_MAX, false)))
    }

    async fn get(&self, url: &str) -> Result<Option<Value>, ProviderError> {
        self.transport.fetch_json(url, None, PROBE_WAIT).await
    }
}

const PROPS: &str = "GET /props default_generation_settings.n_ctx";
const OLLAMA_PS: &str = "GET /api/ps context_length";
const OLLAMA_NUM_CTX: &str = "POST /api/show parameters num_ctx";
const OLLAMA_MODEL_INFO: &str = "POST /api/show model_info context_length";
const VLLM_MODELS: &str = "GET /v1/models max_model_len";
const LMS_LOADED: &str = "GET /api/v1/models loaded_instances context_length";
const LMS_V1_MAX: &str = "GET /api/v1/models max_context_length";
const LMS_V0_MAX: &str = "GET /api/v0/models max_context_length";

fn found(
    tokens: u64,
    server: ServerKind,
    endpoint: &'static str,
    served: bool,
) -> DiscoveredWindow {
    DiscoveredWindow::new(tokens, server, endpoint, served)
}

/// A whole number above 0.
fn positive(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n > 0)
}

/// The entry of `list` whose `field` is `model`.
fn entry<'a>(list: &'a Value, field: &str, model: &str) -> Option<&'a Value> {
    list.as_array()?
        .iter()
        .find(|m| m[field].as_str() == Some(model))
}

/// Whether Ollama's `listed` name is `model`: a name without a tag is the `latest` one.
fn same_ollama_model(listed: &str, model: &str) -> bool {
    listed == model || (!model.contains(':') && listed.strip_suffix(":latest") == Some(model))
}

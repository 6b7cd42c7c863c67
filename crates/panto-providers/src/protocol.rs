//! The protocols panto speaks, each defined once: its name, what it is, the cargo feature of
//! its adapter, where the adapter reads its key and base URL, and the adapter itself.
//!
//! Every list of providers is made from [`Protocol`]: the CLI's `--provider` values, their help
//! and its error messages, the variables it reads, the classifier's rules, the adapters' own
//! `name` and `from_env`. Adding a protocol is a new adapter file, a variant here and an arm in
//! `dynamic.rs` (docs/providers.md, "Adding a protocol").

use crate::config::{self, Config, Environment, Error};

/// The wire protocol an adapter speaks. The classifier takes it too: some rules apply to some
/// protocols only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// Anthropic Messages (also Bedrock and Vertex serving Claude).
    Anthropic,
    /// OpenAI Chat Completions and every server that copies it.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Google Gemini (generativelanguage and Vertex).
    Gemini,
}

/// Both OpenAI protocols read the same variables.
const OPENAI: Environment = Environment {
    provider: "OpenAI",
    key_variable: "OPENAI_API_KEY",
    base_url_variable: "OPENAI_BASE_URL",
    default_base_url: "https://api.openai.com/v1",
};

impl Protocol {
    /// Every protocol, in the order panto lists them.
    pub const ALL: [Protocol; 4] = [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ];

    /// The name a person types (`--provider`, `provider = "..."`) and the adapter's
    /// `Provider::name`: `anthropic`, `openai`, `openai-responses`, `gemini`.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenAiChat => "openai",
            Protocol::OpenAiResponses => "openai-responses",
            Protocol::Gemini => "gemini",
        }
    }

    /// The protocol named `name` ([`Protocol::name`]), compiled in or not.
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == name)
    }

    /// What it is, in a few words, for a help text.
    pub const fn description(self) -> &'static str {
        match self {
            Protocol::Anthropic => "Anthropic Messages",
            Protocol::OpenAiChat => "OpenAI Chat Completions and every OpenAI-compatible server",
            Protocol::OpenAiResponses => "OpenAI Responses",
            Protocol::Gemini => "Google Gemini",
        }
    }

    /// The cargo feature of its adapter: `anthropic`, `openai-chat`, `openai-responses`,
    /// `gemini`.
    pub const fn feature(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenAiChat => "openai-chat",
            Protocol::OpenAiResponses => "openai-responses",
            Protocol::Gemini => "gemini",
        }
    }

    /// Whether its adapter is compiled in (its feature is on).
    pub const fn is_compiled(self) -> bool {
        match self {
            Protocol::Anthropic => cfg!(feature = "anthropic"),
            Protocol::OpenAiChat => cfg!(feature = "openai-chat"),
            Protocol::OpenAiResponses => cfg!(feature = "openai-responses"),
            Protocol::Gemini => cfg!(feature = "gemini"),
        }
    }

    /// The protocols whose adapter is compiled in, in the order of [`Protocol::ALL`].
    pub fn compiled() -> impl Iterator<Item = Protocol> {
        Protocol::ALL.into_iter().filter(|p| p.is_compiled())
    }

    /// Where its adapter reads its key and base URL.
    pub const fn environment(self) -> &'static Environment {
        match self {
            Protocol::Anthropic => &Environment {
                provider: "Anthropic",
                key_variable: "ANTHROPIC_API_KEY",
                base_url_variable: "ANTHROPIC_BASE_URL",
                default_base_url: "https://api.anthropic.com",
            },
            Protocol::OpenAiChat | Protocol::OpenAiResponses => &OPENAI,
            Protocol::Gemini => &Environment {
                provider: "Gemini",
                key_variable: "GEMINI_API_KEY",
                base_url_variable: "GEMINI_BASE_URL",
                default_base_url: "https://generativelanguage.googleapis.com",
            },
        }
    }

    /// Its adapter's configuration from the environment, each variable read through `lookup`
    /// (`std::env::var` for the adapters' `from_env`). The key may be missing only when the
    /// base URL is not the official API (a keyless local server).
    ///
    /// # Errors
    /// [`Error::MissingKey`] naming the variable, or [`Error::InvalidBaseUrl`].
    pub fn config_from_env(self, lookup: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        config::config_from_lookup(self.environment(), lookup)
    }
}

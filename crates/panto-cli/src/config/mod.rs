//! Layered configuration: defaults, the user file, the project file, the environment, flags.
//!
//! Files: the user level is `<platform config dir>/panto/config.toml` (`$PANTO_CONFIG_DIR`
//! replaces `<platform config dir>/panto` when set); the project level is `.panto/config.toml`
//! in the current directory or its nearest ancestor that has a `.panto` folder. Later wins:
//! defaults < user file < project file < environment < flags. Every resolved value remembers
//! where it came from, for `panto config`.
//!
//! Trust (docs/trust.md): a project's file may set the keys that decide where a request, and
//! with it the API key, goes (`provider`, `base_url`, and the response cap) only when the user
//! has trusted the project with `panto trust`, recorded in `<user dir>/trusted.toml`. One table,
//! [`KEYS`], says which keys need trust, and [`may_set`] applies it to every layer. Layer files
//! are read with `panto_compact::read_layer_file`: a project's only inside the project.
//!
//! This file holds the table of keys, the layers and the resolved [`Config`]; the jobs around
//! them are files of their own: `provider` (which provider answers), `file` (reading and
//! parsing a layer file), `layers` (resolving the layers in turn), `rows` (the values as
//! `panto config` lists them), `locations` (the folders configuration is read from) and
//! `trust` (the trust file). Writing the user folder's private files is here too.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use panto_compact::{CompactionStrategy, LayerFile};
use panto_model::{Price, Prices};
use panto_provider::CacheTtl;
use serde::{Deserialize, Deserializer};

mod file;
mod layers;
mod locations;
mod provider;
mod rows;
mod trust;

pub(crate) use locations::{Locations, Searched};
pub(crate) use provider::ProviderKind;
pub(crate) use trust::TrustFile;

#[cfg(test)]
pub(crate) use file::explain_value_error;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Built in.
    Default,
    /// The user-level file.
    UserFile(PathBuf),
    /// The project-level file.
    ProjectFile(PathBuf),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag(&'static str),
}

impl Source {
    /// The layer this source belongs to.
    pub(crate) fn layer(&self) -> Layer {
        match self {
            Source::Default => Layer::Default,
            Source::UserFile(_) => Layer::UserFile,
            Source::ProjectFile(_) => Layer::ProjectFile,
            Source::Env(_) => Layer::Env,
            Source::Flag(_) => Layer::Flag,
        }
    }
}

/// The configuration layers, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layer {
    /// Built in.
    Default,
    /// `<user dir>/config.toml`.
    UserFile,
    /// The nearest `.panto/config.toml`.
    ProjectFile,
    /// Environment variables.
    Env,
    /// Command-line flags.
    Flag,
}

/// What a layer needs before it may set a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Nothing: any layer may set it.
    Nothing,
    /// A project file may set it only in a trusted project; the text says why.
    Trust(&'static str),
}

/// Every key a `config.toml` may hold and what a project needs to set it. The one place that
/// decides which layer may set which key; [`may_set`] reads it, `panto config` explains it.
pub(crate) const KEYS: &[(&str, Needs)] = &[
    (
        "provider",
        Needs::Trust("it decides which API receives your key"),
    ),
    ("model", Needs::Nothing),
    ("compaction_model", Needs::Nothing),
    ("keep_tokens", Needs::Nothing),
    ("max_output_tokens", Needs::Nothing),
    ("compaction_max_output_tokens", Needs::Nothing),
    ("context_window", Needs::Nothing),
    ("auto_compact", Needs::Nothing),
    ("compaction_strategy", Needs::Nothing),
    (
        "base_url",
        Needs::Trust("it decides which server receives your key"),
    ),
    ("system_prompt", Needs::Nothing),
    ("timeout_secs", Needs::Nothing),
    ("connect_timeout_secs", Needs::Nothing),
    ("first_byte_timeout_secs", Needs::Nothing),
    ("idle_timeout_secs", Needs::Nothing),
    ("max_retry_wait_secs", Needs::Nothing),
    ("retries", Needs::Nothing),
    ("lock_timeout_secs", Needs::Nothing),
    ("store_pool_size", Needs::Nothing),
    ("store_connect_timeout_secs", Needs::Nothing),
    ("store_statement_timeout_secs", Needs::Nothing),
    ("store_reconnect_secs", Needs::Nothing),
    (
        "max_response_mib",
        Needs::Trust("it is the limit that protects your memory from a hostile server"),
    ),
    (
        "store",
        Needs::Trust("it decides where your conversations are written"),
    ),
    ("prompt_cache", Needs::Nothing),
    ("cache_ttl", Needs::Nothing),
    ("prices", Needs::Nothing),
];

/// What `key` needs (unknown keys need nothing: the file parser has refused them already).
pub(crate) fn needs(key: &str) -> Needs {
    KEYS.iter()
        .find(|(k, _)| *k == key)
        .map_or(Needs::Nothing, |(_, n)| *n)
}

/// Whether `layer` may set `key`, given whether the project is trusted: the table of key ×
/// layer × trust. Only the project layer is ever refused; flags and the environment are the
/// user's own, as is the user file.
pub(crate) fn may_set(key: &str, layer: Layer, trusted: bool) -> bool {
    match (layer, needs(key)) {
        (Layer::ProjectFile, Needs::Trust(_)) => trusted,
        _ => true,
    }
}

/// Whether the project found from the working directory is trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// No `.panto` folder above the working directory.
    NoProject,
    /// The project (the folder holding `.panto`) is recorded in the trust file.
    Trusted(PathBuf),
    /// The project is not recorded: its routing keys are ignored.
    Untrusted(PathBuf),
}

/// A value a project file set that was ignored because the project is not trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ignored {
    /// The key.
    pub key: &'static str,
    /// The value, as the file gave it.
    pub value: String,
    /// The file.
    pub file: PathBuf,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::UserFile(p) => write!(f, "user file {}", p.display()),
            Source::ProjectFile(p) => write!(f, "project file {}", p.display()),
            Source::Env(v) => write!(f, "environment {v}"),
            Source::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// A resolved value and its origin.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Setting<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Setting<T> {
    fn default(value: T) -> Setting<T> {
        Setting {
            value,
            source: Source::Default,
        }
    }

    fn set(&mut self, value: T, source: Source) {
        self.value = value;
        self.source = source;
    }
}

/// The keys a `config.toml` may hold. Unknown keys are an error naming the file and line.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    provider: Option<ProviderKind>,
    model: Option<String>,
    compaction_model: Option<String>,
    keep_tokens: Option<u64>,
    max_output_tokens: Option<u32>,
    compaction_max_output_tokens: Option<u32>,
    context_window: Option<u64>,
    auto_compact: Option<f64>,
    #[serde(default, deserialize_with = "strategy")]
    compaction_strategy: Option<CompactionStrategy>,
    base_url: Option<String>,
    system_prompt: Option<String>,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    first_byte_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retry_wait_secs: Option<u64>,
    retries: Option<u32>,
    lock_timeout_secs: Option<u64>,
    store_pool_size: Option<usize>,
    store_connect_timeout_secs: Option<u64>,
    store_statement_timeout_secs: Option<u64>,
    store_reconnect_secs: Option<u64>,
    max_response_mib: Option<u64>,
    store: Option<String>,
    prompt_cache: Option<bool>,
    cache_ttl: Option<TtlName>,
    prices: Option<BTreeMap<String, PriceEntry>>,
}

/// `cache_ttl` as a file spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
enum TtlName {
    /// The provider's short lifetime.
    #[serde(rename = "5m")]
    Short,
    /// The long one.
    #[serde(rename = "1h")]
    Long,
}

impl From<TtlName> for CacheTtl {
    fn from(name: TtlName) -> CacheTtl {
        match name {
            TtlName::Short => CacheTtl::Short,
            TtlName::Long => CacheTtl::Long,
        }
    }
}

/// One model's prices in `[prices]`, per million tokens: `input` and `output`, and the cache's
/// own when the provider's multipliers of the input price are not what the user pays.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PriceEntry {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
    cache_write_1h: Option<f64>,
}

impl From<PriceEntry> for Price {
    fn from(p: PriceEntry) -> Price {
        Price::new(p.input, p.output).with_cache(p.cache_read, p.cache_write, p.cache_write_1h)
    }
}

/// `compaction_strategy` as a file spells it: a name of `CompactionStrategy::NAMES`, the one
/// list of strategies.
fn strategy<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CompactionStrategy>, D::Error> {
    let name = String::deserialize(d)?;
    CompactionStrategy::parse(&name)
        .map(Some)
        .ok_or_else(|| serde::de::Error::unknown_variant(&name, &CompactionStrategy::NAMES))
}

/// Values given on the command line (`None` when the flag was not used).
#[derive(Debug, Default, Clone)]
pub(crate) struct Flags {
    /// `--provider`
    pub provider: Option<ProviderKind>,
    /// `--model`
    pub model: Option<String>,
    /// `--compaction-model`
    pub compaction_model: Option<String>,
    /// `--base-url`
    pub base_url: Option<String>,
    /// `--keep-tokens`
    pub keep_tokens: Option<u64>,
    /// `--timeout-secs`
    pub timeout_secs: Option<u64>,
    /// `--store`
    pub store: Option<String>,
    /// `--compaction-strategy`
    pub compaction_strategy: Option<CompactionStrategy>,
    /// `--auto-compact`
    pub auto_compact: Option<f64>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The provider adapter.
    pub provider: Setting<ProviderKind>,
    /// The active chat model.
    pub model: Setting<Option<String>>,
    /// The model tried first for compaction.
    pub compaction_model: Setting<Option<String>>,
    /// The keep-verbatim budget in tokens.
    pub keep_tokens: Setting<u64>,
    /// Output limit of a chat request.
    pub max_output_tokens: Setting<u32>,
    /// Output limit of a compaction request.
    pub compaction_max_output_tokens: Setting<u32>,
    /// The model's context window in tokens, when known: it lets a manual compaction of a
    /// conversation larger than the window fold it, and bounds overflow recovery when the
    /// provider states no limit.
    pub context_window: Setting<Option<u64>>,
    /// Proactive compaction: the share of the window above which `send` and `chat` compact a
    /// request before sending it (`None`: off, the default; only after an overflow).
    pub auto_compact: Setting<Option<f64>>,
    /// Who writes a compaction's summary: panto (`summary`) or the provider's native
    /// compaction first (`native`, Anthropic and `OpenAI` Responses), panto as its fallback.
    pub compaction_strategy: Setting<CompactionStrategy>,
    /// Base URL of the provider.
    pub base_url: Setting<Option<String>>,
    /// The agent's system prompt for `send` and `chat`.
    pub system_prompt: Setting<String>,
    /// The request deadline in seconds: every attempt and every wait between them included.
    pub timeout_secs: Setting<u64>,
    /// The connect wait in seconds.
    pub connect_timeout_secs: Setting<u64>,
    /// The first-byte wait in seconds (until a streaming answer begins).
    pub first_byte_timeout_secs: Setting<u64>,
    /// The idle wait in seconds (between two stream events; keep-alive pings do not count).
    pub idle_timeout_secs: Setting<u64>,
    /// The longest wait before a retry, and the longest `Retry-After` that is honoured.
    pub max_retry_wait_secs: Setting<u64>,
    /// Retries of transient failures.
    pub retries: Setting<u32>,
    /// How long an append waits for another writer's append lock (or, on PostgreSQL, a
    /// statement for a lock another session holds), in seconds.
    pub lock_timeout_secs: Setting<u64>,
    /// How many connections the PostgreSQL store keeps at most.
    pub store_pool_size: Setting<usize>,
    /// How long connecting to the PostgreSQL store may take, in seconds (TLS and login included; the URL's `connect_timeout` wins).
    pub store_connect_timeout_secs: Setting<u64>,
    /// How long one statement of the PostgreSQL store may run, in seconds.
    pub store_statement_timeout_secs: Setting<u64>,
    /// How long an operation of the PostgreSQL store that lost its connection keeps trying, in seconds.
    pub store_reconnect_secs: Setting<u64>,
    /// The cap on the size of one provider answer, MiB.
    pub max_response_mib: Setting<u64>,
    /// Where sessions are kept: a form of `store_value::KINDS` (a URL's password is a secret:
    /// shown only redacted).
    pub store: Setting<String>,
    /// Whether panto uses the provider's prompt cache (its breakpoints, its key).
    pub prompt_cache: Setting<bool>,
    /// How long cache entries should live: `5m` or `1h`.
    pub cache_ttl: Setting<CacheTtl>,
    /// The user's prices per model, merged over the layers (a later layer's price of a model
    /// replaces an earlier one's).
    pub prices: Setting<BTreeMap<String, PriceEntry>>,
    /// The layer files that exist, in order (user, project).
    pub files: Vec<PathBuf>,
    /// Where COMPACTION.md overrides are looked for, in order (user, project; the project's
    /// confined to the project).
    pub prompt_layers: Vec<LayerFile>,
    /// Whether the project is trusted.
    pub trust: Trust,
    /// The user configuration file (`<user dir>/config.toml`), whether it exists or not: a
    /// setting written there applies without trusting any project.
    pub user_file: Option<PathBuf>,
    /// Where configuration files were looked for, found or not, in the order they apply.
    pub searched: Vec<Searched>,
    /// What an untrusted project's file set and was ignored.
    pub ignored: Vec<Ignored>,
}

impl Config {
    /// The user's prices, for the cost reports.
    pub(crate) fn prices(&self) -> Prices {
        self.prices
            .value
            .iter()
            .fold(Prices::new(), |prices, (model, p)| {
                prices.with(model, (*p).into())
            })
    }
}

/// Default keep-verbatim budget, tokens.
pub(crate) const DEFAULT_KEEP_TOKENS: u64 = 20_000;

/// The user's data folder, where panto keeps what it learns (the chat history, the windows of
/// models): `$PANTO_DATA_DIR`, else `<platform data dir>/panto`.
pub(crate) fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("PANTO_DATA_DIR") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => Some(directories::BaseDirs::new()?.data_dir().join("panto")),
    }
}

/// The file in the user folder that records the trusted projects.
pub(crate) const TRUST_FILE: &str = "trusted.toml";

/// Creates a folder of the user configuration (and its parents), mode 0700 on Unix.
pub(crate) fn create_private_dir(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .with_context(|| format!("{}: cannot create the configuration folder", dir.display()))
}

/// Writes a new file with mode 0600 on Unix (the umask can only make it stricter), flushed.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

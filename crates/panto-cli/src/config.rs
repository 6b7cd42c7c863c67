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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use panto_compact::{CompactionStrategy, LayerFile, read_layer_file};
use panto_providers::Protocol;
use serde::Deserialize;

/// Which provider answers: one of panto-providers' protocols (its name, help text and
/// environment come from [`Protocol`]), or the offline summarizer. Every list of providers
/// panto shows (`--help`, errors) is made from [`ValueEnum::value_variants`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProviderKind {
    /// An HTTP adapter of panto-providers.
    Adapter(Protocol),
    /// The embedded extractive summarizer: no network, summarizes only.
    Offline,
}

impl ProviderKind {
    /// The name used in files and flags.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Adapter(protocol) => protocol.name(),
            ProviderKind::Offline => "offline",
        }
    }

    /// Parses a flag, file or environment value.
    pub(crate) fn parse(s: &str) -> Option<ProviderKind> {
        ProviderKind::value_variants()
            .iter()
            .copied()
            .find(|kind| kind.as_str() == s)
    }

    /// Every name, joined: `anthropic, openai, openai-responses, gemini, offline`, with `last`
    /// before the last one (`", "` or `" or "`).
    pub(crate) fn names(last: &str) -> String {
        let names: Vec<&str> = ProviderKind::value_variants()
            .iter()
            .map(|k| k.as_str())
            .collect();
        match names.split_last() {
            Some((tail, rest)) if !rest.is_empty() => format!("{}{last}{tail}", rest.join(", ")),
            _ => names.concat(),
        }
    }

    /// The environment variables holding this provider's key and base URL.
    pub(crate) fn env_vars(self) -> Option<(&'static str, &'static str)> {
        match self {
            ProviderKind::Adapter(protocol) => {
                let env = protocol.environment();
                Some((env.key_variable, env.base_url_variable))
            }
            ProviderKind::Offline => None,
        }
    }
}

impl ValueEnum for ProviderKind {
    fn value_variants<'a>() -> &'a [ProviderKind] {
        static ALL: LazyLock<Vec<ProviderKind>> = LazyLock::new(|| {
            Protocol::compiled()
                .map(ProviderKind::Adapter)
                .chain([ProviderKind::Offline])
                .collect()
        });
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            ProviderKind::Adapter(protocol) => protocol.description(),
            ProviderKind::Offline => {
                "the embedded extractive summarizer: no network, summarizes only"
            }
        };
        Some(PossibleValue::new(self.as_str()).help(help))
    }
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
            ProviderKind::value_variants()
                .iter()
                .map(|k| k.as_str())
                .collect()
        });
        let name = String::deserialize(deserializer)?;
        ProviderKind::parse(&name)
            .ok_or_else(|| serde::de::Error::unknown_variant(&name, NAMES.as_slice()))
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    (
        "max_response_mib",
        Needs::Trust("it is the limit that protects your memory from a hostile server"),
    ),
    (
        "store",
        Needs::Trust("it decides where your conversations are written"),
    ),
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
    compaction_strategy: Option<StrategyName>,
    base_url: Option<String>,
    system_prompt: Option<String>,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    first_byte_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retry_wait_secs: Option<u64>,
    retries: Option<u32>,
    lock_timeout_secs: Option<u64>,
    max_response_mib: Option<u64>,
    store: Option<String>,
}

/// `compaction_strategy` as a file spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum StrategyName {
    /// panto's own summary.
    Summary,
    /// The provider's native compaction, with panto's summary as the fallback.
    Native,
}

impl From<StrategyName> for CompactionStrategy {
    fn from(name: StrategyName) -> CompactionStrategy {
        match name {
            StrategyName::Summary => CompactionStrategy::Summary,
            StrategyName::Native => CompactionStrategy::Native,
        }
    }
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
    /// How long an append waits for another writer's append lock, in seconds.
    pub lock_timeout_secs: Setting<u64>,
    /// The cap on the size of one provider answer, MiB.
    pub max_response_mib: Setting<u64>,
    /// Where sessions are kept: `jsonl` (each SESSION a file), `jsonl:DIR`, `sqlite:PATH` or a
    /// `postgres://` URL (its password is a secret: shown only redacted).
    pub store: Setting<String>,
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

/// The directories that configuration is read from.
#[derive(Debug, Clone)]
pub(crate) struct Locations {
    /// `<config dir>/panto`, if a config dir exists on this platform.
    pub user_dir: Option<PathBuf>,
    /// The nearest `.panto` folder from the working directory up, if any.
    pub project_dir: Option<PathBuf>,
    /// Whether `user_dir` is `$PANTO_CONFIG_DIR` (else the platform's folder).
    pub user_dir_from_env: bool,
    /// The folder the project was looked for from (the working directory).
    pub start: PathBuf,
}

/// One place `panto config` says it looked for a configuration file, found or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Searched {
    /// Which layer: `user file` or `project file`.
    pub layer: &'static str,
    /// The file, when there is a folder to look in.
    pub path: Option<PathBuf>,
    /// Whether it exists and was read.
    pub found: bool,
    /// Why this path (the variable that set it, or where the project was looked for).
    pub why: String,
}

impl Locations {
    /// The project: the folder that holds the `.panto` folder.
    pub(crate) fn project_root(&self) -> Option<&Path> {
        self.project_dir.as_deref().and_then(Path::parent)
    }

    /// The trust file, `<user dir>/trusted.toml`.
    pub(crate) fn trust_file(&self) -> Option<PathBuf> {
        self.user_dir.as_ref().map(|d| d.join(TRUST_FILE))
    }

    /// Whether the project is trusted, from the trust file.
    ///
    /// # Errors
    /// A trust file that cannot be read or parsed.
    pub(crate) fn trust(&self) -> Result<Trust> {
        let Some(root) = self.project_root() else {
            return Ok(Trust::NoProject);
        };
        let trusted = match self.trust_file() {
            Some(file) => TrustFile::read(&file)?.contains(root),
            None => false,
        };
        let root = root.to_path_buf();
        Ok(if trusted {
            Trust::Trusted(root)
        } else {
            Trust::Untrusted(root)
        })
    }
}

impl Locations {
    /// Finds the user and project folders from the environment and working directory.
    pub(crate) fn discover(cwd: &Path) -> Locations {
        let (user_dir, user_dir_from_env) = match std::env::var_os("PANTO_CONFIG_DIR") {
            Some(dir) if !dir.is_empty() => (Some(PathBuf::from(dir)), true),
            _ => (
                directories::BaseDirs::new().map(|b| b.config_dir().join("panto")),
                false,
            ),
        };
        let project_dir = cwd
            .ancestors()
            .map(|dir| dir.join(".panto"))
            .find(|dir| dir.is_dir());
        Locations {
            user_dir,
            project_dir,
            user_dir_from_env,
            start: cwd.to_path_buf(),
        }
    }
}

impl Config {
    /// Resolves the configuration from files, environment and flags.
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed (the message names the file, the line and
    /// the key), or an environment value that is not valid.
    pub(crate) fn load(locations: &Locations, flags: &Flags) -> Result<Config> {
        let trust = locations.trust()?;
        let mut cfg = Config {
            provider: Setting::default(ProviderKind::Offline),
            model: Setting::default(None),
            compaction_model: Setting::default(None),
            keep_tokens: Setting::default(DEFAULT_KEEP_TOKENS),
            max_output_tokens: Setting::default(4096),
            compaction_max_output_tokens: Setting::default(8192),
            context_window: Setting::default(None),
            auto_compact: Setting::default(None),
            compaction_strategy: Setting::default(CompactionStrategy::Summary),
            base_url: Setting::default(None),
            system_prompt: Setting::default(
                "You are a helpful assistant. Answer concisely and accurately.".to_owned(),
            ),
            timeout_secs: Setting::default(600),
            connect_timeout_secs: Setting::default(10),
            first_byte_timeout_secs: Setting::default(120),
            idle_timeout_secs: Setting::default(120),
            max_retry_wait_secs: Setting::default(60),
            retries: Setting::default(3),
            lock_timeout_secs: Setting::default(10),
            max_response_mib: Setting::default(
                panto_providers::DEFAULT_MAX_RESPONSE_BYTES / (1024 * 1024),
            ),
            store: Setting::default(crate::store_value::DEFAULT.to_owned()),
            files: Vec::new(),
            prompt_layers: Vec::new(),
            trust: trust.clone(),
            ignored: Vec::new(),
            user_file: locations.user_dir.as_ref().map(|d| d.join("config.toml")),
            searched: Vec::new(),
        };
        let user = locations.user_dir.as_ref().map(|d| {
            (
                LayerFile::new(d.join("config.toml")),
                d.join("COMPACTION.md"),
            )
        });
        let project = locations
            .project_dir
            .as_ref()
            .zip(locations.project_root())
            .map(|(d, root)| {
                (
                    LayerFile::new(d.join("config.toml")).within(root),
                    d.join("COMPACTION.md"),
                )
            });
        let trusted = matches!(trust, Trust::Trusted(_));
        for (file, prompt) in [user, project].into_iter().flatten() {
            cfg.prompt_layers.push(match &file.within {
                Some(root) => LayerFile::new(prompt).within(root),
                None => LayerFile::new(prompt),
            });
            let source = match file.within {
                Some(_) => Source::ProjectFile(file.path.clone()),
                None => Source::UserFile(file.path.clone()),
            };
            let parsed = read_file(&file)?;
            cfg.searched.push(Searched {
                layer: if file.within.is_some() {
                    "project file"
                } else {
                    "user file"
                },
                path: Some(file.path.clone()),
                found: parsed.is_some(),
                why: if file.within.is_some() {
                    format!(
                        "the nearest .panto folder from {}",
                        locations.start.display()
                    )
                } else if locations.user_dir_from_env {
                    "the folder is $PANTO_CONFIG_DIR".to_owned()
                } else {
                    "the platform's configuration folder; $PANTO_CONFIG_DIR moves it".to_owned()
                },
            });
            if let Some(parsed) = parsed {
                cfg.files.push(file.path.clone());
                cfg.apply_file(parsed, &source, trusted);
            }
        }
        if locations.user_dir.is_none() {
            cfg.searched.insert(
                0,
                Searched {
                    layer: "user file",
                    path: None,
                    found: false,
                    why: "this system has no configuration folder; set $PANTO_CONFIG_DIR"
                        .to_owned(),
                },
            );
        }
        if locations.project_dir.is_none() {
            cfg.searched.push(Searched {
                layer: "project file",
                path: None,
                found: false,
                why: format!("no .panto folder in {} or above", locations.start.display()),
            });
        }
        cfg.apply_env()?;
        if let Some(v) = flags.provider {
            cfg.provider.set(v, Source::Flag("--provider"));
        }
        // The base URL variable of the provider finally chosen beats the files.
        if let Some((_, url_var)) = cfg.provider.value.env_vars()
            && let Some(v) = env(url_var)
        {
            cfg.base_url.set(Some(v), Source::Env(url_var));
        }
        cfg.apply_flags(flags);
        cfg.check()?;
        Ok(cfg)
    }

    /// The one-line notice for what an untrusted project's file set and was ignored, if any.
    pub(crate) fn trust_notice(&self) -> Option<String> {
        let (Trust::Untrusted(root), Some(first)) = (&self.trust, self.ignored.first()) else {
            return None;
        };
        let keys: Vec<&str> = self.ignored.iter().map(|i| i.key).collect();
        Some(format!(
            "ignoring {} from {}: the project is not trusted; if you trust it to choose where requests and your key go, run `panto trust {}`",
            keys.join(", "),
            first.file.display(),
            root.display()
        ))
    }

    /// Takes a file's value for `key` when its layer may set it; otherwise records it as
    /// ignored. Returns whether it was taken.
    fn admit(
        &mut self,
        key: &'static str,
        value: &dyn fmt::Display,
        src: &Source,
        trusted: bool,
    ) -> bool {
        if may_set(key, src.layer(), trusted) {
            return true;
        }
        if let Source::ProjectFile(file) = src {
            self.ignored.push(Ignored {
                key,
                value: value.to_string(),
                file: file.clone(),
            });
        }
        false
    }

    fn apply_file(&mut self, f: FileConfig, src: &Source, trusted: bool) {
        if let Some(v) = f.provider
            && self.admit("provider", &v, src, trusted)
        {
            self.provider.set(v, src.clone());
        }
        if let Some(v) = f.model {
            self.model.set(Some(v), src.clone());
        }
        if let Some(v) = f.compaction_model {
            self.compaction_model.set(Some(v), src.clone());
        }
        if let Some(v) = f.keep_tokens {
            self.keep_tokens.set(v, src.clone());
        }
        if let Some(v) = f.max_output_tokens {
            self.max_output_tokens.set(v, src.clone());
        }
        if let Some(v) = f.compaction_max_output_tokens {
            self.compaction_max_output_tokens.set(v, src.clone());
        }
        if let Some(v) = f.context_window {
            self.context_window.set(Some(v), src.clone());
        }
        if let Some(v) = f.auto_compact {
            self.auto_compact.set(Some(v), src.clone());
        }
        if let Some(v) = f.compaction_strategy {
            self.compaction_strategy.set(v.into(), src.clone());
        }
        if let Some(v) = f.base_url
            && self.admit("base_url", &v, src, trusted)
        {
            self.base_url.set(Some(v), src.clone());
        }
        if let Some(v) = f.system_prompt {
            self.system_prompt.set(v, src.clone());
        }
        if let Some(v) = f.timeout_secs {
            self.timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.connect_timeout_secs {
            self.connect_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.first_byte_timeout_secs {
            self.first_byte_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.idle_timeout_secs {
            self.idle_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.max_retry_wait_secs {
            self.max_retry_wait_secs.set(v, src.clone());
        }
        if let Some(v) = f.retries {
            self.retries.set(v, src.clone());
        }
        if let Some(v) = f.lock_timeout_secs {
            self.lock_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.max_response_mib
            && self.admit("max_response_mib", &v, src, trusted)
        {
            self.max_response_mib.set(v, src.clone());
        }
        if let Some(v) = f.store
            && self.admit("store", &crate::store_value::redacted(&v), src, trusted)
        {
            self.store.set(v, src.clone());
        }
    }

    fn apply_env(&mut self) -> Result<()> {
        if let Some(v) = env("PANTO_PROVIDER") {
            let kind = ProviderKind::parse(&v).with_context(|| {
                format!(
                    "PANTO_PROVIDER={v:?} is not a provider; use one of {}",
                    ProviderKind::names(", ")
                )
            })?;
            self.provider.set(kind, Source::Env("PANTO_PROVIDER"));
        }
        if let Some(v) = env("PANTO_MODEL") {
            self.model.set(Some(v), Source::Env("PANTO_MODEL"));
        }
        if let Some(v) = env("PANTO_STORE") {
            self.store.set(v, Source::Env("PANTO_STORE"));
        }
        Ok(())
    }

    fn apply_flags(&mut self, flags: &Flags) {
        if let Some(v) = &flags.model {
            self.model.set(Some(v.clone()), Source::Flag("--model"));
        }
        if let Some(v) = &flags.compaction_model {
            self.compaction_model
                .set(Some(v.clone()), Source::Flag("--compaction-model"));
        }
        if let Some(v) = &flags.base_url {
            self.base_url
                .set(Some(v.clone()), Source::Flag("--base-url"));
        }
        if let Some(v) = flags.keep_tokens {
            self.keep_tokens.set(v, Source::Flag("--keep-tokens"));
        }
        if let Some(v) = flags.timeout_secs {
            self.timeout_secs.set(v, Source::Flag("--timeout-secs"));
        }
        if let Some(v) = &flags.store {
            self.store.set(v.clone(), Source::Flag("--store"));
        }
        if let Some(v) = flags.auto_compact {
            self.auto_compact
                .set(Some(v), Source::Flag("--auto-compact"));
        }
    }

    /// The share of the window above which requests are compacted ahead, when on: a share
    /// of 0 turns it off (so a flag can turn off what a file turned on).
    pub(crate) fn auto_compact_share(&self) -> Option<f64> {
        self.auto_compact.value.filter(|s| *s > 0.0)
    }

    /// Checks the values a type cannot: `auto_compact` is a share of the window.
    fn check(&self) -> Result<()> {
        if let Some(share) = self.auto_compact.value
            && !(0.0..=1.0).contains(&share)
        {
            bail!(
                "`auto_compact` must be a share of the context window from 0 to 1, like auto_compact = 0.8 (0 turns it off); it is {share} ({})",
                self.auto_compact.source
            );
        }
        Ok(())
    }

    /// Each resolved value with its origin, for `panto config`.
    pub(crate) fn rows(&self) -> Vec<(&'static str, String, &Source)> {
        fn opt(v: &Option<String>) -> String {
            v.clone().unwrap_or_else(|| "(unset)".to_owned())
        }
        vec![
            (
                "provider",
                self.provider.value.to_string(),
                &self.provider.source,
            ),
            ("model", opt(&self.model.value), &self.model.source),
            (
                "compaction_model",
                opt(&self.compaction_model.value),
                &self.compaction_model.source,
            ),
            (
                "keep_tokens",
                self.keep_tokens.value.to_string(),
                &self.keep_tokens.source,
            ),
            (
                "max_output_tokens",
                self.max_output_tokens.value.to_string(),
                &self.max_output_tokens.source,
            ),
            (
                "compaction_max_output_tokens",
                self.compaction_max_output_tokens.value.to_string(),
                &self.compaction_max_output_tokens.source,
            ),
            (
                "context_window",
                opt(&self.context_window.value.map(|w| w.to_string())),
                &self.context_window.source,
            ),
            (
                "auto_compact",
                self.auto_compact_share()
                    .map_or_else(|| "off".to_owned(), |s| s.to_string()),
                &self.auto_compact.source,
            ),
            (
                "compaction_strategy",
                self.compaction_strategy.value.as_str().to_owned(),
                &self.compaction_strategy.source,
            ),
            ("base_url", opt(&self.base_url.value), &self.base_url.source),
            (
                "system_prompt",
                format!("{:?}", self.system_prompt.value),
                &self.system_prompt.source,
            ),
            (
                "timeout_secs",
                self.timeout_secs.value.to_string(),
                &self.timeout_secs.source,
            ),
            (
                "connect_timeout_secs",
                self.connect_timeout_secs.value.to_string(),
                &self.connect_timeout_secs.source,
            ),
            (
                "first_byte_timeout_secs",
                self.first_byte_timeout_secs.value.to_string(),
                &self.first_byte_timeout_secs.source,
            ),
            (
                "idle_timeout_secs",
                self.idle_timeout_secs.value.to_string(),
                &self.idle_timeout_secs.source,
            ),
            (
                "max_retry_wait_secs",
                self.max_retry_wait_secs.value.to_string(),
                &self.max_retry_wait_secs.source,
            ),
            (
                "retries",
                self.retries.value.to_string(),
                &self.retries.source,
            ),
            (
                "lock_timeout_secs",
                self.lock_timeout_secs.value.to_string(),
                &self.lock_timeout_secs.source,
            ),
            (
                "max_response_mib",
                self.max_response_mib.value.to_string(),
                &self.max_response_mib.source,
            ),
            (
                "store",
                crate::store_value::redacted(&self.store.value),
                &self.store.source,
            ),
        ]
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads and parses one layer file; `None` when it does not exist. The file is read with
/// `read_layer_file`, so a project's file that links out of the project is refused before it
/// is read, and a parse error can only quote a file inside the project (or the user's own).
fn read_file(file: &LayerFile) -> Result<Option<FileConfig>> {
    let path = &file.path;
    let Some(text) = read_layer_file(file).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot read the configuration file: {}",
            path.display(),
            e.reason
        )
    })?
    else {
        return Ok(None);
    };
    parse_toml(path, &text).map(Some)
}

/// Parses a TOML file, naming the file, line and column of an error, in panto's words for the
/// mistakes people make in a configuration file (an unknown or misspelt key, a value of the
/// wrong kind), with the parser's own words as the cause.
fn parse_toml<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    toml::from_str::<T>(text).map_err(|e| {
        let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
        let what = e.message().trim_end_matches('\n');
        let key = e
            .span()
            .and_then(|s| text[..s.start.min(text.len())].lines().last())
            .and_then(|l| l.split_once('='))
            .map(|(k, _)| k.trim().trim_matches('"').to_owned());
        let what = match explain_value_error(what, key.as_deref()) {
            // The parser's list of keys adds nothing to the suggestion.
            Some(plain) if what.starts_with("unknown field") => plain,
            Some(plain) => format!("{plain} (the parser said: {what})"),
            None => what.to_owned(),
        };
        if line > 0 {
            anyhow::anyhow!("{}: line {line}, column {col}: {what}", path.display())
        } else {
            anyhow::anyhow!("{}: {what}", path.display())
        }
    })
}

/// A configuration file's mistake in panto's words, from the parser's message: an unknown key
/// (with the nearest known one), a number or a text where the other was due, a provider that
/// does not exist. `key` is the key of the line the error points at, when there is one.
pub(crate) fn explain_value_error(message: &str, key: Option<&str>) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let unknown = rest.split('`').next().unwrap_or(rest);
        return Some(match nearest_key(unknown) {
            Some(known) => format!("unknown key `{unknown}`; did you mean `{known}`?"),
            None => format!(
                "unknown key `{unknown}`; the keys are {}",
                KEYS.iter()
                    .map(|(k, _)| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let key = key?;
    // The value as the file wrote it: `string "abc"` is "abc", ``integer `-5` `` is -5.
    let found = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|r| r.split(", expected").next())
        .map(|f| {
            f.split_once(' ')
                .filter(|(_, v)| v.starts_with(['"', '`']))
                .map_or(f, |(_, v)| v)
                .trim_matches('`')
        });
    if message.ends_with("expected u64") || message.ends_with("expected u32") {
        let example = match key {
            "keep_tokens" => "20000",
            k if k.ends_with("_secs") => "60",
            "max_response_mib" => "64",
            "retries" => "3",
            _ => "8192",
        };
        return Some(format!(
            "`{key}` must be a whole number, like {key} = {example}{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if message.ends_with("expected f64") {
        return Some(format!(
            "`{key}` must be a number, like {key} = 0.8{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if message.ends_with("expected a string") {
        return Some(format!(
            "`{key}` must be text in quotes, like {key} = \"...\"{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if key == "provider" && message.starts_with("unknown variant `") {
        return Some(format!(
            "`provider` must be one of {}",
            ProviderKind::names(", ")
        ));
    }
    None
}

/// The known key nearest to `unknown` by edit distance, when it is near enough to be a typo.
fn nearest_key(unknown: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|(k, _)| (*k, edit_distance(unknown, k)))
        .filter(|(k, d)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| k)
}

/// The Levenshtein distance of two short strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The trust file: the projects whose `.panto/config.toml` may set the keys that need trust.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustFile {
    /// The trusted projects, as absolute paths with every link resolved.
    #[serde(default)]
    trusted: Vec<PathBuf>,
}

impl TrustFile {
    /// Reads the trust file; an empty record when it does not exist.
    ///
    /// # Errors
    /// A file that cannot be read or parsed (naming its line).
    pub(crate) fn read(path: &Path) -> Result<TrustFile> {
        let text = read_layer_file(&LayerFile::new(path)).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot read the trust file: {}",
                path.display(),
                e.reason
            )
        })?;
        match text {
            Some(text) => parse_toml(path, &text),
            None => Ok(TrustFile::default()),
        }
    }

    /// Whether `project` is trusted: its real path (links resolved) is recorded.
    pub(crate) fn contains(&self, project: &Path) -> bool {
        match std::fs::canonicalize(project) {
            Ok(real) => self.trusted.contains(&real),
            Err(_) => false,
        }
    }

    /// Records `project` (a real path); false when it was already recorded.
    pub(crate) fn add(&mut self, project: PathBuf) -> bool {
        if self.trusted.contains(&project) {
            return false;
        }
        self.trusted.push(project);
        true
    }

    /// Removes `project`; false when it was not recorded.
    pub(crate) fn remove(&mut self, project: &Path) -> bool {
        let before = self.trusted.len();
        self.trusted.retain(|t| t != project);
        self.trusted.len() != before
    }

    /// The file's text.
    ///
    /// # Errors
    /// A recorded path that is not UTF-8 (TOML cannot hold it).
    pub(crate) fn render(&self) -> Result<String> {
        let mut out = String::from(
            "# Projects whose .panto/config.toml may choose where requests, and your API key, go\n\
             # (provider, base_url, max_response_mib). Written by `panto trust DIR`; `panto trust\n\
             # --revoke DIR` removes one. See docs/trust.md in the panto repository.\n\
             trusted = [\n",
        );
        for p in &self.trusted {
            let text = p
                .to_str()
                .with_context(|| format!("{}: the path is not UTF-8", p.display()))?;
            out.push_str(&format!("    {},\n", toml::Value::String(text.to_owned())));
        }
        out.push_str("]\n");
        Ok(out)
    }

    /// Writes the trust file: a new file (mode 0600, in a folder made 0700 when missing)
    /// renamed over the old one, so a crash leaves the old record or the new one, whole.
    ///
    /// # Errors
    /// When the folder or the file cannot be written.
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        let text = self.render()?;
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let tmp = dir.join(format!(".{TRUST_FILE}.{}.tmp", std::process::id()));
        let written =
            write_private(&tmp, text.as_bytes()).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            bail!("{}: cannot write the trust file: {e}", path.display());
        }
        Ok(())
    }
}

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

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

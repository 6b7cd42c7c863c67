//! Layered configuration: defaults, the user file, the project file, the environment, flags.
//!
//! Files: the user level is `<platform config dir>/panto/config.toml` (`$PANTO_CONFIG_DIR`
//! replaces `<platform config dir>/panto` when set); the project level is `.panto/config.toml`
//! in the current directory or its nearest ancestor that has a `.panto` folder. Later wins:
//! defaults < user file < project file < environment < flags. Every resolved value remembers
//! where it came from, for `panto config`.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// Which provider adapter to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions and every OpenAI-compatible server.
    Openai,
    /// OpenAI Responses.
    OpenaiResponses,
    /// Google Gemini.
    Gemini,
    /// The embedded extractive summarizer: no network, summarizes only.
    Offline,
}

impl ProviderKind {
    /// The name used in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Offline => "offline",
        }
    }

    /// Parses a flag or environment value.
    pub fn parse(s: &str) -> Option<ProviderKind> {
        Some(match s {
            "anthropic" => ProviderKind::Anthropic,
            "openai" => ProviderKind::Openai,
            "openai-responses" => ProviderKind::OpenaiResponses,
            "gemini" => ProviderKind::Gemini,
            "offline" => ProviderKind::Offline,
            _ => return None,
        })
    }

    /// The environment variables holding this provider's key and base URL.
    pub fn env_vars(self) -> Option<(&'static str, &'static str)> {
        match self {
            ProviderKind::Anthropic => Some(("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")),
            ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                Some(("OPENAI_API_KEY", "OPENAI_BASE_URL"))
            }
            ProviderKind::Gemini => Some(("GEMINI_API_KEY", "GEMINI_BASE_URL")),
            ProviderKind::Offline => None,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
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
pub struct Setting<T> {
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
pub struct FileConfig {
    provider: Option<ProviderKind>,
    model: Option<String>,
    compaction_model: Option<String>,
    keep_tokens: Option<u64>,
    max_output_tokens: Option<u32>,
    compaction_max_output_tokens: Option<u32>,
    context_window: Option<u64>,
    base_url: Option<String>,
    system_prompt: Option<String>,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    first_byte_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retry_wait_secs: Option<u64>,
    retries: Option<u32>,
    lock_timeout_secs: Option<u64>,
}

/// Values given on the command line (`None` when the flag was not used).
#[derive(Debug, Default, Clone)]
pub struct Flags {
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
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
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
    /// The layer files that exist, in order (user, project).
    pub files: Vec<PathBuf>,
    /// Where COMPACTION.md overrides are looked for, in order (user, project).
    pub prompt_paths: Vec<PathBuf>,
}

/// Default keep-verbatim budget, tokens.
pub const DEFAULT_KEEP_TOKENS: u64 = 20_000;

/// The directories that configuration is read from.
#[derive(Debug, Clone)]
pub struct Locations {
    /// `<config dir>/panto`, if a config dir exists on this platform.
    pub user_dir: Option<PathBuf>,
    /// The nearest `.panto` folder from the working directory up, if any.
    pub project_dir: Option<PathBuf>,
}

impl Locations {
    /// Finds the user and project folders from the environment and working directory.
    pub fn discover(cwd: &Path) -> Locations {
        let user_dir = match std::env::var_os("PANTO_CONFIG_DIR") {
            Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
            _ => directories::BaseDirs::new().map(|b| b.config_dir().join("panto")),
        };
        let project_dir = cwd
            .ancestors()
            .map(|dir| dir.join(".panto"))
            .find(|dir| dir.is_dir());
        Locations {
            user_dir,
            project_dir,
        }
    }
}

impl Config {
    /// Resolves the configuration from files, environment and flags.
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed (the message names the file, the line and
    /// the key), or an environment value that is not valid.
    pub fn load(locations: &Locations, flags: &Flags) -> Result<Config> {
        let mut cfg = Config {
            provider: Setting::default(ProviderKind::Offline),
            model: Setting::default(None),
            compaction_model: Setting::default(None),
            keep_tokens: Setting::default(DEFAULT_KEEP_TOKENS),
            max_output_tokens: Setting::default(4096),
            compaction_max_output_tokens: Setting::default(8192),
            context_window: Setting::default(None),
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
            files: Vec::new(),
            prompt_paths: Vec::new(),
        };
        let layers = [
            locations
                .user_dir
                .as_ref()
                .map(|d| (d.clone(), Source::UserFile(d.join("config.toml")))),
            locations
                .project_dir
                .as_ref()
                .map(|d| (d.clone(), Source::ProjectFile(d.join("config.toml")))),
        ];
        for (dir, source) in layers.into_iter().flatten() {
            cfg.prompt_paths.push(dir.join("COMPACTION.md"));
            let path = dir.join("config.toml");
            if let Some(file) = read_file(&path)? {
                cfg.files.push(path);
                cfg.apply_file(file, &source);
            }
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
        Ok(cfg)
    }

    fn apply_file(&mut self, f: FileConfig, src: &Source) {
        if let Some(v) = f.provider {
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
        if let Some(v) = f.base_url {
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
    }

    fn apply_env(&mut self) -> Result<()> {
        if let Some(v) = env("PANTO_PROVIDER") {
            let kind = ProviderKind::parse(&v).with_context(|| {
                format!("PANTO_PROVIDER={v:?} is not a provider; use one of {PROVIDERS}")
            })?;
            self.provider.set(kind, Source::Env("PANTO_PROVIDER"));
        }
        if let Some(v) = env("PANTO_MODEL") {
            self.model.set(Some(v), Source::Env("PANTO_MODEL"));
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
    }

    /// Each resolved value with its origin, for `panto config`.
    pub fn rows(&self) -> Vec<(&'static str, String, &Source)> {
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
        ]
    }
}

const PROVIDERS: &str = "anthropic, openai, openai-responses, gemini, offline";

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads one layer file; `None` when it does not exist.
fn read_file(path: &Path) -> Result<Option<FileConfig>> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!(
            "{}: cannot read the configuration file: {e}",
            path.display()
        ),
    };
    let text = String::from_utf8(text)
        .map_err(|_| anyhow::anyhow!("{}: the configuration file is not UTF-8", path.display()))?;
    match toml::from_str::<FileConfig>(&text) {
        Ok(cfg) => Ok(Some(cfg)),
        Err(e) => {
            let (line, col) = e.span().map(|s| line_col(&text, s.start)).unwrap_or((0, 0));
            let what = e.message().trim_end_matches('\n');
            if line > 0 {
                bail!("{}: line {line}, column {col}: {what}", path.display())
            }
            bail!("{}: {what}", path.display())
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

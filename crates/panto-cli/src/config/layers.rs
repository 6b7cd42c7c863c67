//! Resolving the `Config`: defaults, then each layer in turn (files, environment, flags),
//! each file's keys admitted only as far as the layer may set them.

use std::fmt;

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use panto_compact::{CompactionStrategy, LayerFile};
use panto_provider::CacheTtl;

use super::file::read_file;
use super::{
    Config, DEFAULT_KEEP_TOKENS, FileConfig, Flags, Ignored, Locations, ProviderKind, Searched,
    Setting, Source, Trust, may_set,
};

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
            store_pool_size: Setting::default(4),
            store_connect_timeout_secs: Setting::default(10),
            store_statement_timeout_secs: Setting::default(30),
            store_reconnect_secs: Setting::default(30),
            max_response_mib: Setting::default(
                panto_providers::DEFAULT_MAX_RESPONSE_BYTES / (1024 * 1024),
            ),
            store: Setting::default(crate::store_value::DEFAULT.to_owned()),
            prompt_cache: Setting::default(true),
            cache_ttl: Setting::default(CacheTtl::Short),
            prices: Setting::default(BTreeMap::new()),
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
            self.compaction_strategy.set(v, src.clone());
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
        if let Some(v) = f.store_pool_size {
            self.store_pool_size.set(v, src.clone());
        }
        if let Some(v) = f.store_connect_timeout_secs {
            self.store_connect_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.store_statement_timeout_secs {
            self.store_statement_timeout_secs.set(v, src.clone());
        }
        if let Some(v) = f.store_reconnect_secs {
            self.store_reconnect_secs.set(v, src.clone());
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
        if let Some(v) = f.prompt_cache {
            self.prompt_cache.set(v, src.clone());
        }
        if let Some(v) = f.cache_ttl {
            self.cache_ttl.set(v.into(), src.clone());
        }
        if let Some(v) = f.prices {
            // Each model's price replaces the one an earlier layer gave; the others stay.
            let mut merged = std::mem::take(&mut self.prices.value);
            merged.extend(v);
            self.prices.set(merged, src.clone());
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
        if let Some(v) = flags.compaction_strategy {
            self.compaction_strategy
                .set(v, Source::Flag("--compaction-strategy"));
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
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

//! Which provider answers: `ProviderKind`, its names, parsing and help text.

use std::fmt;
use std::sync::LazyLock;

use anyhow::Result;
use clap::ValueEnum;
use clap::builder::PossibleValue;
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
        crate::lists::listed(&names, last)
    }

    /// The variables that hold the keys of every provider, each once, in the order of the
    /// providers: `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY`.
    pub(crate) fn key_variables() -> Vec<&'static str> {
        ProviderKind::variables(|(key, _)| key)
    }

    /// The variables that set the base URLs, each once, in the order of the providers.
    #[cfg(test)]
    pub(crate) fn base_url_variables() -> Vec<&'static str> {
        ProviderKind::variables(|(_, base_url)| base_url)
    }

    /// One of [`ProviderKind::env_vars`] of every provider, each variable once.
    fn variables(pick: fn((&'static str, &'static str)) -> &'static str) -> Vec<&'static str> {
        let mut vars: Vec<&'static str> = Vec::new();
        for var in ProviderKind::value_variants()
            .iter()
            .filter_map(|k| k.env_vars())
            .map(pick)
        {
            if !vars.contains(&var) {
                vars.push(var);
            }
        }
        vars
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

//! How a command's failure is told: compaction errors as bad input or failures, with a hint
//! saying what to do next.

use anyhow::anyhow;
use panto_compact::{AttemptFailure, CompactError, Conflict, StoreError};
use panto_provider::{About, ProviderError, Wait};

use crate::bad_input;
use crate::config::{Config, Setting, Source};

use super::user_config_file;

/// Whether another writer's append made one of ours fail, anywhere in `e`'s chain.
fn is_conflict(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_conflict)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Marks a failure that sending the same conversation again cannot mend (a key, an account, a
/// request or a model the provider refuses, a conversation too large even after compacting):
/// the chat does not offer `/retry` after it. Its text is empty, so the chain printer
/// (`ui::error_text`) leaves it out.
#[derive(Debug)]
pub(crate) struct Hopeless;

impl std::fmt::Display for Hopeless {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

/// Whether sending the same conversation again could succeed after `e`.
pub(crate) fn retry_helps(e: &CompactError) -> bool {
    if matches!(
        e,
        CompactError::ExceedsWindow { .. }
            | CompactError::OverflowNoProgress { .. }
            | CompactError::OverflowAfterCompaction { .. }
            | CompactError::OverflowCompactionFailed { .. }
    ) {
        return false;
    }
    !matches!(
        root_cause(e),
        Some(
            ProviderError::Authentication { .. }
                | ProviderError::QuotaExceeded { .. }
                | ProviderError::InvalidRequest { .. }
                | ProviderError::ModelNotFound { .. }
        )
    )
}

/// Compaction errors about the prompt files are bad input; the rest are failures, with a hint
/// saying what to do next when the cause is clear.
pub(crate) fn failure(e: CompactError, config: &Config) -> anyhow::Error {
    match e {
        CompactError::PromptUnreadable { .. } | CompactError::PromptEmpty { .. } => bad_input(e),
        other => {
            // An answer cut short is said in plain words; the protocol's are the cause.
            let text = match root_cause(&other) {
                Some(p) if panto_providers::cut_short(p) => {
                    let words = p.to_string();
                    let cause = words
                        .split_once(panto_providers::CAUSE)
                        .map_or(words.as_str(), |(_, c)| c);
                    format!(
                        "the connection closed before the reply finished, so nothing of it was kept{}{cause}",
                        panto_providers::CAUSE
                    )
                }
                _ => other.to_string(),
            };
            match hint(&other, config) {
                Some(hint) => anyhow!("{text}\nhint: {hint}"),
                None => anyhow!(text),
            }
        }
    }
}

/// The provider error at the root of a compaction error, if any.
fn root_cause(e: &CompactError) -> Option<&ProviderError> {
    match e {
        CompactError::Provider(p) | CompactError::OverflowAfterCompaction { error: p, .. } => {
            Some(p)
        }
        CompactError::Compaction {
            cause: AttemptFailure::Provider(p),
            ..
        } => Some(p),
        CompactError::BothModelsFailed { second, .. } => match second.as_ref() {
            AttemptFailure::Provider(p) => Some(p),
            _ => None,
        },
        CompactError::OverflowCompactionFailed { compaction, .. } => root_cause(compaction),
        _ => None,
    }
}

/// A setting's value and where it came from, for a hint: `1500, user file …`, or `4096, the
/// default; set it in …` with the user's configuration file.
fn setting_and_source(setting: &Setting<u32>, config: &Config) -> String {
    match &setting.source {
        Source::Default => format!(
            "{}, the default; set it in {}",
            setting.value,
            user_config_file(config)
        ),
        source => format!("{}, {source}", setting.value),
    }
}

/// The hint of a request too large for the model's window, when `e` is one.
fn window_hint(e: &CompactError, config: &Config) -> Option<String> {
    if e.reply_room_overflows() {
        return Some(format!(
            "the request fits without its reply's room: a smaller `max_output_tokens` (now {}) leaves it room, or use a model with a larger context window",
            setting_and_source(&config.max_output_tokens, config)
        ));
    }
    if let CompactError::ExceedsWindow {
        by_clearing: true, ..
    }
    | CompactError::OverflowNoProgress {
        by_clearing: true, ..
    }
    | CompactError::OverflowAfterCompaction {
        by_clearing: true, ..
    } = e
    {
        return Some(format!(
            "`compaction_strategy = \"tiered\"` (in {}, or `--compaction-strategy tiered`) summarizes what clearing leaves when clearing is not enough",
            user_config_file(config)
        ));
    }
    if let CompactError::ExceedsWindow { window, .. } = e {
        return Some(format!(
            "shorten the newest message, or use a model with a larger context window; {}",
            if window.source == panto_compact::WindowSource::Configured {
                format!(
                    "if the window is larger than {}, raise `context_window` (in {})",
                    window.tokens,
                    user_config_file(config)
                )
            } else {
                format!(
                    "if the window of {} tokens is out of date, `panto window --forget` forgets it",
                    window.tokens
                )
            }
        ));
    }
    if let CompactError::OverflowNoProgress {
        newest_turn_alone, ..
    } = e
    {
        return Some(if *newest_turn_alone {
            "shorten the newest message, or use a model with a larger context window".to_owned()
        } else {
            "use a model with a larger context window".to_owned()
        });
    }
    if let CompactError::OverflowCompactionFailed { compaction, .. } = e
        && matches!(
            compaction.as_ref(),
            CompactError::NoRoom(_) | CompactError::FoldOverflow { .. }
        )
    {
        return Some(format!(
            "a shorter COMPACTION.md (user or .panto/), a smaller `compaction_max_output_tokens` (in {}), or a compaction_model with a larger window leaves more room",
            user_config_file(config)
        ));
    }
    if let CompactError::OverflowAfterCompaction { .. } = e {
        if e.input_alone_overflows() {
            return Some(
                "the newest message may be too large on its own: shorten it, or use a model with a larger context window".to_owned(),
            );
        }
        return Some(format!(
            "the newest message may be too large on its own, or the reply's room beside it: shorten it, lower `max_output_tokens` (now {}), or use a model with a larger context window",
            setting_and_source(&config.max_output_tokens, config)
        ));
    }
    None
}

fn hint(e: &CompactError, config: &Config) -> Option<String> {
    let kind = config.provider.value;
    let (key_var, url_var) = kind.env_vars().unwrap_or(("", ""));
    if let Some(hint) = window_hint(e, config) {
        return Some(hint);
    }
    if let Some(hint) = crate::stores::store_hint(e) {
        return Some(hint);
    }
    if let Some(hint) = conflict_hint(e) {
        return Some(hint.to_owned());
    }
    Some(match root_cause(e)? {
        ProviderError::Authentication { .. } => {
            match std::env::var_os(key_var).filter(|v| !v.is_empty()) {
                Some(_) => format!("check the key in {key_var} (and that it belongs to this provider)"),
                None => format!("{key_var} is not set (or is empty): set it to this provider's key"),
            }
        }
        ProviderError::Connection { message }
            if message.starts_with(panto_providers::CLOSED_EARLY) =>
        {
            return None;
        }
        ProviderError::Connection { message } => {
            let url = config
                .base_url
                .value
                .as_deref()
                .unwrap_or("the provider's API");
            let check = if message.contains("TLS handshake") {
                format!(
                    "check that {url} serves HTTPS (a local server usually wants an http:// URL)"
                )
            } else if message.contains("(DNS)") {
                format!("check the host name in {url}")
            } else {
                format!("check that the server at {url} is running")
            };
            format!(
                "{check}; another URL: --base-url URL, {url_var}, or `base_url = \"URL\"` in {}",
                user_config_file(config)
            )
        }
        ProviderError::ModelNotFound { .. } => format!(
            "check the model name: --model NAME (or /model NAME in a chat), --compaction-model NAME, or `model = \"NAME\"` in {}",
            user_config_file(config)
        ),
        ProviderError::Timeout { .. } => format!(
            "try again, or raise `timeout_secs` in {} (or pass --timeout-secs)",
            user_config_file(config)
        ),
        ProviderError::WaitExpired { wait, .. } => wait_hint(*wait, config),
        ProviderError::RateLimited {
            retry_after: Some(asked),
            ..
        } if asked.as_secs() > config.max_retry_wait_secs.value => format!(
            "the provider asked to be retried in {}, longer than panto waits (`max_retry_wait_secs` = {} s); try again later",
            About(*asked),
            config.max_retry_wait_secs.value
        ),
        ProviderError::RateLimited { .. } => "wait a moment and try again".to_owned(),
        ProviderError::QuotaExceeded { .. } => "the provider's account has no quota or credit left for this request: check the account's plan and billing (trying again will not help until they change)".to_owned(),
        _ => return None,
    })
}

/// What to do after another writer's append made a turn or a compaction fail, by what of it
/// is stored; `None` when no other writer's append was the cause.
fn conflict_hint(e: &CompactError) -> Option<&'static str> {
    let Some(conflict) = e.conflict() else {
        return is_conflict(e).then_some(
            "another writer appended to this session meanwhile, so nothing of this was written; run the command again to continue from the session as it is now",
        );
    };
    Some(match conflict {
        Conflict::NotStored => {
            "another writer appended to this session first, so your message was not stored and nothing was sent; run the command again to send it to the session as it is now"
        }
        Conflict::ReplyLost => {
            "another writer appended to this session while panto waited for the model; to keep messages from interleaving, nothing of this answer was written. Your message stays in the session: the same `panto send` again answers it without storing it twice (in a chat, /retry)"
        }
        // A compaction of a turn (its prompt stored) or one asked for by hand.
        _ => {
            "another writer appended to this session while the compaction was written, so nothing of it was written (a message sent before it stays in the session: the same `panto send` again answers it without storing it twice, and /retry in a chat); run the command again to continue from the session as it is now"
        }
    })
}

/// Which setting governs a wait that expired, and its value.
fn wait_hint(wait: Wait, config: &Config) -> String {
    let (key, value, what) = match wait {
        Wait::Connect => (
            "connect_timeout_secs",
            config.connect_timeout_secs.value,
            "connecting",
        ),
        Wait::FirstByte => (
            "first_byte_timeout_secs",
            config.first_byte_timeout_secs.value,
            "the start of a streamed answer",
        ),
        Wait::Idle => (
            "idle_timeout_secs",
            config.idle_timeout_secs.value,
            "the silence between stream events (keep-alive pings do not count)",
        ),
        _ => (
            "timeout_secs",
            config.timeout_secs.value,
            "the whole request, retries included",
        ),
    };
    let flag = if wait == Wait::Request {
        " or --timeout-secs"
    } else {
        ""
    };
    format!(
        "`{key}` ({value} s) bounds {what}; raise it in {}{flag} for a slower model or server",
        user_config_file(config)
    )
}

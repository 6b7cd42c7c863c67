//! The resolved values with their origins, as `panto config` lists them.

use super::{Config, Source};

impl Config {
    /// The models with a price, or `(none)`.
    fn price_list(&self) -> String {
        if self.prices.value.is_empty() {
            return "(none)".to_owned();
        }
        let models: Vec<&str> = self.prices.value.keys().map(String::as_str).collect();
        models.join(", ")
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
                "store_pool_size",
                self.store_pool_size.value.to_string(),
                &self.store_pool_size.source,
            ),
            (
                "store_connect_timeout_secs",
                self.store_connect_timeout_secs.value.to_string(),
                &self.store_connect_timeout_secs.source,
            ),
            (
                "store_statement_timeout_secs",
                self.store_statement_timeout_secs.value.to_string(),
                &self.store_statement_timeout_secs.source,
            ),
            (
                "store_reconnect_secs",
                self.store_reconnect_secs.value.to_string(),
                &self.store_reconnect_secs.source,
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
            (
                "prompt_cache",
                self.prompt_cache.value.to_string(),
                &self.prompt_cache.source,
            ),
            (
                "cache_ttl",
                self.cache_ttl.value.as_str().to_owned(),
                &self.cache_ttl.source,
            ),
            ("prices", self.price_list(), &self.prices.source),
        ]
    }
}

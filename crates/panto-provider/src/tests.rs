//! Unit tests of the error messages: durations for people, rate limits, quotas, named
//! waits and the token numbers of an overflow.

use std::time::Duration;

use crate::{About, ProviderError, TokenNumbers, Wait};

#[test]
fn durations_read_in_their_largest_sensible_unit() {
    let cases = [
        (Duration::from_millis(300), "0.3 s"),
        (Duration::from_secs(4), "4 s"),
        (Duration::from_millis(4_000), "4 s"),
        (Duration::from_secs(60), "60 s"),
        (Duration::from_secs(89), "89 s"),
        (Duration::from_secs(240), "about 4 min"),
        (Duration::from_secs(3600), "about 60 min"),
        (Duration::from_secs(3 * 3600), "about 3 h"),
        (Duration::from_secs(2_300_118_534), "about 26622 days"),
    ];
    for (duration, text) in cases {
        assert_eq!(About(duration).to_string(), text, "{duration:?}");
    }
}

#[test]
fn a_rate_limit_says_when_to_retry_first() {
    let error = ProviderError::RateLimited {
        message: "Rate limit reached".into(),
        retry_after: Some(Duration::from_secs(3600)),
    };
    assert_eq!(
        error.to_string(),
        "rate limited; retry in about 60 min: Rate limit reached"
    );
    let error = ProviderError::RateLimited {
        message: "slow down".into(),
        retry_after: None,
    };
    assert_eq!(error.to_string(), "rate limited: slow down");
}

#[test]
fn a_quota_or_billing_error_is_not_worth_retrying() {
    let error = ProviderError::QuotaExceeded {
        message: "You exceeded your current quota, please check your plan and billing details."
            .into(),
    };
    assert!(!error.is_transient());
    assert!(!error.is_context_overflow());
    assert_eq!(
        error.to_string(),
        "quota or billing limit reached: You exceeded your current quota, please check your plan and billing details."
    );
    // A rate limit is, however long it asks to wait (the transport decides against long waits).
    let rate = ProviderError::RateLimited {
        message: "slow down".into(),
        retry_after: None,
    };
    assert!(rate.is_transient());
}

#[test]
fn an_expired_wait_names_itself_and_its_bound() {
    let error = ProviderError::WaitExpired {
        wait: Wait::Idle,
        after: Duration::from_secs(120),
        message: "the stream went silent".into(),
    };
    assert_eq!(
        error.to_string(),
        "timed out: the stream went silent (idle wait, 120 s)"
    );
}

#[test]
fn only_the_connect_wait_is_worth_retrying() {
    let expired = |wait| ProviderError::WaitExpired {
        wait,
        after: Duration::from_secs(1),
        message: String::new(),
    };
    assert!(expired(Wait::Connect).is_transient());
    for wait in [Wait::FirstByte, Wait::Idle, Wait::Request] {
        assert!(!expired(wait).is_transient(), "{wait}");
    }
}

#[test]
fn extra_body_fields_merge_key_by_key() {
    use serde_json::json;
    let options = crate::RequestOptions::new()
        .with_body_field("thinking", json!({"type": "enabled"}))
        .with_body_field(
            "thinking",
            json!({"block_binding": {"prefix_mismatch_behavior": "drop_block"}}),
        )
        .with_body_field("context_management", json!([{"type": "compaction"}]));
    assert_eq!(
        options.extra_body["thinking"],
        json!({"type": "enabled", "block_binding": {"prefix_mismatch_behavior": "drop_block"}})
    );
    let mut body = json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "model": "m"});
    crate::merge_json(
        &mut body,
        json!({"thinking": {"budget_tokens": 2048}, "model": "n"}),
    );
    assert_eq!(
        body,
        json!({"thinking": {"type": "enabled", "budget_tokens": 2048}, "model": "n"})
    );
}

/// A provider that implements only `complete`: no native compaction, and the forwarding
/// implementations (`&P`, `Box<P>`, `Arc<P>`) pass the question on rather than answer it.
#[test]
fn native_compaction_is_unsupported_by_default_and_forwarded() {
    use std::sync::Arc;

    use panto_model::{Message, RawJson};

    use crate::{EventSink, NativeCompaction, Provider, Request, async_trait};

    struct Plain;
    #[async_trait]
    impl Provider for Plain {
        fn name(&self) -> &str {
            "plain"
        }
        async fn complete(&self, _: &Request, _: EventSink<'_>) -> Result<Message, ProviderError> {
            Ok(Message::assistant_text("hi"))
        }
    }
    struct Compacting;
    #[async_trait]
    impl Provider for Compacting {
        fn name(&self) -> &str {
            "compacting"
        }
        async fn complete(&self, _: &Request, _: EventSink<'_>) -> Result<Message, ProviderError> {
            Ok(Message::assistant_text("hi"))
        }
        async fn compact_natively(
            &self,
            _: &Request,
            _: Option<&str>,
            _: EventSink<'_>,
        ) -> Result<NativeCompaction, ProviderError> {
            Ok(NativeCompaction::new(
                "x",
                vec![RawJson::from_text("{}").unwrap()],
            ))
        }
    }
    let request = Request::new("m", "", vec![Message::user_text("hi")], 16);
    let runtime = async {
        let plain = Plain.compact_natively(&request, None, &mut |_| {}).await;
        assert!(
            matches!(plain, Err(ProviderError::Unsupported { message }) if message == "plain has no native compaction")
        );
        let boxed: Box<dyn Provider> = Box::new(Compacting);
        assert!(
            boxed
                .compact_natively(&request, None, &mut |_| {})
                .await
                .is_ok()
        );
        let shared: Arc<dyn Provider> = Arc::new(Compacting);
        // Through `&P` of `Arc<P>`: both forwarding implementations.
        let by_ref = Box::new(&shared) as Box<dyn Provider + '_>;
        assert!(
            by_ref
                .compact_natively(&request, None, &mut |_| {})
                .await
                .is_ok()
        );
    };
    block_on(runtime);
}

/// Polls a future that never waits to completion (no runtime in this crate).
fn block_on<F: Future>(future: F) -> F::Output {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

#[test]
fn a_cache_lifetime_is_named_as_a_configuration_file_names_it() {
    use crate::{CacheMode, CacheTtl, PromptCache, RequestOptions};
    for ttl in [CacheTtl::Short, CacheTtl::Long] {
        assert_eq!(CacheTtl::parse(ttl.as_str()), Some(ttl));
    }
    assert_eq!(CacheTtl::parse("24h"), None);
    assert_eq!(CacheTtl::Short.lifetime(), Duration::from_secs(300));
    assert_eq!(CacheTtl::Long.lifetime(), Duration::from_secs(3600));
    // Caching is on by default, and off says so.
    assert!(RequestOptions::new().cache.is_on());
    assert_eq!(RequestOptions::new().cache.mode, CacheMode::ReadWrite);
    assert!(!PromptCache::off().is_on());
}

#[test]
fn an_overflow_shows_the_numbers_it_stated_through_token_numbers() {
    let overflow = |input_tokens, limit| ProviderError::ContextOverflow {
        message: "prompt is too long".into(),
        numbers: TokenNumbers::new(input_tokens, limit),
    };
    let cases = [
        (Some(2_000), Some(1_600), " (2000 tokens, limit 1600)"),
        (Some(2_000), None, " (2000 tokens)"),
        (None, Some(1_600), " (limit 1600)"),
        (None, None, ""),
    ];
    for (input, limit, note) in cases {
        let error = overflow(input, limit);
        assert_eq!(
            error.to_string(),
            format!("context overflow: prompt is too long{note}")
        );
        let numbers = error.token_numbers().unwrap();
        assert_eq!(numbers, TokenNumbers::new(input, limit));
        assert_eq!(numbers.is_empty(), note.is_empty());
        assert!(!numbers.output_overflows(), "no output stated");
    }
    // The output counted against the limit is shown, and tells when it alone does not fit.
    let stated = |input, output| TokenNumbers::new(Some(input), Some(1_001)).with_output(output);
    let numbers = stated(843, Some(250));
    assert_eq!(
        numbers.to_string(),
        "843 tokens and 250 of output, limit 1001"
    );
    assert!(numbers.output_overflows());
    assert!(!stated(843, Some(158)).output_overflows(), "it fits");
    assert!(
        !stated(1_001, Some(250)).output_overflows(),
        "the input fills it"
    );
    assert!(
        !stated(1_200, Some(250)).output_overflows(),
        "the input alone is over"
    );
    assert!(!stated(843, None).output_overflows());
    assert!(stated(1_001, None).input_over_limit() && stated(1_200, Some(1)).input_over_limit());
    assert!(!stated(843, Some(250)).input_over_limit());
    assert!(
        !TokenNumbers::new(Some(2_000), None).input_over_limit(),
        "no limit stated"
    );
    assert_eq!(
        ProviderError::Unsupported {
            message: "x".into()
        }
        .token_numbers(),
        None
    );
}

//! Retry timing: reading the server's `Retry-After` hints and computing backoff delays.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::config::RetryPolicy;

/// The delay a server asked for, from `retry-after-ms` (milliseconds, sent by OpenAI and
/// Anthropic) or `Retry-After` (seconds, fractions accepted, or an HTTP date relative to
/// `now`). A date in the past gives zero.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    parse_retry_after(header("retry-after")?, now)
}

/// Parses a `Retry-After` value: delay seconds (fractions accepted) or an HTTP date.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Some(seconds) = parse_non_negative(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A finite, non-negative number no larger than a day (anything larger is a broken header).
fn parse_non_negative(value: &str) -> Option<f64> {
    let n: f64 = value.parse().ok()?;
    (n.is_finite() && (0.0..=86_400_000.0).contains(&n)).then_some(n)
}

/// The delay before retry number `retry` (0 for the first retry).
///
/// With a hint from the server, the hint; otherwise `base_delay * 2^retry`, of which the upper
/// half is jittered by `unit` (a number in `[0, 1)`). Always at most `policy.max_delay`.
pub(crate) fn delay(
    policy: &RetryPolicy,
    retry: u32,
    hint: Option<Duration>,
    unit: f64,
) -> Duration {
    let chosen = match hint {
        Some(hint) => hint,
        None => {
            let exponential = policy
                .base_delay
                .saturating_mul(2u32.saturating_pow(retry.min(31)))
                .min(policy.max_delay);
            let half = exponential / 2;
            half + half.mul_f64(unit.clamp(0.0, 1.0))
        }
    };
    chosen.min(policy.max_delay)
}

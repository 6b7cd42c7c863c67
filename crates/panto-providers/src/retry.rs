//! Retry timing: reading the server's `Retry-After` hints, computing backoff delays, and
//! deciding whether a retry fits under the cap and the request deadline.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::config::RetryPolicy;

/// The delay a server asked for, from `retry-after-ms` (milliseconds, sent by `OpenAI` and
/// Anthropic) or `Retry-After` (seconds, fractions accepted, or an HTTP date relative to
/// `now`). A date in the past gives zero.
///
/// A header split over several field lines is read as their values joined by `, ` (RFC 9110,
/// section 5.3): an HTTP date holds a comma, and some servers and proxies split it there.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| parse_non_negative(&v)) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    parse_retry_after(&header("retry-after")?, now)
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

/// Why a transient failure is not retried although retries are left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server asked for a wait longer than the policy's `max_delay`.
    AskedTooLong {
        /// What the server asked for.
        asked: Duration,
        /// The policy's cap.
        cap: Duration,
    },
    /// The delay would pass the request deadline.
    PastDeadline {
        /// The delay that would have been waited.
        delay: Duration,
        /// What is left of the deadline.
        left: Duration,
    },
}

/// The delay before retry number `retry` (0 for the first retry), or why there is none.
///
/// A server hint longer than `policy.max_delay` refuses the retry instead of being shortened:
/// sending early would only be refused again. A delay that is not shorter than `left`, what
/// remains of the request deadline, refuses it too, so retries never stretch the deadline.
pub(crate) fn next_delay(
    policy: &RetryPolicy,
    retry: u32,
    hint: Option<Duration>,
    unit: f64,
    left: Duration,
) -> Result<Duration, Refusal> {
    if let Some(asked) = hint
        && asked > policy.max_delay
    {
        return Err(Refusal::AskedTooLong {
            asked,
            cap: policy.max_delay,
        });
    }
    let delay = delay(policy, retry, hint, unit);
    if delay >= left {
        return Err(Refusal::PastDeadline { delay, left });
    }
    Ok(delay)
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

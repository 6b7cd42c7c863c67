//! The classifier as a value, for a provider of one's own: the built-in table for one protocol
//! or for none in particular ([`Classifier::generic`]), extended with the caller's rules
//! ([`CustomRule`]).
//!
//! Where a caller's rule goes keeps the table's design: a rule that answers anything but
//! [`Verdict::ContextOverflow`] is evaluated before the whole table, so it can only take an
//! answer away from "overflow"; a rule that answers [`Verdict::ContextOverflow`] is evaluated
//! right before the built-in overflow rules, after every veto (capacity, keys, quota and
//! billing, rate limits, one item too large, output limits), so no caller's wording can turn a
//! rate limit or a quota into a compaction.

use std::time::Duration;

use panto_provider::ProviderError;
use serde_json::Value;

use super::numbers::Sizes;
use super::rules::{self, Answer};
use super::signals::{Signals, normalize};
use super::{Classification, Protocol, Verdict, to_classification};

/// A caller's rule: it holds when the status is one of its statuses (when it names any), a
/// code, type, status or reason field equals one of its codes (when it names any), and the
/// message contains one of its phrases (when it names any). A rule that names nothing never
/// holds. Phrases and codes match without regard to case, backticks, quote style or spacing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CustomRule {
    /// The rule's name, reported in [`Classification::rule`].
    pub name: &'static str,
    /// What it decides.
    pub verdict: Verdict,
    /// HTTP statuses, any of which must be the answer's (none: any status).
    pub statuses: Vec<u16>,
    /// Error codes, types or reasons, one of which must be the answer's (none: any).
    pub codes: Vec<String>,
    /// Phrases, one of which the answer's message must contain (none: any message).
    pub phrases: Vec<String>,
}

impl CustomRule {
    /// A rule named `name` that decides `verdict`, holding nowhere until given a status, a
    /// code or a phrase.
    pub fn new(name: &'static str, verdict: Verdict) -> CustomRule {
        CustomRule {
            name,
            verdict,
            statuses: Vec::new(),
            codes: Vec::new(),
            phrases: Vec::new(),
        }
    }

    /// Adds a status the answer may have.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> CustomRule {
        self.statuses.push(status);
        self
    }

    /// Adds a code, type or reason the answer may carry.
    #[must_use]
    pub fn with_code(mut self, code: impl AsRef<str>) -> CustomRule {
        self.codes.push(code.as_ref().to_lowercase());
        self
    }

    /// Adds a phrase the answer's message may contain.
    #[must_use]
    pub fn with_phrase(mut self, phrase: impl AsRef<str>) -> CustomRule {
        self.phrases.push(normalize(phrase.as_ref()));
        self
    }

    fn holds(&self, status: Option<u16>, signals: &Signals) -> bool {
        let named = !self.statuses.is_empty() || !self.codes.is_empty() || !self.phrases.is_empty();
        named
            && (self.statuses.is_empty() || status.is_some_and(|s| self.statuses.contains(&s)))
            && (self.codes.is_empty() || signals.codes.iter().any(|c| self.codes.contains(c)))
            && (self.phrases.is_empty()
                || self
                    .phrases
                    .iter()
                    .any(|p| signals.text.contains(p.as_str())))
    }
}

/// The error classifier as a value: the built-in rule table for one protocol, or for a
/// server that speaks none of them exactly ([`Classifier::generic`]: every rule applies), with
/// the caller's [`CustomRule`]s placed as the module docs say.
///
/// ```
/// use panto_providers::{Classifier, CustomRule, Verdict};
///
/// // A gateway of one's own that words its overflow in its own way.
/// let classifier = Classifier::generic().with_rule(
///     CustomRule::new("gateway-overflow", Verdict::ContextOverflow)
///         .with_status(400)
///         .with_phrase("conversation no longer fits"),
/// );
/// let body = br#"{"error":{"message":"The conversation no longer fits this model."}}"#;
/// assert!(classifier.classify_response(400, None, body).is_context_overflow());
/// // The veto still wins: a 429 is a rate limit, whatever the wording.
/// assert!(!classifier.classify_response(429, None, body).is_context_overflow());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classifier {
    /// The protocol whose rules apply; `None` for every rule.
    protocol: Option<Protocol>,
    /// The caller's rules, in the order given.
    custom: Vec<CustomRule>,
}

impl Classifier {
    /// The built-in table as panto's adapter for `protocol` uses it.
    pub fn new(protocol: Protocol) -> Classifier {
        Classifier {
            protocol: Some(protocol),
            custom: Vec::new(),
        }
    }

    /// The built-in table for a server that speaks none of panto's protocols exactly: every
    /// rule applies, whichever protocol it was written for.
    pub fn generic() -> Classifier {
        Classifier::default()
    }

    /// Adds a caller's rule (after the caller's rules already added).
    #[must_use]
    pub fn with_rule(mut self, rule: CustomRule) -> Classifier {
        self.custom.push(rule);
        self
    }

    /// Classifies an HTTP error answer, as [`classify_response`](super::classify_response)
    /// does.
    pub fn classify_response(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> ProviderError {
        self.explain_response(status, retry_after, body).error
    }

    /// [`Classifier::classify_response`], also naming the rule that fired.
    pub fn explain_response(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> Classification {
        let signals = Signals::from_body(body);
        // A 2xx or 3xx status says nothing about the error; fall back on the payload's own.
        let status = if status >= 400 {
            Some(status)
        } else {
            signals.embedded_status
        };
        self.decide(status, retry_after, &signals)
    }

    /// Classifies an error inside a stream, as
    /// [`classify_stream_error`](super::classify_stream_error) does.
    pub fn classify_stream_error(&self, payload: &Value) -> ProviderError {
        self.explain_stream_error(payload).error
    }

    /// [`Classifier::classify_stream_error`], also naming the rule that fired.
    pub fn explain_stream_error(&self, payload: &Value) -> Classification {
        let signals = Signals::from_value(payload);
        self.decide(signals.embedded_status, None, &signals)
    }

    /// Recognises a 2xx JSON body that is really an error, as
    /// [`error_in_success_body`](super::error_in_success_body) does, and classifies it with
    /// this classifier.
    pub fn error_in_success_body(&self, body: &Value) -> Option<ProviderError> {
        super::is_error_body(body, 0).then(|| self.classify_stream_error(body))
    }

    fn decide(
        &self,
        status: Option<u16>,
        retry_after: Option<Duration>,
        signals: &Signals,
    ) -> Classification {
        let protocol = self.protocol.unwrap_or(Protocol::OpenAiChat);
        let answer = Answer {
            status,
            signals,
            sizes: Sizes::read(&signals.text),
            retry_after,
        };
        let custom = |overflow: bool| {
            self.custom.iter().find(|r| {
                (r.verdict == Verdict::ContextOverflow) == overflow && r.holds(status, signals)
            })
        };
        let applies = |rule: &&rules::Rule| {
            self.protocol.is_none_or(|p| rule.protocols.contains(&p)) && rule.test.holds(&answer)
        };
        let first_overflow = rules::RULES
            .iter()
            .position(|r| r.verdict == Verdict::ContextOverflow)
            .unwrap_or(rules::RULES.len());
        let (vetoes, rest) = rules::RULES.split_at(first_overflow);
        let (name, verdict) = if let Some(rule) = custom(false) {
            (rule.name, rule.verdict)
        } else if let Some(rule) = vetoes.iter().find(applies) {
            (rule.name, rule.verdict)
        } else if let Some(rule) = custom(true) {
            (rule.name, rule.verdict)
        } else {
            let rule = rest
                .iter()
                .find(applies)
                .unwrap_or(&rules::RULES[rules::RULES.len() - 1]);
            (rule.name, rule.verdict)
        };
        to_classification(
            protocol,
            status,
            retry_after,
            signals,
            answer.sizes,
            name,
            verdict,
        )
    }
}

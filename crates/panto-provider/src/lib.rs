//! The provider boundary: what panto asks a model for, what comes back, and how it fails.
//!
//! - [`Request`]: system prompt, messages (model types), model name, output limit, tools, and
//!   [`RequestOptions`] (temperature, top-p, [`ReasoningEffort`], [`ToolChoice`], and the use of
//!   the prompt cache, [`PromptCache`]).
//! - [`Provider`]: [`Provider::name`], and [`Provider::complete`], returning the assistant
//!   [`Message`] (with its usage and stop reason) or a [`ProviderError`]; text arrives through
//!   an event callback as it streams. A third method, [`Provider::compact_natively`], has a
//!   default.
//! - [`ProviderError`]: typed failures; [`ProviderError::ContextOverflow`] is the one that
//!   triggers compaction (the numbers it stated: [`TokenNumbers`]), [`ProviderError::WaitExpired`] names the [`Wait`] that ran out,
//!   [`ProviderError::QuotaExceeded`] (the account's quota or billing) is never retried.
//! - [`StreamEvent`]: what the caller hears while a request runs, text as it streams and each
//!   retry as it is scheduled ([`RetryNotice`]).
//! - [`NativeCompaction`]: what [`Provider::compact_natively`] returns when a provider
//!   summarizes a conversation itself (Anthropic, `OpenAI` Responses); the default method says
//!   it cannot.
//!
//! The design choice to know: this crate sits low, with no HTTP and no async runtime, so that
//! `panto-compact` depends on the trait and never links reqwest. The HTTP implementations live in
//! `panto-providers`. The trait is written with [`macro@async_trait`] (re-exported here), so an
//! implementer writes `async fn complete(..)`, the returned future is `Send`, and
//! `dyn Provider` works.
//!
//! ```
//! use panto_model::Message;
//! use panto_provider::{ProviderError, Request, TokenNumbers};
//!
//! let request = Request::new("a-model", "You are terse.", vec![Message::user_text("hi")], 1_024);
//! assert_eq!(request.messages.len(), 1);
//! // The one error that compaction can cure.
//! let overflow = ProviderError::ContextOverflow {
//!     message: "prompt is too long".into(),
//!     numbers: TokenNumbers::new(Some(210_000), Some(200_000)),
//! };
//! assert!(overflow.is_context_overflow());
//! ```

use std::fmt;
use std::time::Duration;

use panto_model::Message;
use serde_json::Value;

pub use async_trait::async_trait;
pub use cache::{CacheMode, CacheTtl, PromptCache};
pub use native::NativeCompaction;
use numbers::Note;
pub use numbers::TokenNumbers;
pub use options::{ReasoningEffort, RequestOptions, ToolChoice, merge_json};

mod cache;
mod native;
mod numbers;
mod options;

/// One request to a model.
///
/// Built with [`Request::new`] and the `with_*` setters; the fields stay readable and writable,
/// and new ones may be added without breaking callers.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Request {
    /// The model name, as the provider knows it.
    pub model: String,
    /// The system prompt (agent prompt, or COMPACTION.md for a compaction request).
    pub system: String,
    /// The conversation. A compaction message may lead it; each adapter renders it for its
    /// provider.
    pub messages: Vec<Message>,
    /// The most tokens the answer may have.
    pub max_output_tokens: u32,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Sampling, reasoning and tool-choice options; all unset by default.
    pub options: RequestOptions,
}

impl Request {
    /// A request with no tools and no options.
    pub fn new(
        model: impl Into<String>,
        system: impl Into<String>,
        messages: Vec<Message>,
        max_output_tokens: u32,
    ) -> Request {
        Request {
            model: model.into(),
            system: system.into(),
            messages,
            max_output_tokens,
            tools: Vec::new(),
            options: RequestOptions::default(),
        }
    }

    /// The same request offering `tools`.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Request {
        self.tools = tools;
        self
    }

    /// The same request with `options`.
    pub fn with_options(mut self, options: RequestOptions) -> Request {
        self.options = options;
        self
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model uses in its calls.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

impl ToolSpec {
    /// A tool named `name`, described by `description`, whose arguments follow `input_schema`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }
}

/// Something that happened while an answer streamed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent<'a> {
    /// More answer text.
    Text(&'a str),
    /// More reasoning text.
    Thinking(&'a str),
    /// The model began a tool call.
    ToolCall {
        /// The tool's name.
        name: &'a str,
    },
    /// An attempt failed with a transient error and the request will be sent again after a
    /// delay. Nothing of the failed attempt reached the sink.
    Retry(RetryNotice<'a>),
    /// Something the user should know about the request, in one sentence: for example that the
    /// provider refused the thinking of earlier turns as bound to a different conversation and
    /// the request was sent again without it.
    Notice(&'a str),
}

/// A retry about to happen: which one, after how long, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryNotice<'a> {
    /// This retry's number, from 1.
    pub retry: u32,
    /// How many retries the policy allows in all.
    pub max_retries: u32,
    /// How long the provider waits before sending again.
    pub delay: Duration,
    /// The failure of the attempt before it.
    pub error: &'a ProviderError,
}

impl<'a> RetryNotice<'a> {
    /// A notice of retry `retry` of `max_retries`, after `delay`, because of `error`.
    pub fn new(
        retry: u32,
        max_retries: u32,
        delay: Duration,
        error: &'a ProviderError,
    ) -> RetryNotice<'a> {
        RetryNotice {
            retry,
            max_retries,
            delay,
            error,
        }
    }
}

/// One of the named waits of a request, each with its own bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Wait {
    /// Opening the TCP (and TLS) connection.
    Connect,
    /// From sending the request to the head of a streaming answer.
    FirstByte,
    /// Between two events of a streaming answer (keep-alive pings are not events), or two
    /// chunks of a whole answer.
    Idle,
    /// The whole request, every attempt and every delay between attempts included.
    Request,
}

impl Wait {
    /// A short name: `connect`, `first-byte`, `idle` or `request`.
    pub fn as_str(self) -> &'static str {
        match self {
            Wait::Connect => "connect",
            Wait::FirstByte => "first-byte",
            Wait::Idle => "idle",
            Wait::Request => "request",
        }
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The callback that receives [`StreamEvent`]s.
pub type EventSink<'a> = &'a mut (dyn FnMut(StreamEvent<'_>) + Send);

/// A model that answers requests.
///
/// Implementations retry transient failures (rate limits, 5xx, timeouts, resets) themselves,
/// and never retry a context overflow or another 4xx answer.
///
/// **Overflow recovery depends on one answer.** panto compacts a conversation and retries only
/// when [`Provider::complete`] returns [`ProviderError::ContextOverflow`]; any other error is
/// passed to the caller untouched. A provider of your own gets the recovery panto's adapters
/// get only if it returns that variant for "the input is too large". `panto-providers` offers
/// the pieces its own adapters use, so that a custom provider behaves the same: the classifier
/// (`classify_response(protocol, status, retry_after, body)` and its siblings, which turn an
/// HTTP error answer into the right [`ProviderError`]), the wire preparation (the
/// conversation rewritten into a shape every API accepts; it keeps every thinking block) and,
/// apart from it, the rule of which thinking may be sent back to a protocol that binds thinking
/// to its prefix (`wire::thinking_replay`, which a custom provider applies itself).
///
/// Implement it with [`macro@async_trait`]:
///
/// ```
/// use panto_model::Message;
/// use panto_provider::{EventSink, Provider, ProviderError, Request, StreamEvent, async_trait};
///
/// struct Echo;
///
/// #[async_trait]
/// impl Provider for Echo {
///     fn name(&self) -> &str {
///         "echo"
///     }
///
///     async fn complete(
///         &self,
///         request: &Request,
///         events: EventSink<'_>,
///     ) -> Result<Message, ProviderError> {
///         let text = format!("{} messages", request.messages.len());
///         events(StreamEvent::Text(&text));
///         Ok(Message::assistant_text(text))
///     }
/// }
/// ```
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for messages and events, like `anthropic` or `openai`.
    fn name(&self) -> &str;

    /// Sends `request` and returns the complete assistant message, with `usage`, `model` and
    /// `stop_reason` filled where the provider reports them; `stop_reason` is normalised to the
    /// vocabulary of [`panto_model::stop_reason`] (an output cut at the limit is `max_tokens`
    /// whatever the protocol called it). Text is passed to `events` as it
    /// arrives. A stream that ends early is an error, never a shorter message.
    ///
    /// # Errors
    /// A [`ProviderError`] saying what kind of failure it was.
    async fn complete(
        &self,
        request: &Request,
        events: EventSink<'_>,
    ) -> Result<Message, ProviderError>;

    /// Asks the provider to compact `request.messages` itself (Anthropic's on-demand
    /// compaction, `OpenAI`'s `/responses/compact`), with the conversation's own system prompt
    /// and tools, and `instructions` for the summary when the user gave any. The payload it
    /// returns stands in for those messages in later requests to the same protocol.
    ///
    /// Not every provider can: the default answers [`ProviderError::Unsupported`], and panto
    /// then writes its own summary.
    ///
    /// # Errors
    /// A [`ProviderError`]; [`ProviderError::Unsupported`] when the provider has no native
    /// compaction.
    async fn compact_natively(
        &self,
        request: &Request,
        instructions: Option<&str>,
        events: EventSink<'_>,
    ) -> Result<NativeCompaction, ProviderError> {
        let _ = (request, instructions, events);
        Err(ProviderError::Unsupported {
            message: format!("{} has no native compaction", self.name()),
        })
    }
}

/// `&P`, `Box<P>` and `Arc<P>` are providers wherever `P` is: every method forwards.
macro_rules! forward {
    ($($pointer:ty),*) => {$(
        #[async_trait]
        impl<P: Provider + ?Sized> Provider for $pointer {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn complete(
                &self,
                request: &Request,
                events: EventSink<'_>,
            ) -> Result<Message, ProviderError> {
                (**self).complete(request, events).await
            }
            async fn compact_natively(
                &self,
                request: &Request,
                instructions: Option<&str>,
                events: EventSink<'_>,
            ) -> Result<NativeCompaction, ProviderError> {
                (**self)
                    .compact_natively(request, instructions, events)
                    .await
            }
        }
    )*};
}

forward!(&P, Box<P>, std::sync::Arc<P>);

/// How a request to a provider failed.
///
/// Messages are the provider's own words where it gave any; they never contain credentials.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The request is too large for the model's context window; compacting the input can help.
    #[error("context overflow: {message}{}", Note(*numbers))]
    ContextOverflow {
        /// The provider's message.
        message: String,
        /// The input size and the context limit the provider reported, each when it did.
        numbers: TokenNumbers,
    },
    /// Too many requests or tokens per unit of time (a rate limit, or a quota that refills by
    /// the minute, hour or day): the same request may succeed after a wait.
    #[error("rate limited{}: {message}", RetryIn(*retry_after))]
    RateLimited {
        /// The provider's message.
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
    },
    /// The account cannot pay for the request: its quota or credits are used up, a spending
    /// limit is reached, billing is not set up, or its plan does not include the model. Not
    /// transient: the same request fails until someone changes the account's plan or billing.
    #[error("quota or billing limit reached: {message}")]
    QuotaExceeded {
        /// The provider's message.
        message: String,
    },
    /// The key is missing, wrong or not allowed.
    #[error("authentication failed: {message}")]
    Authentication {
        /// The provider's message.
        message: String,
    },
    /// The model name is unknown to the provider.
    #[error("model not found: {message}")]
    ModelNotFound {
        /// The provider's message.
        message: String,
    },
    /// The provider rejected the request for another reason; compaction cannot help.
    #[error("invalid request (HTTP {status}): {message}")]
    InvalidRequest {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider failed (5xx, overloaded).
    #[error("server error (HTTP {status}): {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// No answer in time.
    #[error("timed out: {message}")]
    Timeout {
        /// What timed out.
        message: String,
    },
    /// A named wait ran out: connecting, the first byte, the silence between stream events, or
    /// the deadline of the whole request.
    #[error("timed out: {message} ({wait} wait, {})", Seconds(*after))]
    WaitExpired {
        /// The wait that ran out.
        wait: Wait,
        /// Its bound.
        after: Duration,
        /// What did not arrive in time.
        message: String,
    },
    /// The connection could not be made or broke.
    #[error("connection failed: {message}")]
    Connection {
        /// What went wrong.
        message: String,
    },
    /// The answer could not be understood, or a stream ended before its end.
    #[error("malformed response: {message}")]
    MalformedResponse {
        /// What was wrong with it.
        message: String,
    },
    /// The provider cannot do this at all (for example the offline summarizer asked to chat).
    #[error("unsupported: {message}")]
    Unsupported {
        /// Why.
        message: String,
    },
}

impl ProviderError {
    /// Whether compacting the conversation and retrying could help.
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, ProviderError::ContextOverflow { .. })
    }

    /// The token numbers a context overflow stated; `None` for every other error.
    pub fn token_numbers(&self) -> Option<TokenNumbers> {
        match self {
            ProviderError::ContextOverflow { numbers, .. } => Some(*numbers),
            _ => None,
        }
    }

    /// Whether the same request may succeed if simply sent again later.
    ///
    /// Of the named waits only [`Wait::Connect`] is transient: a server that accepted the
    /// request and then went silent is stuck or busy, and sending the same request again
    /// would only double the wait; once the [`Wait::Request`] deadline has passed there is no
    /// time left.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Server { .. }
                | ProviderError::Timeout { .. }
                | ProviderError::Connection { .. }
                | ProviderError::WaitExpired {
                    wait: Wait::Connect,
                    ..
                }
        )
    }
}

struct RetryIn(Option<Duration>);

impl fmt::Display for RetryIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, "; retry in {}", About(d)),
            None => Ok(()),
        }
    }
}

/// A bound in whole seconds, or tenths below ten seconds: `5 s`, `0.3 s`, `600 s`.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        if s < 10.0 && self.0.subsec_millis() != 0 {
            write!(f, "{s:.1} s")
        } else {
            write!(f, "{s:.0} s")
        }
    }
}

/// A duration for people, rounded to its largest sensible unit: `12 s`, `about 4 min`,
/// `about 60 min`, `about 3 h`, `about 26 days`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct About(pub Duration);

impl fmt::Display for About {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        if s < 90.0 {
            Seconds(self.0).fmt(f)
        } else if s < 90.0 * 60.0 {
            write!(f, "about {:.0} min", s / 60.0)
        } else if s < 48.0 * 3600.0 {
            write!(f, "about {:.0} h", s / 3600.0)
        } else {
            write!(f, "about {:.0} days", s / 86_400.0)
        }
    }
}

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;

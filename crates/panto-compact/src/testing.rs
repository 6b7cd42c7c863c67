//! Test support: a scripted fake provider and builders for provider answers.
//!
//! Enabled by the `test-support` feature, for this crate's tests and for downstream agents
//! that want to test their loops offline:
//!
//! ```
//! use std::sync::Arc;
//! use panto_compact::testing::{ScriptedProvider, overflow, reply};
//!
//! let provider = Arc::new(ScriptedProvider::new("fake"));
//! provider.push(Err(overflow(Some(210_000), Some(200_000))));
//! provider.push(Ok(reply("the summary")));
//! assert_eq!(provider.remaining(), 2);
//! ```

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use panto_model::{ContentBlock, Message, Role, Usage};
use panto_provider::{
    EventSink, Provider, ProviderError, Request, StreamEvent, TokenNumbers, async_trait,
};
use panto_size::Heuristic;
use serde_json::json;

/// A provider that answers from a queue of scripted results and records every request.
///
/// Each [`Provider::complete`] call records the request, then pops the next answer. A reply's
/// text blocks are streamed to the event sink, and its `model` is filled from the request when
/// unset. When the queue is empty the call fails with [`ProviderError::Unsupported`].
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    name: String,
    answers: Mutex<VecDeque<Result<Message, ProviderError>>>,
    requests: Mutex<Vec<Request>>,
}

impl ScriptedProvider {
    /// A provider called `name` with no answers yet.
    pub fn new(name: impl Into<String>) -> ScriptedProvider {
        ScriptedProvider {
            name: name.into(),
            ..ScriptedProvider::default()
        }
    }

    /// A provider called `name` that gives `answers` in order.
    pub fn with_answers(
        name: impl Into<String>,
        answers: impl IntoIterator<Item = Result<Message, ProviderError>>,
    ) -> ScriptedProvider {
        let p = ScriptedProvider::new(name);
        lock(&p.answers).extend(answers);
        p
    }

    /// Queues one more answer.
    pub fn push(&self, answer: Result<Message, ProviderError>) -> &ScriptedProvider {
        lock(&self.answers).push_back(answer);
        self
    }

    /// Queues a text reply.
    pub fn push_text(&self, text: impl Into<String>) -> &ScriptedProvider {
        self.push(Ok(reply(text)))
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.requests).clone()
    }

    /// How many times [`Provider::complete`] was called.
    pub fn calls(&self) -> usize {
        lock(&self.requests).len()
    }

    /// How many scripted answers are left.
    pub fn remaining(&self) -> usize {
        lock(&self.answers).len()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide the requests from the others.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(
        &self,
        request: &Request,
        events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        lock(&self.requests).push(request.clone());
        lock(&self.answers)
            .pop_front()
            .unwrap_or_else(|| {
                Err(ProviderError::Unsupported {
                    message: format!("scripted provider `{}` has no answer left", self.name),
                })
            })
            .map(|mut m| {
                if m.model.is_none() {
                    m.model = Some(request.model.as_str().into());
                }
                for block in &m.content {
                    if let ContentBlock::Text(t) = block {
                        events(StreamEvent::Text(&t.text));
                    }
                }
                m
            })
    }
}

/// An assistant reply holding `text`, stopped at `end_turn`, with a small usage record.
pub fn reply(text: impl Into<String>) -> Message {
    let mut m = Message::assistant_text(text);
    m.stop_reason = Some("end_turn".into());
    m.usage = Some(Usage::new(1_000, 100));
    m
}

/// A context-overflow error with the sizes a provider may report.
pub fn overflow(input_tokens: Option<u64>, limit: Option<u64>) -> ProviderError {
    ProviderError::ContextOverflow {
        message: "prompt is too long".to_owned(),
        numbers: TokenNumbers::new(input_tokens, limit),
    }
}

/// A server error (HTTP 500), for failures that are not overflows.
pub fn server_error() -> ProviderError {
    ProviderError::Server {
        status: 500,
        message: "internal error".to_owned(),
    }
}

/// A conversation whose request, with the system prompt `system`, is about `tokens` tokens by
/// the heuristic ruler: talk (prompts and answers of a few hundred tokens each), or, with
/// `tools`, a tool loop whose results are large (up to half of `window` each). The
/// small-window tests and sweeps build their histories with it.
#[must_use]
pub fn sized_conversation(system: &str, tokens: u64, window: u64, tools: bool) -> Vec<Message> {
    let mut out = Vec::new();
    let mut i = 0;
    while panto_size::estimate(system, "", &out).total() < tokens {
        if tools {
            let id = format!("t{i}");
            out.push(Message::user_text(format!("req-{i} look at log {i}")));
            out.push(Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text(format!("reading log {i}")),
                    ContentBlock::tool_use(&id, "read", json!({"path": format!("log{i}")})),
                ],
            ));
            let lines = usize::try_from(window / 2 / 8).unwrap_or(usize::MAX) + 10 * (i % 3);
            let body: Vec<String> = (0..lines).map(|l| format!("log {i} line {l}")).collect();
            out.push(Message::new(
                Role::User,
                vec![ContentBlock::tool_result(&id, body.join("\n"), false)],
            ));
            out.push(Message::assistant_text(format!("log {i} says it worked")));
        } else {
            let words = 40 + 30 * (i % 5);
            out.push(Message::user_text(format!(
                "req-{i} {}",
                vec!["please"; words].join(" ")
            )));
            out.push(Message::assistant_text(format!(
                "ans-{i} {}",
                vec!["done"; words].join(" ")
            )));
        }
        i += 1;
    }
    out
}

/// The heuristic ruler's count of the transcript a compaction request's prompt carries: the
/// text between its `<transcript>` tags (the whole prompt when it has none).
#[must_use]
pub fn transcript_tokens(prompt: &str) -> u64 {
    let start = prompt
        .find("<transcript>")
        .map_or(0, |i| i + "<transcript>".len());
    let end = prompt
        .rfind("</transcript>")
        .unwrap_or(prompt.len())
        .max(start);
    Heuristic.text(&prompt[start..end])
}

//! A loopback provider for benchmarks: an HTTP/1.1 server on 127.0.0.1 that answers
//! Anthropic Messages (`/v1/messages`), `OpenAI` Chat Completions (`/v1/chat/completions`) and
//! Responses (`/v1/responses`) requests with whole JSON answers, after enforcing a context
//! window (the protocols' overflow errors) and their prompt caching ([`AnthropicCache`],
//! [`OpenAiCache`]) on a virtual clock that the caller moves ([`Loopback::advance`]). What the
//! model says comes from a [`Script`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{AnthropicCache, Billed, OpenAiCache, OpenAiFlavor, Refusal, tokens_of};
use crate::protocol::Protocol;

/// What the scripted model answers to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scripted {
    /// The answer's text (may be empty when it calls tools).
    pub text: String,
    /// Tool calls: id, name, input.
    pub calls: Vec<(String, String, Value)>,
}

/// The model behind a [`Loopback`]: it reads a request body (already accepted) and answers.
pub trait Script: Send + Sync {
    /// The answer to `body`, a request of `protocol`.
    fn answer(&self, protocol: Protocol, body: &Value) -> Scripted;
}

/// The settings of a [`Loopback`].
#[derive(Clone, Copy, Debug)]
pub struct LoopbackConfig {
    /// The context window, in the emulator's tokens: a request with more input is refused
    /// with the protocol's overflow error.
    pub window: u64,
    /// The minimum cacheable length of the emulated Anthropic model, in the emulator's tokens.
    pub anthropic_minimum: u64,
}

/// One request the loopback answered.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The protocol it spoke.
    pub protocol: Protocol,
    /// The body as sent.
    pub body: Value,
    /// The `anthropic-beta` values it carried.
    pub betas: Vec<String>,
    /// The HTTP status answered.
    pub status: u16,
    /// Why it was refused, when it was.
    pub refusal: Option<String>,
    /// How its input was billed (all zero when refused).
    pub billed: Billed,
    /// The virtual time it arrived at.
    pub at: Duration,
}

struct State {
    config: LoopbackConfig,
    script: Arc<dyn Script>,
    anthropic: AnthropicCache,
    openai: OpenAiCache,
    now: Duration,
    seen: Vec<Seen>,
    answered: u64,
}

/// A running loopback provider; stopped when dropped.
pub struct Loopback {
    state: Arc<Mutex<State>>,
    port: u16,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loopback")
            .field("port", &self.port)
            .finish()
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Loopback {
    /// Starts a loopback provider on a free port, in the current tokio runtime.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(
        config: LoopbackConfig,
        script: Arc<dyn Script>,
    ) -> std::io::Result<Loopback> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State {
            config,
            script,
            anthropic: AnthropicCache::new(config.anthropic_minimum),
            openai: OpenAiCache::new(),
            now: Duration::ZERO,
            seen: Vec::new(),
            answered: 0,
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    // A connection that breaks only ends its own exchanges.
                    let _ = serve(&state, stream).await;
                });
            }
        });
        Ok(Loopback { state, port, task })
    }

    /// The base URL adapters are given.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Moves the virtual clock on by `by` (cache entries expire on it).
    pub fn advance(&self, by: Duration) {
        lock(&self.state).now += by;
    }

    /// The virtual time.
    pub fn now(&self) -> Duration {
        lock(&self.state).now
    }

    /// The requests answered since the last call, oldest first.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut lock(&self.state).seen)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers the requests of one connection until it closes.
async fn serve(state: &Mutex<State>, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0;
        let mut betas = Vec::new();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).await?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "anthropic-beta" => {
                        betas.extend(value.split(',').map(|b| b.trim().to_owned()));
                    }
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        let (status, answer) = respond(state, &path, &body, betas);
        let reply = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            if status == 200 { "OK" } else { "Bad Request" },
            answer.len()
        );
        reader.get_mut().write_all(reply.as_bytes()).await?;
    }
}

/// The status and body answering one request.
fn respond(state: &Mutex<State>, path: &str, raw: &[u8], betas: Vec<String>) -> (u16, String) {
    let protocol = match path.trim_end_matches('/') {
        p if p.ends_with("/messages") => Protocol::Anthropic,
        p if p.ends_with("/chat/completions") => Protocol::OpenAiChat,
        p if p.ends_with("/responses") => Protocol::OpenAiResponses,
        _ => return (404, json!({"error": {"message": "not found"}}).to_string()),
    };
    let body: Value = serde_json::from_slice(raw).unwrap_or(Value::Null);
    let mut state = lock(state);
    let now = state.now;
    let result = state.bill(protocol, &body, &betas);
    let (status, answer, refusal, billed) = match result {
        Ok(billed) => {
            let scripted = state.script.answer(protocol, &body);
            state.answered += 1;
            let answer = answer(protocol, &body, &scripted, &billed, state.answered);
            (200, answer, None, billed)
        }
        Err(refusal) => {
            let answer = error(protocol, &refusal);
            (
                refusal.status,
                answer,
                Some(refusal.message),
                Billed::default(),
            )
        }
    };
    state.seen.push(Seen {
        protocol,
        body,
        betas,
        status,
        refusal,
        billed,
        at: now,
    });
    (status, answer)
}

impl State {
    /// Enforces the window and the caching rules; how the input is billed.
    fn bill(
        &mut self,
        protocol: Protocol,
        body: &Value,
        betas: &[String],
    ) -> Result<Billed, Refusal> {
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            return Err(Refusal::bad_request(
                "this loopback answers whole answers only",
            ));
        }
        let betas: Vec<&str> = betas.iter().map(String::as_str).collect();
        if protocol == Protocol::Anthropic {
            AnthropicCache::breakpoints(body, &betas)?;
        }
        let total = input_tokens(body);
        if total > self.config.window {
            return Err(overflow(protocol, total, self.config.window));
        }
        // Within the window: bill it against the real caches.
        match protocol {
            Protocol::Anthropic => self.anthropic.check(body, &betas, self.now),
            Protocol::OpenAiChat => self.openai.check(body, OpenAiFlavor::Chat, self.now),
            _ => self.openai.check(body, OpenAiFlavor::Responses, self.now),
        }
    }
}

/// Every input token of a request as the emulator counts, whatever the protocol.
fn input_tokens(body: &Value) -> u64 {
    ["tools", "system", "instructions", "messages", "input"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(tokens_of)
        .sum()
}

/// The protocol's overflow error.
fn overflow(protocol: Protocol, tokens: u64, window: u64) -> Refusal {
    let message = match protocol {
        Protocol::Anthropic => format!("prompt is too long: {tokens} tokens > {window} maximum"),
        Protocol::OpenAiChat => format!(
            "This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."
        ),
        _ => "Your input exceeds the context window of this model. Please adjust your input and try again.".to_owned(),
    };
    Refusal {
        status: 400,
        message: format!("\u{0}overflow\u{0}{message}"),
    }
}

/// The protocol's error body for `refusal`.
fn error(protocol: Protocol, refusal: &Refusal) -> String {
    let (message, code) = match refusal.message.strip_prefix("\u{0}overflow\u{0}") {
        Some(m) => (m, Some("context_length_exceeded")),
        None => (refusal.message.as_str(), None),
    };
    match protocol {
        Protocol::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
        _ => json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}}),
    }
    .to_string()
}

/// The protocol's whole answer carrying `scripted`, billed as `billed`.
fn answer(
    protocol: Protocol,
    body: &Value,
    scripted: &Scripted,
    billed: &Billed,
    n: u64,
) -> String {
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    let output = tokens_of(&json!(scripted.text))
        + scripted
            .calls
            .iter()
            .map(|(_, _, input)| tokens_of(input))
            .sum::<u64>();
    let calling = !scripted.calls.is_empty();
    match protocol {
        Protocol::Anthropic => {
            let mut content = Vec::new();
            if !scripted.text.is_empty() {
                content.push(json!({"type": "text", "text": scripted.text}));
            }
            for (id, name, input) in &scripted.calls {
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
                   "content": content, "stop_reason": if calling { "tool_use" } else { "end_turn" },
                   "stop_sequence": null, "usage": AnthropicCache::usage(billed, output)})
        }
        Protocol::OpenAiChat => {
            let calls: Vec<Value> = scripted
                .calls
                .iter()
                .map(|(id, name, input)| json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}))
                .collect();
            let mut message = json!({"role": "assistant",
                "content": if scripted.text.is_empty() { Value::Null } else { json!(scripted.text) }});
            if calling {
                message["tool_calls"] = Value::Array(calls);
            }
            json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": model,
                   "choices": [{"index": 0, "message": message,
                                "finish_reason": if calling { "tool_calls" } else { "stop" }}],
                   "usage": OpenAiCache::usage(billed, output, OpenAiFlavor::Chat)})
        }
        _ => {
            let mut items = Vec::new();
            if !scripted.text.is_empty() {
                items.push(json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": scripted.text, "annotations": []}]}));
            }
            for (id, name, input) in &scripted.calls {
                items.push(json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                    "name": name, "arguments": input.to_string(), "status": "completed"}));
            }
            json!({"id": format!("resp_{n}"), "object": "response", "status": "completed", "model": model,
                   "output": items, "usage": OpenAiCache::usage(billed, output, OpenAiFlavor::Responses)})
        }
    }
    .to_string()
}

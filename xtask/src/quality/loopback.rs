//! The model of `cargo xtask quality --pressure`: a Chat Completions server on 127.0.0.1 that
//! enforces a context window and says so as `OpenAI` does, answers compaction requests with a
//! short summary that names no fact, and conversation requests with a short reply.
//!
//! The window is enforced as `OpenAI` documents it for Chat Completions: the input and the
//! requested output (`max_tokens`) together must fit the model's context length, and a request
//! that does not is answered 400 with code `context_length_exceeded` and the message "This
//! model's maximum context length is W tokens. However, you requested T tokens (I in the
//! messages, O in the completion). Please reduce the length of the messages or completion."
//! (the wording quoted in `crates/panto-providers/src/classify/tests.rs` and in the shared
//! provider error bodies). The server counts a token for every three bytes of the request body,
//! as the CLI's loopback model does: more than panto's estimate of the same request, as a real
//! tokenizer often counts, so that panto must learn the window from the error and not from its
//! own ruler.
//!
//! A compaction request is one whose system prompt is not the agent's ([`AGENT_PROMPT`]). Its
//! answer states only the size of the part it covers: it keeps no request, file, command or
//! error on purpose, so that what the pressure mode counts as kept is what panto kept (the
//! turns it kept verbatim and its ledger), whatever a model would have written.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// The agent's system prompt in the pressure mode; any other system prompt is a compaction's.
pub(super) const AGENT_PROMPT: &str = "You are a coding agent. Answer briefly.";

/// The model's reply to a conversation request.
pub(super) const REPLY: &str = "Done: the work goes on from here.";

/// Bytes of request body per token, as the server counts.
const BYTES_PER_TOKEN: usize = 3;

/// One request the server answered.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    /// Whether it was a compaction request.
    pub compaction: bool,
    /// The input the server counted, in tokens.
    pub input: u64,
    /// The requested output (`max_tokens` or `max_completion_tokens`).
    pub max_output: u64,
    /// Whether it fitted the window (else it was answered with the overflow error).
    pub fitted: bool,
    /// The `messages` of the request, as sent: two equal ones are the same request sent twice.
    pub messages: String,
    /// The output the server answered with, in tokens (0 for a rejected request).
    pub output: u64,
}

struct State {
    window: u64,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
}

/// A running server, stopped when dropped.
pub(super) struct Loopback {
    state: Arc<State>,
    port: u16,
    acceptor: Option<JoinHandle<()>>,
}

impl Loopback {
    /// Starts a server with a window of `window` tokens on a free loopback port.
    ///
    /// # Errors
    /// When no port is free.
    pub(super) fn start(window: u64) -> Result<Loopback> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("no free loopback port")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            window,
            seen: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let shared = Arc::clone(&state);
        let acceptor = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    // A connection that breaks only ends that exchange; panto reports it.
                    let _ = serve(&state, stream);
                });
            }
        });
        Ok(Loopback {
            state,
            port,
            acceptor: Some(acceptor),
        })
    }

    /// The base URL panto is given (`--base-url`).
    pub(super) fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The window it enforces, in tokens.
    pub(super) fn window(&self) -> u64 {
        self.state.window
    }

    /// The requests answered since the last call, oldest first.
    pub(super) fn take(&self) -> Vec<Seen> {
        std::mem::take(
            &mut *self
                .state
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Answers the requests of one connection (keep-alive), until the client closes it.
fn serve(state: &State, stream: TcpStream) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut length = None;
        let mut first = String::new();
        if reader.read_line(&mut first)? == 0 {
            return Ok(());
        }
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.trim().eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.unwrap_or(0)];
        reader.read_exact(&mut body)?;
        let (status, content_type, answer) = if length.is_none() {
            (
                411,
                "application/json",
                json!({"error": {"message": "a body with Content-Length is required"}}).to_string(),
            )
        } else {
            answer(state, &body)
        };
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            if status == 200 { "OK" } else { "Bad Request" },
            answer.len()
        );
        // One write, so that the answer does not wait on a delayed acknowledgement.
        out.write_all(format!("{head}{answer}").as_bytes())?;
        out.flush()?;
    }
}

/// The status, content type and body of the answer to one request body.
fn answer(state: &State, body: &[u8]) -> (u16, &'static str, String) {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return (
            400,
            "application/json",
            json!({"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
                .to_string(),
        );
    };
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .iter()
        .find(|m| m["role"] == "system" || m["role"] == "developer")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    let compaction = system != AGENT_PROMPT;
    let input = body.len().div_ceil(BYTES_PER_TOKEN) as u64;
    let max_output = request["max_tokens"]
        .as_u64()
        .or_else(|| request["max_completion_tokens"].as_u64())
        .unwrap_or(0);
    let fitted = input + max_output <= state.window;
    let text = if !fitted {
        String::new()
    } else if compaction {
        let last = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default();
        summary(&last)
    } else {
        REPLY.to_owned()
    };
    let output = text.len().div_ceil(BYTES_PER_TOKEN) as u64;
    state
        .seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Seen {
            compaction,
            input,
            max_output,
            fitted,
            messages: request["messages"].to_string(),
            output,
        });
    if !fitted {
        let message = format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens \
             ({input} in the messages, {max_output} in the completion). Please reduce the length \
             of the messages or completion.",
            state.window,
            input + max_output
        );
        let error = json!({"error": {"message": message, "type": "invalid_request_error",
            "param": "messages", "code": "context_length_exceeded"}});
        return (400, "application/json", error.to_string());
    }
    let usage = json!({"prompt_tokens": input, "completion_tokens": output,
        "total_tokens": input + output});
    if request["stream"] == true {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "pressure-1", "object": "chat.completion.chunk", "model": "pressure",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let events = [
            chunk(json!({"role": "assistant", "content": text}), Value::Null),
            chunk(json!({}), json!("stop")),
            json!({"id": "pressure-1", "object": "chat.completion.chunk", "model": "pressure",
                "choices": [], "usage": usage}),
        ];
        let mut sse: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        sse.push_str("data: [DONE]\n\n");
        (200, "text/event-stream", sse)
    } else {
        let whole = json!({"id": "pressure-1", "object": "chat.completion", "model": "pressure",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}],
            "usage": usage});
        (200, "application/json", whole.to_string())
    }
}

/// The text of a Chat Completions `content`: a string, or the `text` of its parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A short summary of the transcript in `prompt` that names no fact: only how much it covers,
/// in words that differ from one chunk to the next (so that no answer repeats the previous
/// summary it was given).
pub(super) fn summary(prompt: &str) -> String {
    let transcript = prompt
        .split("<transcript>")
        .nth(1)
        .and_then(|t| t.split("</transcript>").next())
        .unwrap_or(prompt);
    let chars = transcript.chars().count();
    let users = transcript.matches("[User]:").count();
    let calls = transcript.matches("[Assistant tool call").count();
    format!(
        "## Summary\n\
         This part of the conversation ({chars} characters of transcript) continued the work \
         the user and the assistant share.\n\n\
         ## Progress\n\
         The assistant answered {users} user messages here and called tools {calls} times; \
         the ledger below lists what they were.\n\n\
         ## Next steps\n\
         Go on from the latest request of these {chars} characters."
    )
}

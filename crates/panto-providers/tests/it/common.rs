//! Shared fixtures: a rich conversation, fast configurations, an event recorder, SSE builders,
//! request snapshots, and a raw TCP server for byte-level control.

// With some adapters compiled out, the helpers only their tests use go unused.
#![cfg_attr(
    not(all(
        feature = "anthropic",
        feature = "openai-chat",
        feature = "openai-responses",
        feature = "gemini"
    )),
    allow(dead_code)
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use panto_model::{
    ContentBlock, ImageBlock, Message, OtherBlock, Role, ThinkingBlock, ToolResultBlock,
    ToolResultContent,
};
use panto_provider::{
    Provider, ProviderError, ReasoningEffort, Request, RequestOptions, StreamEvent, ToolChoice,
    ToolSpec,
};
use panto_providers::{Config, RetryPolicy};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

/// The key every test adapter uses; no output may ever contain it.
pub(crate) const KEY: &str = "sk-test-SECRET-7f3a9c1e5b";

/// A configuration for a loopback server: tiny retry delays, short timeouts.
pub(crate) fn config(base: &str) -> Config {
    Config::new(base, KEY)
        .with_retry(RetryPolicy::new(
            3,
            Duration::from_millis(1),
            Duration::from_secs(5),
        ))
        .with_request_timeout(Duration::from_secs(10))
        .with_first_byte_timeout(Duration::from_secs(10))
        .with_idle_timeout(Duration::from_secs(10))
}

/// What reached the event sink, one string per event.
pub(crate) type Events = Vec<String>;

/// Runs one request, recording the events.
pub(crate) async fn run(
    provider: &dyn Provider,
    request: &Request,
) -> (Result<Message, ProviderError>, Events) {
    let mut events = Vec::new();
    let mut sink = |e: StreamEvent<'_>| {
        events.push(match e {
            StreamEvent::Text(t) => format!("text:{t}"),
            StreamEvent::Thinking(t) => format!("thinking:{t}"),
            StreamEvent::ToolCall { name } => format!("tool:{name}"),
            StreamEvent::Retry(notice) => format!(
                "retry:{}/{}:{}",
                notice.retry,
                notice.max_retries,
                kind(notice.error)
            ),
            other => format!("{other:?}"),
        });
    };
    let result = provider.complete(request, &mut sink).await;
    (result, events)
}

/// The kind of an error, in one word, for event logs.
pub(crate) fn kind(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::RateLimited { .. } => "rate-limited",
        ProviderError::Server { .. } => "server",
        ProviderError::Connection { .. } => "connection",
        ProviderError::WaitExpired { .. } | ProviderError::Timeout { .. } => "timeout",
        _ => "other",
    }
}

/// A one-message request.
pub(crate) fn hello() -> Request {
    Request::new(
        "test-model",
        "Be brief.",
        vec![Message::user_text("Hello?")],
        256,
    )
}

fn png() -> Value {
    json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="})
}

/// A conversation that exercises every rendering rule: a compaction at the head, an image,
/// signed and unsigned thinking, parallel tool calls, a result with text and an image, a failed
/// result, an unknown block, an interrupted call, an orphan result, and tools.
pub(crate) fn conversation() -> Request {
    let messages = vec![
        Message::compaction(
            "The user is fixing a flaky test in src/lib.rs; the cause is a race in the cache.",
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::text("Please look at the failing test again."),
                ContentBlock::Image(ImageBlock::new(png())),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking(ThinkingBlock::new(
                    "I should read the file first.",
                    Some("sig-abc".into()),
                )),
                ContentBlock::Thinking(ThinkingBlock::new(
                    "An unsigned thought from another provider.",
                    None,
                )),
                ContentBlock::text("Reading it."),
                ContentBlock::tool_use("t1", "read", json!({"path": "src/lib.rs"})),
                ContentBlock::tool_use("t2", "grep", json!({"pattern": "cache"})),
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::ToolResult(ToolResultBlock::new(
                    "t1",
                    ToolResultContent::Blocks(vec![
                        ContentBlock::text("fn main() {}"),
                        ContentBlock::Image(ImageBlock::new(png())),
                    ]),
                    Some(false),
                )),
                ContentBlock::tool_result("t2", "no matches", true),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Other(OtherBlock::new(
                    "redacted_thinking",
                    [("data".to_owned(), json!("opaque-blob"))]
                        .into_iter()
                        .collect(),
                )),
                ContentBlock::text("The race is in the cache."),
                ContentBlock::tool_use("t3", "run", json!({"cmd": "cargo test"})),
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::tool_result("t0", "stale output", false),
                ContentBlock::text("I stopped that run. Try a different fix."),
            ],
        ),
    ];
    let schema = |field: &str| json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]});
    Request::new(
        "test-model",
        "You are a careful coding agent.",
        messages,
        1024,
    )
    .with_tools(vec![
        ToolSpec::new("read", "Read a file", schema("path")),
        ToolSpec::new("grep", "Search files", schema("pattern")),
        ToolSpec::new("run", "Run a command", schema("cmd")),
    ])
}

/// A stream of named events (`event:` then `data:`).
pub(crate) fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// A stream of unnamed `data:` events; strings are sent as they are (`[DONE]`).
pub(crate) fn data_stream(chunks: &[Value]) -> String {
    chunks
        .iter()
        .map(|c| match c {
            Value::String(s) => format!("data: {s}\n\n"),
            other => format!("data: {other}\n\n"),
        })
        .collect()
}

/// The request a server received, as a JSON value for a snapshot: method, path and query, the
/// headers that matter (the key replaced by `[api key]` after checking it), and the body.
pub(crate) fn request_snapshot(request: &wiremock::Request) -> Value {
    let mut headers = serde_json::Map::new();
    for name in [
        "content-type",
        "accept",
        "authorization",
        "x-api-key",
        "x-goog-api-key",
        "anthropic-version",
    ] {
        if let Some(value) = request.headers.get(name) {
            let value = value.to_str().unwrap().to_owned();
            let value = if value.contains(KEY) {
                assert!(
                    value == KEY || value == format!("Bearer {KEY}"),
                    "{name}: {value}"
                );
                value.replace(KEY, "[api key]")
            } else {
                value
            };
            headers.insert(name.to_owned(), json!(value));
        }
    }
    assert!(!request.url.as_str().contains(KEY), "the key is in the URL");
    let body: Value = serde_json::from_slice(&request.body).expect("the body is JSON");
    json!({
        "method": request.method.as_str(),
        "path": request.url.path(),
        "query": request.url.query(),
        "headers": headers,
        "body": body,
    })
}

/// The JSON bodies a wiremock server received, in order.
pub(crate) async fn bodies(server: &wiremock::MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// One step of a raw server's answer.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Write these bytes.
    Write(Vec<u8>),
    /// Wait.
    Sleep(Duration),
}

/// A raw HTTP server on loopback that answers every connection with the same steps, then
/// closes it. Counts connections.
pub(crate) struct RawServer {
    pub base: String,
    pub connections: Arc<AtomicUsize>,
}

impl RawServer {
    pub(crate) async fn start(steps: Vec<Step>) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let steps = steps.clone();
                tokio::spawn(async move {
                    read_request(&mut socket).await;
                    for step in steps {
                        match step {
                            Step::Write(bytes) => {
                                if socket.write_all(&bytes).await.is_err() {
                                    return;
                                }
                                let _ = socket.flush().await;
                            }
                            Step::Sleep(d) => tokio::time::sleep(d).await,
                        }
                    }
                    let _ = socket.shutdown().await;
                });
            }
        });
        RawServer { base, connections }
    }

    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Reads one request: headers, then `Content-Length` bytes of body.
pub(crate) async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = socket.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let Ok(n) = socket.read(&mut chunk).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return;
        }
    }
}

/// The head of a chunked streaming answer.
pub(crate) fn sse_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec()
}

/// One HTTP/1.1 chunk holding `data`.
pub(crate) fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

/// Asserts an error is a malformed-response error.
#[track_caller]
pub(crate) fn assert_malformed(result: &Result<Message, ProviderError>) {
    assert!(
        matches!(result, Err(ProviderError::MalformedResponse { .. })),
        "{result:?}"
    );
}

/// A JSON answer with status 200.
pub(crate) fn json_answer(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

/// An SSE answer with status 200.
pub(crate) fn sse_answer(text: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(text, "text/event-stream")
}

/// Tool choices and how a protocol writes each.
pub(crate) type Choices = Vec<(ToolChoice, Value)>;

/// One protocol as the shared scenarios of `protocols.rs` see it: how to build its adapter,
/// where it posts, how it carries the key, and its answers for each scenario. Every answer
/// that carries usage reports a prompt of 1,200 tokens of which 1,000 were cached (input 200
/// on the Contract 1 names) and 30 output tokens.
pub(crate) struct Protocol {
    /// The name the overflow fixtures use (`protocol`).
    pub name: &'static str,
    /// The adapter for a configuration, or why it cannot be built.
    pub make: fn(Config) -> Result<Box<dyn Provider>, panto_providers::Error>,
    /// The base URL the adapter is given for a server at `uri`.
    pub base: fn(&str) -> String,
    /// The path it posts `hello()` to, streaming or not.
    pub path: fn(bool) -> &'static str,
    /// The header that carries the key, and what precedes the key in it.
    pub key_header: (&'static str, &'static str),
    /// Headers every request carries besides the key.
    pub fixed_headers: &'static [(&'static str, &'static str)],
    /// A whole answer that says `text` and ends naturally, with usage.
    pub text_whole: fn(&str) -> Value,
    /// The same answer streamed, `text` in two deltas split at its first space.
    pub text_stream: fn(&str) -> String,
    /// A stream that says `text` and is cut before the protocol's end marker.
    pub cut_stream: fn(&str) -> String,
    /// Words of the error a cut stream gives: the end marker it lacked.
    pub end_marker: &'static str,
    /// A whole answer calling `read` with `{"path": "a.rs"}` under id `call_1`, with usage.
    pub tool_whole: fn() -> Value,
    /// The same answer streamed, the arguments in two pieces.
    pub tool_stream: fn() -> String,
    /// Whole answers and the stop reason each must be read as.
    pub stop_cases: fn() -> Vec<(Value, &'static str)>,
    /// A transient failure before anything was shown, to a streaming request or not (retried,
    /// then announced as `server`).
    pub transient: fn(bool) -> ResponseTemplate,
    /// Where the body carries each field of [`options_request`]'s options, and its value.
    pub options_wire: fn() -> Vec<(&'static str, Value)>,
    /// Where the body carries the tool choice, and the value of each choice but one tool.
    pub choice_wire: (&'static str, fn() -> Choices),
}

/// `hello()` with a `read` tool, room for thinking, and every request option set: temperature
/// 0.5, top-p 0.9, low reasoning effort, and the `read` tool forced.
pub(crate) fn options_request() -> Request {
    let mut request = hello()
        .with_tools(vec![ToolSpec::new(
            "read",
            "Read a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )])
        .with_options(
            RequestOptions::new()
                .with_temperature(0.5)
                .with_top_p(0.9)
                .with_reasoning_effort(ReasoningEffort::Low)
                .with_tool_choice(ToolChoice::Tool("read".into())),
        );
    request.max_output_tokens = 4096;
    request
}

impl Protocol {
    /// The adapter for a configuration that must be accepted.
    pub(crate) fn build(&self, config: Config) -> Box<dyn Provider> {
        (self.make)(config).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    /// The adapter for a server, with the fast test configuration.
    pub(crate) fn provider(
        &self,
        server: &wiremock::MockServer,
        streaming: bool,
    ) -> Box<dyn Provider> {
        self.build(config(&(self.base)(&server.uri())).with_streaming(streaming))
    }

    /// Answers every POST to the protocol's paths (streaming and not) with `response`.
    pub(crate) async fn answer(&self, server: &wiremock::MockServer, response: ResponseTemplate) {
        let paths = [(self.path)(false), (self.path)(true)];
        Mock::given(method("POST"))
            .and(move |r: &wiremock::Request| paths.contains(&r.url.path()))
            .respond_with(response)
            .mount(server)
            .await;
    }

    /// The answer `text_whole` or `text_stream`, as a response.
    pub(crate) fn text_answer(&self, text: &str, streaming: bool) -> ResponseTemplate {
        if streaming {
            sse_answer((self.text_stream)(text))
        } else {
            json_answer((self.text_whole)(text))
        }
    }
}

/// Splits `text` at its first space, the space kept with the first piece.
pub(crate) fn halves(text: &str) -> (&str, &str) {
    let at = text.find(' ').map_or(text.len(), |i| i + 1);
    text.split_at(at)
}

/// The tool choices both `OpenAI` protocols name alike.
pub(crate) fn openai_choices() -> Choices {
    vec![
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
    ]
}

/// The response that carries a case: its status and body, or its events as an SSE stream.
pub(crate) fn case_response(case: &Value) -> ResponseTemplate {
    if let Some(events) = case.get("sse").and_then(Value::as_array) {
        let mut text = String::new();
        for e in events {
            if let Some(name) = e.get("event").and_then(Value::as_str) {
                text.push_str(&format!("event: {name}\n"));
            }
            text.push_str(&format!("data: {}\n\n", e["data"]));
        }
        return ResponseTemplate::new(200).set_body_raw(text, "text/event-stream");
    }
    let status = case["status"].as_u64().unwrap() as u16;
    match &case["body"] {
        // A string body is served as raw text (a non-JSON answer).
        Value::String(s) => ResponseTemplate::new(status).set_body_raw(s.clone(), "text/plain"),
        body => ResponseTemplate::new(status).set_body_json(body),
    }
}

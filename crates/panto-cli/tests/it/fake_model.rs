//! A fake model server on loopback that speaks the four protocols (streaming and not), answers
//! compaction requests with a summary, and rejects conversation requests whose body exceeds a
//! size limit with that provider's real context-overflow error.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The wire protocol the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Anthropic,
    OpenAiChat,
    OpenAiResponses,
    Gemini,
}

impl Protocol {
    pub(crate) const ALL: [Protocol; 4] = [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ];

    /// The `--provider` value.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenAiChat => "openai",
            Protocol::OpenAiResponses => "openai-responses",
            Protocol::Gemini => "gemini",
        }
    }

    /// The key variable the binary reads.
    pub(crate) fn key_var(self) -> &'static str {
        match self {
            Protocol::Anthropic => "ANTHROPIC_API_KEY",
            Protocol::OpenAiChat | Protocol::OpenAiResponses => "OPENAI_API_KEY",
            Protocol::Gemini => "GEMINI_API_KEY",
        }
    }

    /// The base URL to give the binary for a server at `uri`.
    pub(crate) fn base_url(self, uri: &str) -> String {
        match self {
            Protocol::Anthropic | Protocol::Gemini => uri.to_owned(),
            Protocol::OpenAiChat | Protocol::OpenAiResponses => format!("{uri}/v1"),
        }
    }
}

/// One request the server saw.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The model named by the request.
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// Whether it was a compaction request (its user prompt holds a transcript).
    pub compaction: bool,
    /// The request body size in bytes.
    pub bytes: usize,
    /// The whole body.
    pub body: Value,
    /// What the server answered: "reply", "summary", "overflow" or an error kind.
    pub answer: &'static str,
}

/// How the fake model behaves.
#[derive(Clone)]
pub(crate) struct FakeModel {
    pub protocol: Protocol,
    /// Conversation requests larger than this many bytes overflow.
    pub limit: usize,
    /// Requests naming this model get a model-not-found error.
    pub missing_model: Option<String>,
    /// Every conversation request fails with this (status, body) instead of answering.
    pub fail_with: Option<(u16, Value)>,
    /// Whether compaction requests are held to the limit too (a real window is one window).
    pub limit_compactions: bool,
    /// Whether the overflow error states the numbers (tokens and limit), as most providers
    /// do, or only says the input is too long, as llama.cpp, Ollama and LM Studio do.
    pub numbers: bool,
    /// Whether the Chat Completions overflow is worded as vLLM's, stating the completion the
    /// request asked for besides its messages ("you requested N tokens (X in the messages, M in
    /// the completion)"): the wording of a server that counts the output against its window.
    pub states_completion: bool,
    /// Whether a conversation request is refused when its messages and the completion it asks
    /// for (`max_tokens`) are over the limit together, as a vLLM server refuses it, not only
    /// when its messages are.
    pub counts_completion: bool,
    /// Whether a streamed conversation reply (Chat Completions) stops half-way, before its
    /// `finish_reason` and `data: [DONE]`, as when a connection drops.
    pub cut_replies: bool,
    /// Whether compaction requests are answered with an empty text (a summary the checks
    /// refuse), so that no model writes the summary.
    pub empty_summaries: bool,
    /// Whether a conversation request over the limit is answered anyway, from the end of the
    /// prompt, with the usage of half the window, as Ollama does past `num_ctx` (its FAQ: it
    /// "silently discards context that exceeds the window"), instead of being refused.
    pub truncate_silently: bool,
    pub log: Arc<Mutex<Vec<Seen>>>,
}

/// `panto chat c.jsonl` with `fake-model` at `server` over `protocol`, a keep budget of 10
/// tokens, and the protocol's key set.
pub(crate) fn chat_command(
    sb: &crate::support::Sandbox,
    protocol: Protocol,
    server: &str,
) -> std::process::Command {
    let base = protocol.base_url(server);
    let mut cmd = sb.command(&[
        "chat",
        "c.jsonl",
        "--provider",
        protocol.flag(),
        "--model",
        "fake-model",
        "--base-url",
        &base,
        "--keep-tokens",
        "10",
    ]);
    cmd.env(protocol.key_var(), "k");
    cmd
}

impl FakeModel {
    pub(crate) fn new(protocol: Protocol, limit: usize) -> FakeModel {
        FakeModel {
            protocol,
            limit,
            missing_model: None,
            fail_with: None,
            limit_compactions: false,
            numbers: true,
            states_completion: false,
            counts_completion: false,
            cut_replies: false,
            empty_summaries: false,
            truncate_silently: false,
            log: Arc::default(),
        }
    }

    /// Starts a server answering every POST with this model.
    pub(crate) async fn start(self) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(self)
            .mount(&server)
            .await;
        server
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// The completion a request asks for, in tokens (Chat Completions' `max_tokens`).
    fn completion(body: &Value) -> u64 {
        body["max_tokens"]
            .as_u64()
            .or(body["max_completion_tokens"].as_u64())
            .unwrap_or(0)
    }

    /// Whether a request of `bytes` is over the limit with its completion, when that counts.
    fn completion_over(&self, bytes: usize, body: &Value) -> bool {
        self.counts_completion
            && (bytes / 3) as u64 + Self::completion(body) > (self.limit / 3) as u64
    }

    fn overflow(&self, bytes: usize, body: &Value) -> ResponseTemplate {
        let (tokens, limit) = (bytes / 3, self.limit / 3);
        if !self.numbers {
            return ResponseTemplate::new(400).set_body_json(self.overflow_without_numbers());
        }
        if self.states_completion && self.protocol == Protocol::OpenAiChat {
            let completion = Self::completion(body);
            let requested = tokens as u64 + completion;
            return ResponseTemplate::new(400).set_body_json(json!({"object": "error",
                "message": format!("This model's maximum context length is {limit} tokens. However, you requested {requested} tokens ({tokens} in the messages, {completion} in the completion). Please reduce the length of the messages or completion."),
                "type": "BadRequestError", "param": null, "code": 400}));
        }
        let body = match self.protocol {
            Protocol::Anthropic => {
                json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {limit} maximum")}})
            }
            Protocol::OpenAiChat => {
                json!({"error": {"message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
            }
            Protocol::OpenAiResponses => {
                json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
                "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
            }
            Protocol::Gemini => json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": format!("The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit}).")}}),
        };
        ResponseTemplate::new(400).set_body_json(body)
    }

    /// Overflow bodies that state no numbers, in each protocol's shape.
    fn overflow_without_numbers(&self) -> Value {
        match self.protocol {
            Protocol::Anthropic => {
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}})
            }
            Protocol::OpenAiChat => {
                json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}})
            }
            Protocol::OpenAiResponses => {
                json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
                "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
            }
            Protocol::Gemini => json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "The input token count exceeds the maximum number of tokens allowed."}}),
        }
    }

    fn not_found(&self, model: &str) -> ResponseTemplate {
        let body = match self.protocol {
            Protocol::Anthropic => {
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("model: {model}")}})
            }
            Protocol::Gemini => {
                json!({"error": {"code": 404, "status": "NOT_FOUND", "message": format!("models/{model} is not found for API version v1beta")}})
            }
            _ => {
                json!({"error": {"message": format!("The model `{model}` does not exist or you do not have access to it."), "type": "invalid_request_error", "param": null, "code": "model_not_found"}})
            }
        };
        ResponseTemplate::new(404).set_body_json(body)
    }
}

/// The model, system prompt and streaming flag of a request.
fn describe(protocol: Protocol, req: &Request, body: &Value) -> (String, String, bool) {
    let text = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    };
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let stream = body["stream"].as_bool().unwrap_or(false);
    match protocol {
        Protocol::Anthropic => (model, text(&body["system"]), stream),
        Protocol::OpenAiChat => {
            let system = body["messages"]
                .as_array()
                .and_then(|m| {
                    m.iter()
                        .find(|m| m["role"] == "system" || m["role"] == "developer")
                })
                .map(|m| text(&m["content"]))
                .unwrap_or_default();
            (model, system, stream)
        }
        Protocol::OpenAiResponses => (model, text(&body["instructions"]), stream),
        Protocol::Gemini => {
            let path = req.url.path();
            let model = path
                .split("/models/")
                .nth(1)
                .and_then(|m| m.split(':').next())
                .unwrap_or_default()
                .to_owned();
            let system = text(&body["systemInstruction"]["parts"]);
            (model, system, path.contains("streamGenerateContent"))
        }
    }
}

impl Respond for FakeModel {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let (model, system, stream) = describe(self.protocol, req, &body);
        let compaction = body.to_string().contains("<transcript>");
        let bytes = req.body.len();
        let mut seen = Seen {
            model: model.clone(),
            system,
            compaction,
            bytes,
            body,
            answer: "reply",
        };
        let response = if self.missing_model.as_deref() == Some(model.as_str()) {
            seen.answer = "not_found";
            self.not_found(&model)
        } else if compaction && self.limit_compactions && bytes > self.limit {
            seen.answer = "overflow";
            self.overflow(bytes, &seen.body)
        } else if compaction && self.empty_summaries {
            seen.answer = "empty";
            answer(self.protocol, stream, "", bytes)
        } else if compaction {
            let n = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.compaction)
                .count()
                + 1;
            seen.answer = "summary";
            answer(
                self.protocol,
                stream,
                &format!("SUMMARY-{n}: the user is testing panto."),
                bytes,
            )
        } else if let Some((status, body)) = &self.fail_with {
            seen.answer = "error";
            ResponseTemplate::new(*status).set_body_json(body.clone())
        } else if bytes > self.limit && self.truncate_silently {
            seen.answer = "truncated";
            answer(
                self.protocol,
                stream,
                "An answer from the end of a cut prompt.",
                self.limit / 2,
            )
        } else if bytes > self.limit || self.completion_over(bytes, &seen.body) {
            seen.answer = "overflow";
            self.overflow(bytes, &seen.body)
        } else if self.cut_replies && stream && self.protocol == Protocol::OpenAiChat {
            seen.answer = "cut";
            let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Half a rep"}, "finish_reason": null}]});
            ResponseTemplate::new(200)
                .set_body_raw(format!("data: {chunk}\n\n"), "text/event-stream")
        } else {
            let n = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.answer == "reply")
                .count()
                + 1;
            answer(
                self.protocol,
                stream,
                &format!("Reply {n} from {model}."),
                bytes,
            )
        };
        self.log.lock().unwrap().push(seen);
        response
    }
}

/// A successful answer with `text`, streamed or whole, with usage derived from the body size.
fn answer(protocol: Protocol, stream: bool, text: &str, bytes: usize) -> ResponseTemplate {
    let (input, output) = ((bytes / 3) as u64, 7u64);
    let sse = |events: Vec<(&str, Value)>| -> ResponseTemplate {
        let mut out = String::new();
        for (event, data) in events {
            if !event.is_empty() {
                out.push_str(&format!("event: {event}\n"));
            }
            out.push_str(&format!("data: {data}\n\n"));
        }
        ResponseTemplate::new(200).set_body_raw(out, "text/event-stream")
    };
    match (protocol, stream) {
        (Protocol::Anthropic, false) => ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "fake",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input, "output_tokens": output}})),
        (Protocol::Anthropic, true) => sse(vec![
            ("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "fake", "content": [], "stop_reason": null, "usage": {"input_tokens": input, "output_tokens": 1}}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}})),
            ("message_stop", json!({"type": "message_stop"})),
        ]),
        (Protocol::OpenAiChat, false) => ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})),
        (Protocol::OpenAiChat, true) => {
            let body = format!(
                "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake", "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}}),
            );
            ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
        }
        (Protocol::OpenAiResponses, stream) => {
            let response = json!({"id": "resp_1", "object": "response", "status": "completed", "model": "fake",
                "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output}});
            if !stream {
                return ResponseTemplate::new(200).set_body_json(response);
            }
            sse(vec![
                ("response.created", json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}})),
                ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}})),
                ("response.output_text.delta", json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text})),
                ("response.output_item.done", json!({"type": "response.output_item.done", "output_index": 0, "item": response["output"][0]})),
                ("response.completed", json!({"type": "response.completed", "response": response})),
            ])
        }
        (Protocol::Gemini, stream) => {
            let chunk = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": input, "candidatesTokenCount": output, "totalTokenCount": input + output},
                "modelVersion": "fake"});
            if stream {
                sse(vec![("", chunk)])
            } else {
                ResponseTemplate::new(200).set_body_json(chunk)
            }
        }
    }
}

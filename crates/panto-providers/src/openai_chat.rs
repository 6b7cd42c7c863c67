//! The `OpenAI` Chat Completions adapter: `POST {base}/v1/chat/completions`, for `OpenAI` and every
//! compatible server (vLLM, llama.cpp, Ollama, LM Studio, `OpenRouter`, Groq, `DeepSeek`, ...).

use std::collections::BTreeMap;

use panto_model::stop_reason;
use panto_model::{ContentBlock, Message, Name, Role, ThinkingBlock, ToolUseBlock, Usage};
use panto_provider::{EventSink, Provider, ProviderError, Request, ToolChoice};
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::{Map, Value, json};

use crate::adapter::adapter_common;
use crate::body::{Splice, WireBody};
use crate::classify;
use crate::config::{BaseUrl, Config, Error};
use crate::prepare::{compaction_text, flatten_result, image_url, prepare_sendable};
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::{
    StopReasons, arguments, assistant, cached_prompt_usage, has_calls, insert_cache_params,
    insert_sampling, key_header, map_stop_reason, parse_arguments, tool_choice,
};
use crate::sse::SseEvent;
use crate::transport::{
    Sink, StreamParser, Transport, Wire, error_payload, event_json, fresh_id, malformed,
};

/// Which field carries the output limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaxTokensField {
    /// `max_tokens`: what compatible servers read.
    MaxTokens,
    /// `max_completion_tokens`: what `OpenAI`'s reasoning models require.
    MaxCompletionTokens,
}

/// `OpenAI` Chat Completions, or any server that speaks it.
///
/// The output limit goes in `max_completion_tokens` when the base URL is `api.openai.com`
/// (its reasoning models reject `max_tokens`) and in `max_tokens` everywhere else (most
/// compatible servers read only that); [`OpenAiChatProvider::with_max_tokens_field`] overrides.
///
/// Request options: `temperature`, `top_p`, `reasoning_effort` (`low`, `medium`, `high`) and
/// `tool_choice` (`auto`, `none`, `required`, or one function; sent only when the request has
/// tools). A compatible server that does not know a field usually ignores it.
#[cfg_attr(docsrs, doc(cfg(feature = "openai-chat")))]
pub struct OpenAiChatProvider {
    transport: Transport,
    wire: ChatWire,
}

impl OpenAiChatProvider {
    /// The official API.
    pub const DEFAULT_BASE_URL: &'static str = Protocol::OpenAiChat.environment().default_base_url;

    /// An adapter with this configuration.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`].
    pub fn new(config: Config) -> Result<OpenAiChatProvider, Error> {
        let transport = Transport::new(config)?;
        let max_tokens_field = if transport.base().host() == "api.openai.com" {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        };
        Ok(OpenAiChatProvider {
            transport,
            wire: ChatWire { max_tokens_field },
        })
    }

    /// The same adapter sending the output limit in `field`.
    pub fn with_max_tokens_field(mut self, field: MaxTokensField) -> OpenAiChatProvider {
        self.wire.max_tokens_field = field;
        self
    }
}

adapter_common!(OpenAiChatProvider, OpenAiChat, native: "Chat Completions");

/// The protocol description.
#[derive(Debug)]
pub(crate) struct ChatWire {
    pub(crate) max_tokens_field: MaxTokensField,
}

impl Wire for ChatWire {
    type Stream = ChatStream;

    fn protocol(&self) -> Protocol {
        Protocol::OpenAiChat
    }

    fn endpoint(&self, base: &BaseUrl, _request: &Request, _stream: bool) -> String {
        base.endpoint("v1", "chat/completions")
    }

    fn headers(&self, key: &ApiKey, _request: &Request, headers: &mut HeaderMap) {
        key_header(headers, AUTHORIZATION, "Bearer ", key);
    }

    fn body(&self, request: &Request, stream: bool) -> WireBody {
        WireBody::new(
            request_body(request, stream, self.max_tokens_field),
            Splice::default(),
            request,
        )
    }

    fn parse(&self, body: &Value) -> Result<Message, ProviderError> {
        parse_completion(body)
    }

    fn stream(&self) -> ChatStream {
        ChatStream::default()
    }
}

/// The request body.
pub(crate) fn request_body(request: &Request, stream: bool, field: MaxTokensField) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in prepare_sendable(&request.messages, &compaction_text, None, &sends) {
        match message.role {
            Role::User => render_user(&message, &mut messages),
            Role::Assistant => messages.extend(render_assistant(&message)),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    let field = match field {
        MaxTokensField::MaxTokens => "max_tokens",
        MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
    };
    body.insert(field.into(), json!(request.max_output_tokens));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    render_options(request, &mut body);
    if stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// The request options this protocol carries (see [`OpenAiChatProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    insert_sampling(options, body, "top_p");
    insert_cache_params(request, body);
    if let Some(effort) = options.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    let choice = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!("auto")),
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
        _ => None,
    });
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
}

/// Whether a block of a message of `role` goes on the wire ([`render_user`] and
/// [`render_assistant`] render it): text, tool calls and results, and a user's images; thinking
/// never goes back on this protocol.
fn sends(role: Role, block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text(_) | ContentBlock::ToolUse(_) | ContentBlock::ToolResult(_) => true,
        ContentBlock::Image(i) => role == Role::User && image_url(&i.source).is_some(),
        _ => false,
    }
}

/// A user message: one `tool` message per tool result (in order), then a user message with
/// the rest (plain string content when it is only text), then the images tool results held.
fn render_user(message: &Message, out: &mut Vec<Value>) {
    let mut result_images = Vec::new();
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(r) => {
                let (text, images) = flatten_result(r, true);
                out.push(json!({"role": "tool", "tool_call_id": r.tool_use_id, "content": text}));
                result_images.extend(images);
            }
            ContentBlock::Text(t) => parts.push(json!({"type": "text", "text": t.text})),
            ContentBlock::Image(i) => {
                if let Some(url) = image_url(&i.source) {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    if let Some(message) = user_message(parts) {
        out.push(message);
    }
    if !result_images.is_empty() {
        let mut parts =
            vec![json!({"type": "text", "text": "Images returned by the tool calls above:"})];
        parts.extend(
            result_images
                .iter()
                .filter_map(|i| image_url(&i.source))
                .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
        );
        out.extend(user_message(parts));
    }
}

/// A user message from content parts: a plain string when every part is text.
fn user_message(parts: Vec<Value>) -> Option<Value> {
    if parts.is_empty() {
        return None;
    }
    if parts.iter().all(|p| p["type"] == "text") {
        let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        return Some(json!({"role": "user", "content": text.join("\n\n")}));
    }
    Some(json!({"role": "user", "content": parts}))
}

/// An assistant message: text joined, tool calls with JSON-string arguments. Thinking is not
/// sent back (`DeepSeek` rejects `reasoning_content` in input, and others ignore it).
fn render_assistant(message: &Message) -> Option<Value> {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text(t) => text.push(t.text.as_str()),
            ContentBlock::ToolUse(u) => calls.push(json!({
                "id": u.id, "type": "function",
                "function": {"name": u.name, "arguments": arguments(&u.input)}})),
            _ => {}
        }
    }
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    let mut out = Map::new();
    out.insert("role".into(), json!("assistant"));
    out.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            json!(text.join("\n\n"))
        },
    );
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Some(Value::Object(out))
}

/// Finish reasons on the session file's stop reasons.
const STOP_REASONS: StopReasons = StopReasons {
    end: "stop",
    map: &[
        ("length", stop_reason::MAX_TOKENS),
        ("tool_calls", stop_reason::TOOL_USE),
        ("function_call", stop_reason::TOOL_USE),
        ("content_filter", stop_reason::REFUSAL),
    ],
};

fn parse_usage(v: &Value) -> Option<Usage> {
    let prompt = v.get("prompt_tokens")?.as_u64()?;
    let completion = v
        .get("completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // OpenAI: prompt_tokens_details.cached_tokens; DeepSeek: prompt_cache_hit_tokens.
    let cached = v
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .or_else(|| v.get("prompt_cache_hit_tokens").and_then(Value::as_u64));
    let written = v
        .pointer("/prompt_tokens_details/cache_write_tokens")
        .and_then(Value::as_u64);
    Some(cached_prompt_usage(prompt, completion, cached, written))
}

/// Text of a `content` that may be a string or a list of text parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Reasoning text: `reasoning_content` (`DeepSeek`, llama.cpp, vLLM) or `reasoning` (`OpenRouter`,
/// Ollama).
fn reasoning(message: &Value) -> Option<&str> {
    message
        .get("reasoning_content")
        .and_then(Value::as_str)
        .or_else(|| message.get("reasoning").and_then(Value::as_str))
}

fn thinking(text: String) -> ContentBlock {
    ContentBlock::Thinking(ThinkingBlock::new(text, None))
}

/// Converts a non-streaming answer.
pub(crate) fn parse_completion(body: &Value) -> Result<Message, ProviderError> {
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| malformed("the answer has no `choices`"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| malformed("choices[0] has no `message`"))?;
    let mut content = Vec::new();
    if let Some(r) = reasoning(message).filter(|r| !r.is_empty()) {
        content.push(thinking(r.to_owned()));
    }
    let mut text = content_text(message.get("content").unwrap_or(&Value::Null));
    if text.is_empty()
        && let Some(refusal) = message.get("refusal").and_then(Value::as_str)
    {
        refusal.clone_into(&mut text);
    }
    if !text.is_empty() {
        content.push(ContentBlock::text(text));
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (i, call) in calls.into_iter().flatten().enumerate() {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("tool_calls[{i}] has no function name")))?;
        let args = call.pointer("/function/arguments");
        let input = match args {
            Some(Value::String(raw)) => parse_arguments(raw),
            Some(Value::Object(_)) => args.cloned().unwrap_or_default(),
            _ => json!({}),
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map_or_else(|| fresh_id("call_"), str::to_owned);
        content.push(ContentBlock::ToolUse(ToolUseBlock::new(id, name, input)));
    }
    let calls = has_calls(&content);
    let mut out = assistant(content);
    out.model = body.get("model").and_then(Value::as_str).map(Name::from);
    out.stop_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(|r| map_stop_reason(&STOP_REASONS, r, calls));
    out.usage = body.get("usage").and_then(parse_usage);
    Ok(out)
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct CallBuild {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct ChatStream {
    model: Option<String>,
    thinking: String,
    text: String,
    calls: BTreeMap<u64, CallBuild>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl StreamParser for ChatStream {
    fn event(&mut self, event: &SseEvent, sink: &mut Sink<'_>) -> Result<bool, ProviderError> {
        if event.event == "error" {
            return Err(classify::classify_stream_error(
                Protocol::OpenAiChat,
                &error_payload(event),
            ));
        }
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk = event_json(event)?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(classify::classify_stream_error(
                Protocol::OpenAiChat,
                &chunk,
            ));
        }
        if self.model.is_none() {
            self.model = chunk
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if let Some(usage) = chunk.get("usage").and_then(parse_usage) {
            self.usage = Some(usage);
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(r) = reasoning(delta) {
                self.thinking.push_str(r);
                sink.thinking(r);
            }
            let text = content_text(delta.get("content").unwrap_or(&Value::Null));
            self.text.push_str(&text);
            sink.text(&text);
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for (position, call) in calls.into_iter().flatten().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(position as u64);
                let build = self.calls.entry(index).or_default();
                // The id and name come once (some servers repeat them in every chunk).
                if let Some(id) = call.get("id").and_then(Value::as_str)
                    && build.id.is_empty()
                {
                    id.clone_into(&mut build.id);
                }
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str)
                    && build.name.is_empty()
                    && !name.is_empty()
                {
                    name.clone_into(&mut build.name);
                    sink.tool_call(name);
                }
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    build.arguments.push_str(args);
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(false)
    }

    fn finish(self, terminal: bool) -> Result<Message, ProviderError> {
        if !terminal && self.finish_reason.is_none() {
            return Err(malformed(
                "the stream ended before a finish_reason or `data: [DONE]`",
            ));
        }
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(thinking(self.thinking));
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::text(self.text));
        }
        for (index, call) in self.calls {
            if call.name.is_empty() {
                return Err(malformed(format!("streamed tool call {index} has no name")));
            }
            let id = if call.id.is_empty() {
                fresh_id("call_")
            } else {
                call.id
            };
            content.push(ContentBlock::ToolUse(ToolUseBlock::new(
                id,
                call.name,
                parse_arguments(&call.arguments),
            )));
        }
        let calls = has_calls(&content);
        let mut message = assistant(content);
        message.model = self.model.map(Name::from);
        message.stop_reason = self
            .finish_reason
            .map(|r| map_stop_reason(&STOP_REASONS, &r, calls));
        message.usage = self.usage;
        Ok(message)
    }
}

//! The `OpenAI` Responses adapter: `POST {base}/v1/responses`, stateless (`store: false`).

use std::collections::HashMap;

use panto_model::stop_reason;
use panto_model::{
    ContentBlock, Extra, Message, NATIVE_OPENAI_RESPONSES, Name, Role, ThinkingBlock, ToolUseBlock,
};
use panto_provider::{EventSink, NativeCompaction, Provider, ProviderError, Request, ToolChoice};
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::adapter::adapter_common;
use crate::body::{Splice, WireBody};
use crate::classify;
use crate::config::{BaseUrl, Config, Error};
use crate::native;
use crate::prepare::{compaction_text, flatten_result, image_url, prepare};
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::{
    StopReasons, arguments, assistant, cached_prompt_usage, has_calls, insert_sampling, key_header,
    map_stop_reason, parse_arguments, tool_choice,
};
use crate::sse::SseEvent;
use crate::transport::{Sink, StreamParser, Transport, Wire, error_payload, event_json, malformed};

/// The extra field of a thinking block that holds a reasoning item's `encrypted_content`.
const ENCRYPTED_CONTENT: &str = "encrypted_content";

/// `OpenAI` Responses (and servers that speak it, such as llama.cpp's `/v1/responses`).
///
/// Requests are stateless (`store: false`): the whole conversation is sent each time. Reasoning
/// items are sent back only when they carry `encrypted_content`, which the API returns when
/// asked ([`OpenAiResponsesProvider::with_encrypted_reasoning`]); otherwise the reasoning
/// summary is kept in the session as thinking but not sent again.
///
/// Request options: `temperature`, `top_p`, `reasoning.effort` (`low`, `medium`, `high`) and
/// `tool_choice` (`auto`, `none`, `required`, or one function; sent only when the request has
/// tools). `OpenAI`'s reasoning models refuse `temperature` and `top_p`.
#[cfg_attr(docsrs, doc(cfg(feature = "openai-responses")))]
pub struct OpenAiResponsesProvider {
    transport: Transport,
    wire: ResponsesWire,
}

impl OpenAiResponsesProvider {
    /// The official API.
    pub const DEFAULT_BASE_URL: &'static str =
        Protocol::OpenAiResponses.environment().default_base_url;

    /// An adapter with this configuration.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`].
    pub fn new(config: Config) -> Result<OpenAiResponsesProvider, Error> {
        Ok(OpenAiResponsesProvider {
            transport: Transport::new(config)?,
            wire: ResponsesWire {
                encrypted_reasoning: false,
            },
        })
    }

    /// The same adapter asking for `reasoning.encrypted_content`, so that reasoning items can
    /// be sent back in later requests (reasoning models only; others may reject the field).
    pub fn with_encrypted_reasoning(mut self, on: bool) -> OpenAiResponsesProvider {
        self.wire.encrypted_reasoning = on;
        self
    }

    /// `POST …/v1/responses/compact`: the conversation of `request` compacted by the API into
    /// a shorter window (the user's messages and one opaque `compaction` item), returned
    /// exactly as received. The system prompt goes in `instructions`, followed by
    /// `instructions` for the summary when given.
    async fn native_compaction(
        &self,
        request: &Request,
        instructions: Option<&str>,
        _events: EventSink<'_>,
    ) -> Result<NativeCompaction, ProviderError> {
        let wire = ResponsesWire {
            encrypted_reasoning: self.wire.encrypted_reasoning,
        };
        let mut splice = Splice::default();
        let input = render_input(request, &mut splice);
        let mut body = Map::new();
        body.insert("model".into(), json!(request.model));
        body.insert("input".into(), Value::Array(input));
        let system = match instructions {
            Some(extra) if !request.system.is_empty() => format!("{}\n\n{extra}", request.system),
            Some(extra) => extra.to_owned(),
            None => request.system.clone(),
        };
        if !system.is_empty() {
            body.insert("instructions".into(), json!(system));
        }
        let body = WireBody::new(Value::Object(body), splice, request);
        let url = self.transport.base().endpoint("v1", "responses/compact");
        let bytes = native::post(&self.transport, &wire, request, &url, &body).await?;
        compact_answer(&bytes)
    }
}

/// Reads the answer of `/responses/compact`: its output items exactly as received (the kept
/// user messages and the `compaction` item), the model and the usage.
fn compact_answer(bytes: &[u8]) -> Result<NativeCompaction, ProviderError> {
    let answer = native::Answer::read(bytes, "output")?;
    let mut compacted = false;
    let items = answer.exact_elements("item", |text| {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| malformed(format!("a compaction answer item: {e}")))?;
        compacted |= value.get("type").and_then(Value::as_str) == Some("compaction");
        Ok(())
    })?;
    if !compacted {
        return Err(malformed(
            "the compaction answer holds no `compaction` item",
        ));
    }
    let native = NativeCompaction::new(NATIVE_OPENAI_RESPONSES, items);
    Ok(answer.finish(native, parse_usage))
}

/// Usage on the Contract 1 names (`input_tokens` less its cached part, which goes to
/// `cache_read_input_tokens`).
fn parse_usage(u: &Value) -> Option<panto_model::Usage> {
    let input = u.get("input_tokens")?.as_u64()?;
    let output = u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
    let cached = u
        .pointer("/input_tokens_details/cached_tokens")
        .and_then(Value::as_u64);
    Some(cached_prompt_usage(input, output, cached))
}

/// The `compaction` output items of a response object's text, each read from its exact text.
fn exact_compaction_items(response: &str) -> Vec<ContentBlock> {
    let Ok(top) = serde_json::from_str::<HashMap<String, Box<RawValue>>>(response) else {
        return Vec::new();
    };
    let Some(output) = top.get("output") else {
        return Vec::new();
    };
    let Ok(items) = serde_json::from_str::<Vec<Box<RawValue>>>(output.get()) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| serde_json::from_str::<ContentBlock>(item.get()).ok())
        .filter(|b| matches!(b, ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES)))
        .collect()
}

/// Puts the exact `compaction` items in place of the ones read from a parsed value.
fn exact_compactions(message: &mut Message, exact: Vec<ContentBlock>) {
    let mut exact = exact.into_iter();
    for block in &mut message.content {
        if let ContentBlock::Other(o) = block
            && o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES)
        {
            match exact.next() {
                Some(found) => *block = found,
                None => return,
            }
        }
    }
}

adapter_common!(OpenAiResponsesProvider, OpenAiResponses);

/// The protocol description.
#[derive(Debug)]
pub(crate) struct ResponsesWire {
    pub(crate) encrypted_reasoning: bool,
}

impl Wire for ResponsesWire {
    type Stream = ResponsesStream;

    fn protocol(&self) -> Protocol {
        Protocol::OpenAiResponses
    }

    fn endpoint(&self, base: &BaseUrl, _request: &Request, _stream: bool) -> String {
        base.endpoint("v1", "responses")
    }

    fn headers(&self, key: &ApiKey, _request: &Request, headers: &mut HeaderMap) {
        key_header(headers, AUTHORIZATION, "Bearer ", key);
    }

    fn body(&self, request: &Request, stream: bool) -> WireBody {
        wire_body(request, stream, self.encrypted_reasoning)
    }

    fn parse(&self, body: &Value) -> Result<Message, ProviderError> {
        parse_response(body)
    }

    fn parse_bytes(&self, bytes: &[u8], value: &Value) -> Result<Message, ProviderError> {
        let mut message = parse_response(value)?;
        if let Ok(text) = std::str::from_utf8(bytes) {
            exact_compactions(&mut message, exact_compaction_items(text));
        }
        Ok(message)
    }

    fn stream(&self) -> ResponsesStream {
        ResponsesStream::default()
    }

    fn settle(&self, request: &Request, message: &mut Message) {
        settle_stop_reason(request, message);
    }
}

/// llama.cpp's `/v1/responses` says `completed` for an answer cut at `max_output_tokens`
/// (`OpenAI` says `incomplete`), so the output count is the only sign: an answer that used the
/// whole output limit stopped there. Harmless for `OpenAI`, whose `output_tokens` (reasoning
/// included) reaches the limit only when the answer was cut.
fn settle_stop_reason(request: &Request, message: &mut Message) {
    let at_limit = message
        .usage
        .as_ref()
        .is_some_and(|u| u.output_tokens >= u64::from(request.max_output_tokens));
    if at_limit && message.stop_reason.as_deref() == Some(stop_reason::END_TURN) {
        message.stop_reason = Some(stop_reason::MAX_TOKENS.into());
    }
}

/// The `input` items of a request. A leading compaction message that carries an `OpenAI`
/// native payload becomes that payload's items, exactly as `/responses/compact` returned
/// them; every other compaction is the summary's text.
fn render_input(request: &Request, splice: &mut Splice) -> Vec<Value> {
    let mut input = Vec::new();
    let mut messages = request.messages.as_slice();
    if let Some(ContentBlock::Compaction(c)) = messages.first().and_then(|m| m.content.first())
        && c.native_protocol() == Some(NATIVE_OPENAI_RESPONSES)
        && let Some(items) = c.native_payload()
    {
        input.extend(items.iter().map(|item| splice.raw(item.json())));
        messages = &messages[1..];
    }
    for message in prepare(messages, &compaction_text, Some(NATIVE_OPENAI_RESPONSES)) {
        match message.role {
            Role::User => render_user(&message, &mut input),
            Role::Assistant => render_assistant(&message, &mut input, splice),
        }
    }
    input
}

/// The request body as it goes on the wire.
fn wire_body(request: &Request, stream: bool, encrypted_reasoning: bool) -> WireBody {
    let mut splice = Splice::default();
    let input = render_input(request, &mut splice);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !request.system.is_empty() {
        body.insert("instructions".into(), json!(request.system));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("max_output_tokens".into(), json!(request.max_output_tokens));
    body.insert("store".into(), Value::Bool(false));
    if encrypted_reasoning {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.input_schema})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    render_options(request, &mut body);
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    WireBody::new(Value::Object(body), splice, request)
}

/// The request options this protocol carries (see [`OpenAiResponsesProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    insert_sampling(options, body, "top_p");
    if let Some(effort) = options.reasoning_effort {
        body.insert("reasoning".into(), json!({"effort": effort.as_str()}));
    }
    let choice = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!("auto")),
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) => Some(json!({"type": "function", "name": name})),
        _ => None,
    });
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
}

fn input_image(source: &Value) -> Option<Value> {
    image_url(source).map(|url| json!({"type": "input_image", "image_url": url}))
}

/// A user message: `function_call_output` items first, then the message, then the images the
/// tool results held (outputs are strings here).
fn render_user(message: &Message, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    let mut result_images = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(r) => {
                let (text, images) = flatten_result(r, true);
                out.push(json!({"type": "function_call_output", "call_id": r.tool_use_id, "output": text}));
                result_images.extend(images);
            }
            ContentBlock::Text(t) => parts.push(json!({"type": "input_text", "text": t.text})),
            ContentBlock::Image(i) => parts.extend(input_image(&i.source)),
            _ => {}
        }
    }
    if !parts.is_empty() {
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
    if !result_images.is_empty() {
        let mut parts =
            vec![json!({"type": "input_text", "text": "Images returned by the tool calls above:"})];
        parts.extend(result_images.iter().filter_map(|i| input_image(&i.source)));
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
}

/// An assistant message: its blocks in order, as output-text messages, function calls,
/// reasoning items (when they carry encrypted content) and native compaction items (exactly as
/// received). A reasoning item is sent only with the item that followed it: the API refuses
/// one "provided without its required following item".
fn render_assistant(message: &Message, out: &mut Vec<Value>, splice: &mut Splice) {
    let start = out.len();
    let mut text: Vec<Value> = Vec::new();
    let flush = |text: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(
                json!({"type": "message", "role": "assistant", "content": std::mem::take(text)}),
            );
        }
    };
    for block in &message.content {
        match block {
            ContentBlock::Text(t) => text.push(json!({"type": "output_text", "text": t.text})),
            ContentBlock::ToolUse(u) => {
                flush(&mut text, out);
                out.push(
                    json!({"type": "function_call", "call_id": u.id, "name": u.name,
                                "arguments": arguments(&u.input)}),
                );
            }
            ContentBlock::Thinking(t) => {
                if let Some(encrypted) = t.extra.get(ENCRYPTED_CONTENT).and_then(Value::as_str) {
                    flush(&mut text, out);
                    let summary: Vec<Value> = if t.thinking.is_empty() {
                        Vec::new()
                    } else {
                        vec![json!({"type": "summary_text", "text": t.thinking})]
                    };
                    out.push(json!({"type": "reasoning", "summary": summary,
                                    "encrypted_content": encrypted}));
                }
            }
            ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES) => {
                flush(&mut text, out);
                if let Ok(item) = serde_json::to_string(&ContentBlock::Other(o.clone())) {
                    out.push(splice.raw(&item));
                }
            }
            _ => {}
        }
    }
    flush(&mut text, out);
    // A reasoning item that nothing of its message follows (an answer cut while it reasoned).
    while out.len() > start
        && out
            .last()
            .and_then(|item| item.get("type"))
            .and_then(Value::as_str)
            == Some("reasoning")
    {
        out.pop();
    }
}

/// Statuses and incomplete reasons on the session file's stop reasons.
const STOP_REASONS: StopReasons = StopReasons {
    end: "completed",
    map: &[
        ("max_output_tokens", stop_reason::MAX_TOKENS),
        ("content_filter", stop_reason::REFUSAL),
    ],
};

/// Content blocks from `output` items.
fn parse_output(items: &[Value]) -> Result<Vec<ContentBlock>, ProviderError> {
    let mut content = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message" => {
                let parts = item.get("content").and_then(Value::as_array);
                let text: String = parts
                    .into_iter()
                    .flatten()
                    .filter_map(|p| {
                        p.get("text")
                            .or_else(|| p.get("refusal"))
                            .and_then(Value::as_str)
                    })
                    .collect();
                if !text.is_empty() {
                    content.push(ContentBlock::text(text));
                }
            }
            "function_call" => {
                let field = |k: &str| item.get(k).and_then(Value::as_str);
                let name =
                    field("name").ok_or_else(|| malformed(format!("output[{i}] has no name")))?;
                let id = field("call_id")
                    .or_else(|| field("id"))
                    .ok_or_else(|| malformed(format!("output[{i}] has no call_id")))?;
                content.push(ContentBlock::ToolUse(ToolUseBlock::new(
                    id,
                    name,
                    parse_arguments(field("arguments").unwrap_or_default()),
                )));
            }
            "reasoning" => {
                // Summaries (OpenAI) or full reasoning text (open models through llama.cpp).
                let texts = |key: &str| -> Vec<String> {
                    item.get(key)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                };
                let mut thinking = texts("summary");
                if thinking.is_empty() {
                    thinking = texts("content");
                }
                let mut extra = Extra::new();
                if let Some(e) = item.get(ENCRYPTED_CONTENT).filter(|e| e.is_string()) {
                    extra.insert(ENCRYPTED_CONTENT.into(), e.clone());
                }
                if !thinking.is_empty() || !extra.is_empty() {
                    content.push(ContentBlock::Thinking(
                        ThinkingBlock::new(thinking.join("\n\n"), None).with_extra(extra),
                    ));
                }
            }
            // A compaction item (`context_management` compacted the input): kept whole, sent
            // back as it came (the exact text is restored from the answer's bytes).
            "compaction" => {
                let block: ContentBlock = serde_json::from_value(item.clone())
                    .map_err(|e| malformed(format!("output[{i}] cannot be read: {e}")))?;
                content.push(block);
            }
            other => tracing::debug!(kind = other, "ignoring an output item"),
        }
    }
    Ok(content)
}

/// Builds the message from a whole response object (the non-streaming answer, or the one in
/// `response.completed`), with `items` standing in for an empty `output`.
fn message_from(response: &Value, items: Option<Vec<Value>>) -> Result<Message, ProviderError> {
    let output = response.get("output").and_then(Value::as_array);
    let output = match (output, items) {
        (Some(o), _) if !o.is_empty() => o.clone(),
        (_, Some(items)) => items,
        (Some(o), None) => o.clone(),
        (None, None) => return Err(malformed("the answer has no `output`")),
    };
    let content = parse_output(&output)?;
    let calls = has_calls(&content);
    let mut message = assistant(content);
    message.model = response
        .get("model")
        .and_then(Value::as_str)
        .map(Name::from);
    // A whole response is `completed` (a natural end) unless it says why it is incomplete.
    let reason = match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .unwrap_or("incomplete"),
        _ => STOP_REASONS.end,
    };
    message.stop_reason = Some(map_stop_reason(&STOP_REASONS, reason, calls));
    message.usage = response.get("usage").and_then(parse_usage);
    Ok(message)
}

/// Converts a non-streaming answer.
pub(crate) fn parse_response(body: &Value) -> Result<Message, ProviderError> {
    match body.get("status").and_then(Value::as_str) {
        None | Some("completed" | "incomplete") => message_from(body, None),
        Some(status) => Err(malformed(format!("the response has status `{status}`"))),
    }
}

/// An output item being streamed.
#[derive(Debug, Default)]
struct ItemBuild {
    item: Value,
    done: bool,
    text: String,
    arguments: String,
    reasoning: String,
}

impl ItemBuild {
    /// The item: as `output_item.done` gave it, or rebuilt from the deltas.
    fn into_item(self) -> Value {
        if self.done {
            return self.item;
        }
        let mut item = self.item;
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                item["content"] = json!([{"type": "output_text", "text": self.text}]);
            }
            Some("function_call") => item["arguments"] = json!(self.arguments),
            Some("reasoning") if !self.reasoning.is_empty() => {
                item["summary"] = json!([{"type": "summary_text", "text": self.reasoning}]);
            }
            _ => {}
        }
        item
    }
}

/// The state of one streamed answer.
///
/// Items are found by `output_index` when the server sends it (`OpenAI`), else by item id
/// (llama.cpp sends only `item_id`).
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    items: Vec<ItemBuild>,
    by_index: HashMap<u64, usize>,
    by_id: HashMap<String, usize>,
    response: Option<Value>,
    /// The text of the final response object, whose `compaction` items are kept exactly.
    completed: Option<String>,
}

impl ResponsesStream {
    /// The item an event is about, created when it is new.
    fn slot(&mut self, data: &Value, item: Option<&Value>) -> &mut ItemBuild {
        let index = data.get("output_index").and_then(Value::as_u64);
        let id = data
            .get("item_id")
            .or_else(|| item.and_then(|i| i.get("id")))
            .and_then(Value::as_str);
        let found = index
            .and_then(|i| self.by_index.get(&i))
            .or_else(|| id.and_then(|id| self.by_id.get(id)))
            .copied();
        let slot = found.unwrap_or_else(|| {
            self.items.push(ItemBuild::default());
            self.items.len() - 1
        });
        if let Some(index) = index {
            self.by_index.insert(index, slot);
        }
        if let Some(id) = id {
            self.by_id.insert(id.to_owned(), slot);
        }
        &mut self.items[slot]
    }
}

impl StreamParser for ResponsesStream {
    fn event(&mut self, event: &SseEvent, sink: &mut Sink<'_>) -> Result<bool, ProviderError> {
        if event.event == "error"
            && (event.raw || serde_json::from_str::<Value>(&event.data).is_err())
        {
            return Err(classify::classify_stream_error(
                Protocol::OpenAiResponses,
                &error_payload(event),
            ));
        }
        let data = event_json(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let delta = data
            .get("delta")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match kind {
            "error" | "response.failed" => {
                return Err(classify::classify_stream_error(
                    Protocol::OpenAiResponses,
                    &data,
                ));
            }
            "response.created" | "response.in_progress" => {
                self.response = data.get("response").cloned();
            }
            "response.output_item.added" => {
                let item = data.get("item").cloned().unwrap_or_default();
                if item.get("type").and_then(Value::as_str) == Some("function_call")
                    && let Some(name) = item.get("name").and_then(Value::as_str)
                {
                    sink.tool_call(name);
                }
                let build = self.slot(&data, Some(&item));
                build.item = item;
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                sink.text(delta);
                self.slot(&data, None).text.push_str(delta);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                sink.thinking(delta);
                self.slot(&data, None).reasoning.push_str(delta);
            }
            "response.function_call_arguments.delta" => {
                self.slot(&data, None).arguments.push_str(delta);
            }
            "response.output_item.done" => {
                let item = data.get("item").cloned().unwrap_or_default();
                let build = self.slot(&data, Some(&item));
                build.item = item;
                build.done = true;
            }
            "response.completed" | "response.incomplete" => {
                self.response = Some(
                    data.get("response")
                        .cloned()
                        .ok_or_else(|| malformed(format!("`{kind}` without `response`")))?,
                );
                self.completed =
                    serde_json::from_str::<HashMap<String, Box<RawValue>>>(&event.data)
                        .ok()
                        .and_then(|top| top.get("response").map(|r| r.get().to_owned()));
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, terminal: bool) -> Result<Message, ProviderError> {
        let (true, Some(response)) = (terminal, self.response) else {
            return Err(malformed("the stream ended before `response.completed`"));
        };
        let items = self.items.into_iter().map(ItemBuild::into_item).collect();
        let mut message = message_from(&response, Some(items))?;
        if let Some(text) = &self.completed {
            exact_compactions(&mut message, exact_compaction_items(text));
        }
        Ok(message)
    }
}

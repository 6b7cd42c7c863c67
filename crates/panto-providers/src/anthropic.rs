//! The Anthropic Messages adapter: `POST {base}/v1/messages`, JSON or SSE.

use std::collections::{BTreeMap, HashMap};

use panto_model::{
    ContentBlock, Extra, Message, NATIVE_ANTHROPIC, NATIVE_OPENAI_RESPONSES, Name, OtherBlock,
    Role, THINKING_RESET, TextBlock, ThinkingBlock, ToolResultContent, ToolUseBlock, Usage,
};
use panto_provider::{EventSink, NativeCompaction, Provider, ProviderError, Request, ToolChoice};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::adapter::adapter_common;
use crate::body::{Splice, WireBody};
use crate::classify;
use crate::config::{BaseUrl, Config, Error};
use crate::native;
use crate::prepare::{compaction_text, prepare};
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::{assistant, insert_sampling, key_header, reasoning_budget, tool_choice};
use crate::sse::SseEvent;
use crate::thinking::{THINKING_BINDING_BETA, thinking_replay};
use crate::transport::{
    Recovery, Sink, StreamParser, Transport, Wire, error_payload, event_json, malformed,
};

/// The `anthropic-beta` value of on-demand compaction (the `compaction` parameter and its
/// signed blocks), sent with the request that asks for a summary and with every later request
/// that carries the signed block.
pub const COMPACT_ON_DEMAND_BETA: &str = "compact-2026-09-04";

/// The summarization prompt sent before the extra instructions of a native compaction run,
/// since `compaction.instructions` replaces the API's default prompt.
const SUMMARY_BASE: &str = "Summarize the conversation so far so that the work can continue \
     from the summary alone: the user's goal and every request, the decisions taken and why, the \
     files, commands and results that matter, errors and how they were resolved, and what is \
     still to do.";

/// The `anthropic-beta` value of compaction at a token threshold
/// (`context_management.edits: [{type: "compact_20260112"}]`), whose `compaction` blocks carry
/// no signature.
pub const COMPACT_THRESHOLD_BETA: &str = "compact-2026-01-12";

/// The `anthropic-version` header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Anthropic Messages API (and servers that speak it, such as llama.cpp's `/v1/messages`).
///
/// Thinking is sent back only where its prefix is unchanged (Anthropic's preserved thinking,
/// see `panto_providers::wire::thinking_replay`): the thinking of kept copies and of the turns
/// before a refusal is left out, and the current tool loop's is sent with
/// `thinking.block_binding.prefix_mismatch_behavior: "drop_block"`. A request refused because
/// a thinking block "is bound to a different conversation" is sent once more without that
/// thinking (the caller hears a `StreamEvent::Notice`), and the reply is marked
/// `thinking_reset` so that every later request makes the same choice. Native compaction
/// blocks (`"type":"compaction"` with `content` and `signature`) are kept and sent back byte
/// for byte, with the beta header they need; [`Provider::compact_natively`] asks for
/// on-demand compaction (`compact-2026-09-04`).
///
/// Request options: `temperature`, `top_p`, `tool_choice` (`auto`, `none`, `any`, or one
/// `tool`; sent only when the request has tools) and the reasoning effort as extended
/// thinking (`thinking.budget_tokens`: 1,024, 8,192 or 24,576 tokens, kept below
/// `max_tokens`; not sent when `max_tokens` leaves less than the minimum of 1,024). The API
/// itself refuses some combinations with thinking (a temperature other than 1, a forced tool).
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub struct AnthropicProvider {
    transport: Transport,
    wire: AnthropicWire,
}

impl AnthropicProvider {
    /// The official API.
    pub const DEFAULT_BASE_URL: &'static str = Protocol::Anthropic.environment().default_base_url;

    /// An adapter with this configuration.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`].
    pub fn new(config: Config) -> Result<AnthropicProvider, Error> {
        Ok(AnthropicProvider {
            transport: Transport::new(config)?,
            wire: AnthropicWire::default(),
        })
    }

    /// On-demand compaction (`compaction: {"type": "summarize"}`, beta `compact-2026-09-04`):
    /// the conversation of `request`, with its own system prompt and tools, summarized by the
    /// API into one signed `compaction` block, returned exactly as received. `instructions`
    /// replace the API's default summarization prompt when given.
    async fn native_compaction(
        &self,
        request: &Request,
        instructions: Option<&str>,
        _events: EventSink<'_>,
    ) -> Result<NativeCompaction, ProviderError> {
        let wire = AnthropicWire {
            compaction: true,
            instructions: instructions.map(str::to_owned),
        };
        let body = wire.body(request, false);
        let url = wire.endpoint(self.transport.base(), request, false);
        let bytes = native::post(&self.transport, &wire, request, &url, &body).await?;
        native_answer(&bytes)
    }
}

/// Reads the answer to an on-demand compaction request: its content blocks exactly as
/// received, the summary of its `compaction` block, the model and the usage.
fn native_answer(bytes: &[u8]) -> Result<NativeCompaction, ProviderError> {
    let answer = native::Answer::read(bytes, "content")?;
    let mut summary = None;
    let items = answer.exact_elements("block", |text| {
        let block: ContentBlock = serde_json::from_str(text)
            .map_err(|e| malformed(format!("a compaction answer block cannot be read: {e}")))?;
        if let ContentBlock::Other(o) = &block
            && o.native_compaction() == Some(NATIVE_ANTHROPIC)
        {
            summary = Some(o.native_summary().unwrap_or_default().to_owned());
        }
        Ok(())
    })?;
    let Some(summary) = summary else {
        return Err(malformed(
            "the compaction answer holds no `compaction` block",
        ));
    };
    let native = NativeCompaction::new(NATIVE_ANTHROPIC, items).with_summary(summary);
    Ok(answer.finish(native, |usage| Some(compaction_usage(usage))))
}

/// The usage of a compaction answer: the `compaction` iterations when the API itemizes them
/// (`usage.iterations`, kept whole in `extra`), else the usage as reported.
fn compaction_usage(usage: &Value) -> Usage {
    let mut out = parse_usage(usage);
    let iterations = usage.get("iterations").and_then(Value::as_array);
    let compactions: Vec<&Value> = iterations
        .into_iter()
        .flatten()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("compaction"))
        .collect();
    if !compactions.is_empty() {
        let sum = |k: &str| {
            compactions
                .iter()
                .filter_map(|i| i.get(k))
                .filter_map(Value::as_u64)
                .sum()
        };
        out.input_tokens = sum("input_tokens");
        out.output_tokens = sum("output_tokens");
        out.cache_read_input_tokens = None;
        out.cache_creation_input_tokens = None;
    }
    out
}

adapter_common!(AnthropicProvider, Anthropic);

/// The protocol description: a conversation request, or (with `compaction`) an on-demand
/// compaction request.
#[derive(Debug, Default)]
pub(crate) struct AnthropicWire {
    compaction: bool,
    instructions: Option<String>,
}

impl Wire for AnthropicWire {
    type Stream = AnthropicStream;

    fn protocol(&self) -> Protocol {
        Protocol::Anthropic
    }

    fn endpoint(&self, base: &BaseUrl, _request: &Request, _stream: bool) -> String {
        base.endpoint("v1", "messages")
    }

    fn headers(&self, key: &ApiKey, request: &Request, headers: &mut HeaderMap) {
        key_header(headers, HeaderName::from_static("x-api-key"), "", key);
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let betas = betas(request, self.compaction);
        if !betas.is_empty()
            && let Ok(value) = HeaderValue::from_str(&betas.join(","))
        {
            headers.insert("anthropic-beta", value);
        }
    }

    fn body(&self, request: &Request, stream: bool) -> WireBody {
        let mut body = wire_body(request, stream);
        if self.compaction
            && let Value::Object(map) = &mut body.value
        {
            map.remove("stream");
            let mut compaction = json!({"type": "summarize"});
            if let Some(instructions) = &self.instructions {
                // `instructions` replace the API's own summarization prompt, so the extra
                // instructions come after a prompt of panto's that asks for the same summary.
                compaction["instructions"] = json!(format!("{SUMMARY_BASE}\n\n{instructions}"));
            }
            map.insert("compaction".into(), compaction);
        }
        body
    }

    fn parse(&self, body: &Value) -> Result<Message, ProviderError> {
        parse_message(body)
    }

    fn parse_bytes(&self, bytes: &[u8], value: &Value) -> Result<Message, ProviderError> {
        let mut message = parse_message(value)?;
        // The blocks again, from the bytes: what panto does not model (a native compaction
        // block, a redacted thinking block) keeps the exact text it arrived as.
        if let Some(content) = exact_content(bytes) {
            message.content = content;
        }
        Ok(message)
    }

    fn stream(&self) -> AnthropicStream {
        AnthropicStream::default()
    }

    fn recover(&self, request: &Request, error: &ProviderError) -> Option<Recovery> {
        if self.compaction || !is_thinking_refusal(error) {
            return None;
        }
        // Every thinking block the request sent is treated as stale from here on: the reply
        // is marked, so that later requests (and a restart) leave it out too.
        let mut again = request.clone();
        let last = again.messages.last_mut()?;
        last.extra.insert(THINKING_RESET.into(), Value::Bool(true));
        Some(Recovery {
            request: again,
            notice: "the provider refused thinking from earlier turns as bound to a different \
                     conversation; sent again without it"
                .to_owned(),
            mark: (THINKING_RESET, Value::Bool(true)),
        })
    }
}

/// Whether `error` refuses a thinking block as bound to a different conversation.
fn is_thinking_refusal(error: &ProviderError) -> bool {
    let ProviderError::InvalidRequest { message, .. } = error else {
        return false;
    };
    let text = message.to_lowercase().replace('`', "");
    text.contains("bound to a different conversation")
        || text.contains("invalid signature in thinking block")
}

/// The content blocks of an answer read from its bytes, so that each keeps its exact text.
fn exact_content(bytes: &[u8]) -> Option<Vec<ContentBlock>> {
    let top: HashMap<String, Box<RawValue>> = serde_json::from_slice(bytes).ok()?;
    serde_json::from_str(top.get("content")?.get()).ok()
}

/// Whether the request asks for thinking: panto's reasoning effort, or a `thinking` field of
/// the caller's own that does not disable it.
fn thinking_on(request: &Request) -> bool {
    thinking_budget(request).is_some()
        || request
            .options
            .extra_body
            .get("thinking")
            .and_then(|t| t.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t != "disabled")
}

/// The `anthropic-beta` values a request needs: the thinking binding controls when it sends
/// `drop_block`, and the compaction beta of every native compaction block it carries.
fn betas(request: &Request, compacting: bool) -> Vec<&'static str> {
    let mut betas = Vec::new();
    if thinking_replay(&request.messages, thinking_on(request)).drop_block {
        betas.push(THINKING_BINDING_BETA);
    }
    let mut on_demand = compacting;
    let mut threshold = false;
    for message in &request.messages {
        for block in &message.content {
            match block {
                ContentBlock::Compaction(c) if c.native_protocol() == Some(NATIVE_ANTHROPIC) => {
                    on_demand = true;
                }
                ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_ANTHROPIC) => {
                    if o.fields.contains_key("signature") {
                        on_demand = true;
                    } else {
                        threshold = true;
                    }
                }
                _ => {}
            }
        }
    }
    if on_demand {
        betas.push(COMPACT_ON_DEMAND_BETA);
    }
    if threshold {
        betas.push(COMPACT_THRESHOLD_BETA);
    }
    betas
}

/// The messages with a leading compaction message that carries an Anthropic native payload
/// replaced by what the API returned: an assistant message holding the signed block, first in
/// `messages`, exactly as received.
fn native_head(mut messages: Vec<Message>) -> Vec<Message> {
    let blocks = match messages.first().and_then(|m| m.content.first()) {
        Some(ContentBlock::Compaction(c)) if c.native_protocol() == Some(NATIVE_ANTHROPIC) => {
            c.native_payload().and_then(|items| {
                items
                    .iter()
                    .map(|raw| serde_json::from_str::<ContentBlock>(raw.json()).ok())
                    .collect::<Option<Vec<_>>>()
            })
        }
        _ => None,
    };
    if let Some(blocks) = blocks {
        messages[0] = Message::new(Role::Assistant, blocks);
    }
    messages
}

/// The request body as it goes on the wire.
fn wire_body(request: &Request, stream: bool) -> WireBody {
    let replay = thinking_replay(&request.messages, thinking_on(request));
    let kept = native_head(replay.apply(&request.messages));
    let mut splice = Splice::default();
    let messages: Vec<Value> = prepare(&kept, &compaction_text, Some(NATIVE_ANTHROPIC))
        .iter()
        .filter_map(|m| render_message(m, &mut splice))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_output_tokens));
    if !request.system.is_empty() {
        body.insert("system".into(), json!(request.system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    tool.insert("description".into(), json!(t.description));
                }
                tool.insert("input_schema".into(), t.input_schema.clone());
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    render_options(request, &mut body);
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    let mut body = WireBody::new(Value::Object(body), splice, request);
    if replay.drop_block
        && let Some(Value::Object(thinking)) = body.value.get_mut("thinking")
    {
        thinking.insert(
            "block_binding".into(),
            json!({"prefix_mismatch_behavior": "drop_block"}),
        );
    }
    body
}

/// The thinking budget panto sends for the request's reasoning effort: at least 1,024 tokens
/// and below `max_tokens`, else none.
fn thinking_budget(request: &Request) -> Option<u32> {
    request
        .options
        .reasoning_effort
        .map(|e| reasoning_budget(e).min(request.max_output_tokens.saturating_sub(1)))
        .filter(|b| *b >= 1024)
}

/// The request options this protocol carries (see [`AnthropicProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    insert_sampling(options, body, "top_p");
    let choice = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!({"type": "auto"})),
        ToolChoice::None => Some(json!({"type": "none"})),
        ToolChoice::Required => Some(json!({"type": "any"})),
        ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
        _ => None,
    });
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    // The budget must be at least 1,024 tokens and below `max_tokens`.
    if let Some(budget) = thinking_budget(request) {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
}

fn render_message(message: &Message, splice: &mut Splice) -> Option<Value> {
    let content: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| render_block(b, splice))
        .collect();
    (!content.is_empty()).then(|| json!({"role": message.role.as_str(), "content": content}))
}

/// Copies `cache_control` from a block's unmodelled fields: the one extra field every
/// Anthropic block accepts. Other extras (another provider's annotations) are not sent.
fn with_cache_control(mut block: Map<String, Value>, extra: &Extra) -> Value {
    if let Some(cc) = extra.get("cache_control") {
        block.insert("cache_control".into(), cc.clone());
    }
    Value::Object(block)
}

fn render_block(block: &ContentBlock, splice: &mut Splice) -> Option<Value> {
    let object = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Some(match block {
        ContentBlock::Text(t) => {
            with_cache_control(object(json!({"type": "text", "text": t.text})), &t.extra)
        }
        ContentBlock::Thinking(t) => {
            // A thinking block is only accepted back with the signature Anthropic gave it.
            let signature = t.signature.as_deref().filter(|s| !s.is_empty())?;
            json!({"type": "thinking", "thinking": t.thinking, "signature": signature})
        }
        ContentBlock::ToolUse(u) => with_cache_control(
            object(
                json!({"type": "tool_use", "id": u.id, "name": u.name, "input": tool_input(&u.input)}),
            ),
            &u.extra,
        ),
        ContentBlock::ToolResult(r) => {
            let mut out = object(json!({"type": "tool_result", "tool_use_id": r.tool_use_id}));
            let content = match &r.content {
                ToolResultContent::Text(s) => json!(s),
                ToolResultContent::Blocks(blocks) => Value::Array(
                    blocks
                        .iter()
                        .filter_map(|b| render_block(b, splice))
                        .collect(),
                ),
            };
            out.insert("content".into(), content);
            if let Some(is_error) = r.is_error {
                out.insert("is_error".into(), json!(is_error));
            }
            with_cache_control(out, &r.extra)
        }
        ContentBlock::Image(i) => with_cache_control(
            object(json!({"type": "image", "source": i.source})),
            &i.extra,
        ),
        // The wire layer never leaves one, but render it as text rather than drop it.
        ContentBlock::Compaction(c) => json!({"type": "text", "text": compaction_text(&c.summary)}),
        // An `OpenAI` compaction item means nothing here (it is opaque): left out.
        ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES) => {
            return None;
        }
        // Everything else panto does not model (`redacted_thinking`, a native compaction
        // block, a server tool's block) goes back exactly as it was received.
        ContentBlock::Other(o) => {
            let text = serde_json::to_string(&ContentBlock::Other(o.clone())).ok()?;
            splice.raw(&text)
        }
    })
}

/// Anthropic requires `input` to be an object; other values are wrapped.
fn tool_input(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::Null => json!({}),
        other => json!({ "value": other }),
    }
}

/// Converts a non-streaming answer.
pub(crate) fn parse_message(body: &Value) -> Result<Message, ProviderError> {
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("the answer has no `content` array"))?;
    let mut blocks = Vec::with_capacity(content.len());
    for (i, block) in content.iter().enumerate() {
        let block: ContentBlock = serde_json::from_value(block.clone())
            .map_err(|e| malformed(format!("content[{i}] cannot be read: {e}")))?;
        blocks.push(block);
    }
    let mut message = assistant(blocks);
    message.model = body.get("model").and_then(Value::as_str).map(Name::from);
    message.stop_reason = body
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(Name::from);
    message.usage = body.get("usage").map(parse_usage);
    Ok(message)
}

/// Anthropic usage already has the Contract 1 names; other fields are kept in `extra`.
fn parse_usage(usage: &Value) -> Usage {
    let mut out = Usage::default();
    merge_usage(&mut out, usage);
    out
}

/// Overwrites `usage` with the fields present in `update` (`message_delta` carries totals).
fn merge_usage(usage: &mut Usage, update: &Value) {
    let Some(map) = update.as_object() else {
        return;
    };
    for (key, value) in map {
        match key.as_str() {
            "input_tokens" => usage.input_tokens = value.as_u64().unwrap_or(usage.input_tokens),
            "output_tokens" => usage.output_tokens = value.as_u64().unwrap_or(usage.output_tokens),
            "cache_read_input_tokens" => {
                usage.cache_read_input_tokens = value.as_u64().or(usage.cache_read_input_tokens);
            }
            "cache_creation_input_tokens" => {
                usage.cache_creation_input_tokens =
                    value.as_u64().or(usage.cache_creation_input_tokens);
            }
            _ if value.is_null() => {}
            _ => {
                usage.extra.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A content block being streamed.
#[derive(Debug)]
enum Building {
    Text(TextBlock),
    Thinking(ThinkingBlock),
    ToolUse { block: ToolUseBlock, json: String },
    Other { block: OtherBlock, json: String },
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    model: Option<String>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    blocks: BTreeMap<u64, Building>,
}

impl StreamParser for AnthropicStream {
    fn event(&mut self, event: &SseEvent, sink: &mut Sink<'_>) -> Result<bool, ProviderError> {
        if event.event == "error" {
            return Err(classify::classify_stream_error(
                Protocol::Anthropic,
                &error_payload(event),
            ));
        }
        let data = event_json(event)?;
        let kind = if event.event.is_empty() {
            data.get("type").and_then(Value::as_str).unwrap_or_default()
        } else {
            event.event.as_str()
        };
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                self.model = message
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(usage) = message.get("usage") {
                    self.usage = Some(parse_usage(usage));
                }
            }
            "content_block_start" => {
                let index = index(&data)?;
                let block = data
                    .get("content_block")
                    .ok_or_else(|| malformed("content_block_start without `content_block`"))?;
                let block: ContentBlock = serde_json::from_value(block.clone())
                    .map_err(|e| malformed(format!("content_block_start cannot be read: {e}")))?;
                let building = match block {
                    ContentBlock::Text(t) => {
                        sink.text(&t.text);
                        Building::Text(t)
                    }
                    ContentBlock::Thinking(t) => {
                        sink.thinking(&t.thinking);
                        Building::Thinking(t)
                    }
                    ContentBlock::ToolUse(u) => {
                        sink.tool_call(&u.name);
                        Building::ToolUse {
                            block: u,
                            json: String::new(),
                        }
                    }
                    ContentBlock::Other(o) => Building::Other {
                        block: o,
                        json: String::new(),
                    },
                    other => {
                        return Err(malformed(format!(
                            "content_block_start with an unexpected `{}` block",
                            other.type_name()
                        )));
                    }
                };
                self.blocks.insert(index, building);
            }
            "content_block_delta" => {
                let index = index(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let field =
                    |name: &str| delta.get(name).and_then(Value::as_str).unwrap_or_default();
                let block = self.blocks.get_mut(&index).ok_or_else(|| {
                    malformed(format!("content_block_delta for unknown block {index}"))
                })?;
                match (
                    delta
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    block,
                ) {
                    ("text_delta", Building::Text(t)) => {
                        t.text.push_str(field("text"));
                        sink.text(field("text"));
                    }
                    ("thinking_delta", Building::Thinking(t)) => {
                        t.thinking.push_str(field("thinking"));
                        sink.thinking(field("thinking"));
                    }
                    ("signature_delta", Building::Thinking(t)) => {
                        t.signature
                            .get_or_insert_with(String::new)
                            .push_str(field("signature"));
                    }
                    (
                        "input_json_delta",
                        Building::ToolUse { json, .. } | Building::Other { json, .. },
                    ) => {
                        json.push_str(field("partial_json"));
                    }
                    // A native compaction block streams its summary whole in one delta, and a
                    // signed one its signature after it.
                    ("compaction_delta", Building::Other { block, .. }) => {
                        let mut content = block
                            .fields
                            .get("content")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        content.push_str(field("content"));
                        block
                            .fields
                            .insert("content".into(), Value::String(content));
                    }
                    ("signature_delta", Building::Other { block, .. }) => {
                        let mut signature = block
                            .fields
                            .get("signature")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        signature.push_str(field("signature"));
                        block
                            .fields
                            .insert("signature".into(), Value::String(signature));
                    }
                    ("citations_delta", Building::Text(t)) => {
                        if let Some(citation) = delta.get("citation") {
                            let list = match t.extra.get("citations") {
                                None => Some(Vec::new()),
                                Some(Value::Array(list)) => Some(list.clone()),
                                Some(_) => None,
                            };
                            if let Some(mut list) = list {
                                list.push(citation.clone());
                                t.extra.insert("citations".into(), Value::Array(list));
                            }
                        }
                    }
                    (kind, _) => tracing::debug!(kind, index, "ignoring an unknown delta"),
                }
            }
            "content_block_stop" => {
                let index = index(&data)?;
                if let Some(block) = self.blocks.get_mut(&index) {
                    finish_block(block)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                // The totals update the usage `message_start` opened. Without that, the input
                // side is unknown (llama-server skips `message_start` when the first token is
                // an incomplete UTF-8 sequence), and an output count alone would read as a
                // request of zero input tokens, so the reply is kept without usage.
                match (self.usage.as_mut(), data.get("usage")) {
                    (Some(usage), Some(update)) => merge_usage(usage, update),
                    (None, Some(_)) => tracing::warn!(
                        "the stream had no `message_start` usage; the reply is kept without usage"
                    ),
                    (_, None) => {}
                }
            }
            "message_stop" => return Ok(true),
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, terminal: bool) -> Result<Message, ProviderError> {
        if !terminal {
            return Err(malformed("the stream ended before `message_stop`"));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for (_, mut block) in self.blocks {
            finish_block(&mut block)?;
            content.push(match block {
                Building::Text(t) => ContentBlock::Text(t),
                Building::Thinking(t) => ContentBlock::Thinking(t),
                Building::ToolUse { block, .. } => ContentBlock::ToolUse(block),
                Building::Other { block, .. } => ContentBlock::Other(block),
            });
        }
        let mut message = assistant(content);
        message.model = self.model.map(Name::from);
        message.usage = self.usage;
        message.stop_reason = self.stop_reason.map(Name::from);
        Ok(message)
    }
}

/// Parses the accumulated input JSON of a tool call (or server tool block) once it stops.
fn finish_block(block: &mut Building) -> Result<(), ProviderError> {
    let (Building::ToolUse { json, .. } | Building::Other { json, .. }) = block else {
        return Ok(());
    };
    if json.trim().is_empty() {
        return Ok(());
    }
    let input: Value = serde_json::from_str(json).map_err(|e| {
        malformed(format!(
            "a tool call's streamed input is not valid JSON: {e}"
        ))
    })?;
    json.clear();
    match block {
        Building::ToolUse { block, .. } => block.input = input.into(),
        Building::Other { block, .. } => {
            block.fields.insert("input".into(), input);
        }
        _ => {}
    }
    Ok(())
}

fn index(data: &Value) -> Result<u64, ProviderError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("a content block event without `index`"))
}

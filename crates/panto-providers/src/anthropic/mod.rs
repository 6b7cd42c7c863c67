//! The Anthropic Messages adapter: `POST {base}/v1/messages`, JSON or SSE.
//!
//! The provider, its native compaction and its `Wire` are here; the request body is written in
//! `request.rs`, and the answer, whole or streamed, is read in `answer.rs`.

mod answer;
mod cache;
mod request;

use std::collections::HashMap;

use panto_model::{ContentBlock, Message, NATIVE_ANTHROPIC, Role, THINKING_RESET, Usage};
use panto_provider::{EventSink, NativeCompaction, Provider, ProviderError, Request};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::adapter::adapter_common;
use crate::body::WireBody;
use crate::config::{BaseUrl, Config, Error};
use crate::native;
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::key_header;
use crate::thinking::{THINKING_BINDING_BETA, thinking_replay};
use crate::transport::{Recovery, Transport, Wire, malformed};

pub use cache::{
    EXTENDED_CACHE_TTL_BETA, LOOKBACK_BLOCKS, MAX_BREAKPOINTS, minimum_cacheable_tokens,
};

use answer::{AnthropicStream, parse_message, parse_usage};
use request::{thinking_budget, wire_body};

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
    if cache::uses_long_lifetime(request) {
        betas.push(EXTENDED_CACHE_TTL_BETA);
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

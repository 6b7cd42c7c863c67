//! The `OpenAI` Responses adapter: `POST {base}/v1/responses`, stateless (`store: false`).
//!
//! The provider, its native compaction and its `Wire` are here; the request body is written in
//! `request.rs`, and the answer, whole or streamed, is read in `answer.rs`.

mod answer;
mod request;

use std::collections::HashMap;

use panto_model::stop_reason;
use panto_model::{ContentBlock, Message, NATIVE_OPENAI_RESPONSES};
use panto_provider::{EventSink, NativeCompaction, Provider, ProviderError, Request};
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::adapter::adapter_common;
use crate::body::{Splice, WireBody};
use crate::config::{BaseUrl, Config, Error};
use crate::native;
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::{cached_prompt_usage, key_header};
use crate::transport::{Transport, Wire, malformed};

use answer::{ResponsesStream, parse_response};
use request::{render_input, wire_body};

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
    let written = u
        .pointer("/input_tokens_details/cache_write_tokens")
        .and_then(Value::as_u64);
    Some(cached_prompt_usage(input, output, cached, written))
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

//! How the Anthropic adapter reads an answer: whole, or as its stream of events.

use std::collections::BTreeMap;

use panto_model::{
    ContentBlock, Message, Name, OtherBlock, TextBlock, ThinkingBlock, ToolUseBlock, Usage,
};
use panto_provider::ProviderError;
use serde_json::Value;

use crate::classify;
use crate::protocol::Protocol;
use crate::shared::assistant;
use crate::sse::SseEvent;
use crate::transport::{Sink, StreamParser, error_payload, event_json, malformed};

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
pub(super) fn parse_usage(usage: &Value) -> Usage {
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

//! How the OpenAI Responses adapter reads an answer: whole, or as its stream of events.

use std::collections::HashMap;

use panto_model::stop_reason;
use panto_model::{ContentBlock, Extra, Message, Name, ThinkingBlock, ToolUseBlock};
use panto_provider::ProviderError;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::classify;
use crate::protocol::Protocol;
use crate::shared::{StopReasons, assistant, has_calls, map_stop_reason, parse_arguments};
use crate::sse::SseEvent;
use crate::transport::{Sink, StreamParser, error_payload, event_json, malformed};

use super::{ENCRYPTED_CONTENT, exact_compaction_items, exact_compactions, parse_usage};

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

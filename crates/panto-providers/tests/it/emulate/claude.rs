//! An Anthropic Messages emulator that enforces preserved thinking and speaks on-demand
//! compaction.
//!
//! The rules, as Anthropic's pages state them:
//! - "Preserved thinking" (<https://platform.claude.com/docs/en/build-with-claude/preserved-thinking>):
//!   a `thinking` or `redacted_thinking` block sent back is checked against its prefix, the
//!   top-level `system`, `tools` and every message before it (cache markers left out); a
//!   changed prefix is a 400 ("…Invalid `signature` in `thinking` block. The block is bound to
//!   a different conversation.") unless `thinking.block_binding.prefix_mismatch_behavior` is
//!   `drop_block` (beta `thinking-binding-controls-2026-08-01`), which drops the block instead.
//!   Here a signature is bound to a digest of that prefix as it was sent.
//! - "Thinking in tool and multi-turn workflows": with thinking on, the assistant message whose
//!   tool calls are answered must bring its thinking back.
//! - "Handle tool calls" (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls>):
//!   the results of an assistant message's `tool_use` blocks come in the very next user
//!   message, one `tool_result` per call, before any text of that message; a `tool_result`
//!   answers a `tool_use` of the message right before it.
//! - "Compaction on demand" (<https://platform.claude.com/docs/en/build-with-claude/compaction-on-demand>):
//!   a request with `"compaction": {"type": "summarize"}` and beta `compact-2026-09-04` is
//!   answered with one `compaction` block (readable `content`, a `signature`) and
//!   `stop_reason: "compaction"`; the block goes back unmodified, first in `messages`, with the
//!   beta on every request that carries it; `compaction` and `context_management` do not mix.
//! - "Compaction and preserved thinking" (<https://platform.claude.com/docs/en/build-with-claude/compaction-thinking-blocks>):
//!   the check accepts the replacement the API wrote, so a kept turn's thinking stays valid
//!   when the kept turns follow the summarized messages unchanged, the first kept message has
//!   the other role, and `system` and `tools` are unchanged. Here a signed block stands, in the
//!   prefix, for the messages it summarized exactly as they were sent, so any other change
//!   shows as a different prefix.

use std::collections::HashMap;

use serde_json::{Value, json};
use wiremock::matchers::path;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use super::{SUMMARY_PROMPT, Seen, Shared, digest, serve, tokens};

/// One on-demand compaction the emulator wrote.
#[derive(Clone, Debug)]
pub(crate) struct Compaction {
    /// The block's exact text.
    pub(crate) raw: String,
    /// Its readable summary.
    pub(crate) content: String,
    /// The messages it stands for, as they were sent.
    pub(crate) summarized: Vec<Value>,
}

/// What the emulator knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The window, in tokens (a quarter of a request's bytes).
    pub(crate) window: u64,
    /// Thinking signatures and the digest of the prefix each is bound to.
    pub(crate) signatures: HashMap<String, String>,
    /// Compaction blocks by signature.
    pub(crate) compactions: HashMap<String, Compaction>,
    /// Every request, in order.
    pub(crate) seen: Vec<Seen>,
    /// When set, compaction requests are answered with this status and message.
    pub(crate) fail_compaction: Option<(u16, String)>,
    /// When set, a thinking block sent is not checked but bound to its prefix as sent: what
    /// the API would have issued for that conversation (a test seeds a conversation it did
    /// not produce here, then checks what panto makes of it).
    pub(crate) prime: bool,
    /// Thinking blocks dropped under `drop_block`.
    pub(crate) dropped: usize,
    /// Thinking blocks checked and accepted.
    pub(crate) accepted: usize,
    /// Requests that carried a compaction block byte for byte.
    pub(crate) exact_blocks: usize,
    replies: usize,
}

/// The emulator, shared with the test.
#[derive(Clone, Debug, Default)]
pub(crate) struct Claude(pub(crate) Shared<State>);

impl Claude {
    /// Starts an emulator with a window of `window` tokens.
    pub(crate) async fn start(window: u64) -> (MockServer, Claude) {
        let claude = Claude(Shared::new(State {
            window,
            ..State::default()
        }));
        serve(claude, [path("/v1/messages")]).await
    }

    /// The state.
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock()
    }
}

/// An Anthropic error answer.
fn error(status: u16, kind: &str, message: &str) -> (u16, String) {
    (
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
    )
}

impl Respond for Claude {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let raw = String::from_utf8_lossy(&request.body).into_owned();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let betas: Vec<String> = request
            .headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(',')
            .map(|b| b.trim().to_owned())
            .collect();
        let mut state = self.0.lock();
        let kind = if body.get("compaction").is_some() {
            "compaction"
        } else if body
            .get("system")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(SUMMARY_PROMPT))
        {
            "summary"
        } else {
            "chat"
        };
        let answer = state.answer(&raw, &body, &betas, kind);
        let (status, text, sse) = match answer {
            Ok((text, sse)) => (200, text, sse),
            Err((status, text)) => (status, text, false),
        };
        let refusal = (status != 200).then(|| text.clone());
        state.seen.push(Seen {
            path: request.url.path().to_owned(),
            raw,
            body,
            status,
            refusal,
            kind,
        });
        let template = ResponseTemplate::new(status);
        if sse {
            template.set_body_raw(text.into_bytes(), "text/event-stream")
        } else {
            template.set_body_raw(text.into_bytes(), "application/json")
        }
    }
}

impl State {
    fn answer(
        &mut self,
        raw: &str,
        body: &Value,
        betas: &[String],
        kind: &'static str,
    ) -> Result<(String, bool), (u16, String)> {
        let has_beta = |b: &str| betas.iter().any(|x| x == b);
        let n = tokens(raw.as_bytes());
        if n > self.window {
            return Err(error(
                400,
                "invalid_request_error",
                &format!("prompt is too long: {n} tokens > {} maximum", self.window),
            ));
        }
        if kind == "compaction" {
            if !has_beta("compact-2026-09-04") {
                return Err(error(
                    400,
                    "invalid_request_error",
                    "compaction: this field requires the anthropic-beta header compact-2026-09-04",
                ));
            }
            if body.get("context_management").is_some() {
                return Err(error(
                    400,
                    "invalid_request_error",
                    "compaction and context_management cannot be used together",
                ));
            }
            if let Some((status, message)) = self.fail_compaction.clone() {
                return Err(error(status, "invalid_request_error", &message));
            }
        }
        let binding = body.pointer("/thinking/block_binding/prefix_mismatch_behavior");
        if binding.is_some() && !has_beta("thinking-binding-controls-2026-08-01") {
            return Err(error(
                400,
                "invalid_request_error",
                "thinking.block_binding: this field requires the anthropic-beta header thinking-binding-controls-2026-08-01",
            ));
        }
        let drop = binding.and_then(Value::as_str) == Some("drop_block");
        let thinking_on = body
            .pointer("/thinking/type")
            .and_then(Value::as_str)
            .is_some_and(|t| t == "enabled" || t == "adaptive");
        let system = body.get("system").cloned().unwrap_or(Value::Null);
        let tools = body.get("tools").cloned().unwrap_or(Value::Null);
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Err(message) = pairing(&messages) {
            return Err(error(400, "invalid_request_error", &message));
        }
        // The prefix as the check sees it: a compaction block stands for what it summarized.
        let mut expanded: Vec<Value> = Vec::new();
        let mut exact = false;
        let (mut accepted, mut dropped) = (0, 0);
        for (i, message) in messages.iter().enumerate() {
            let content = match message.get("content") {
                Some(Value::Array(blocks)) => blocks.clone(),
                Some(text) => vec![json!({"type": "text", "text": text})],
                None => Vec::new(),
            };
            let mut blocks: Vec<Value> = Vec::new();
            for (j, block) in content.iter().enumerate() {
                match block
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "compaction" => {
                        if i != 0 || j != 0 {
                            return Err(error(
                                400,
                                "invalid_request_error",
                                &format!(
                                    "messages.{i}.content.{j}: a compaction block must be the first block of the first message"
                                ),
                            ));
                        }
                        if !has_beta("compact-2026-09-04") {
                            return Err(error(
                                400,
                                "invalid_request_error",
                                "messages.0.content.0: compaction blocks require the anthropic-beta header compact-2026-09-04",
                            ));
                        }
                        let signature = block
                            .get("signature")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let Some(record) = self.compactions.get(signature) else {
                            return Err(error(
                                400,
                                "invalid_request_error",
                                "messages.0.content.0: Invalid `signature` in `compaction` block",
                            ));
                        };
                        if block.get("content").and_then(Value::as_str)
                            != Some(record.content.as_str())
                            || !raw.contains(&record.raw)
                        {
                            return Err(error(
                                400,
                                "invalid_request_error",
                                "messages.0.content.0: the `compaction` block was not sent back unmodified",
                            ));
                        }
                        exact = true;
                        expanded.extend(record.summarized.iter().cloned());
                    }
                    kind @ ("thinking" | "redacted_thinking") => {
                        let field = if kind == "thinking" {
                            "signature"
                        } else {
                            "data"
                        };
                        let signature =
                            block.get(field).and_then(Value::as_str).unwrap_or_default();
                        let prefix = json!({"system": system, "tools": tools, "messages": expanded, "blocks": blocks});
                        if self.prime {
                            self.signatures
                                .insert(signature.to_owned(), digest(&prefix));
                        } else if self.signatures.get(signature) == Some(&digest(&prefix)) {
                            accepted += 1;
                        } else if drop {
                            dropped += 1;
                        } else {
                            return Err(error(
                                400,
                                "invalid_request_error",
                                &format!(
                                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a different conversation."
                                ),
                            ));
                        }
                        blocks.push(block.clone());
                    }
                    _ => blocks.push(block.clone()),
                }
            }
            if !blocks.is_empty() {
                expanded.push(json!({"role": message.get("role"), "content": blocks}));
            }
        }
        // With thinking on, the assistant message whose tool calls are answered brings its
        // thinking back.
        if thinking_on
            && let [.., call, results] = messages.as_slice()
            && results.get("role").and_then(Value::as_str) == Some("user")
            && has_type(results, "tool_result")
            && call.get("role").and_then(Value::as_str) == Some("assistant")
        {
            // A compaction block leading the message stands for earlier messages.
            let blocks = call
                .get("content")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let first = blocks
                .iter()
                .filter_map(|b| b.get("type").and_then(Value::as_str))
                .find(|t| *t != "compaction")
                .unwrap_or_default()
                .to_owned();
            let first = first.as_str();
            if first != "thinking" && first != "redacted_thinking" {
                let k = messages.len() - 2;
                return Err(error(
                    400,
                    "invalid_request_error",
                    &format!(
                        "messages.{k}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block."
                    ),
                ));
            }
        }
        self.accepted += accepted;
        self.dropped += dropped;
        if exact {
            self.exact_blocks += 1;
        }
        let model = body.get("model").cloned().unwrap_or(Value::Null);
        self.replies += 1;
        let r = self.replies;
        if kind == "compaction" {
            let summary = summarize(&expanded);
            let signature = format!("cmpsig-{r}");
            let block = format!(
                r#"{{"type":"compaction","content":{},"signature":"{signature}","tool_changes":{{"kept":0,"ratio":1.50}}}}"#,
                Value::String(summary.clone())
            );
            self.compactions.insert(
                signature,
                Compaction {
                    raw: block.clone(),
                    content: summary.clone(),
                    summarized: expanded,
                },
            );
            let out = (summary.len() / 4) as u64;
            return Ok((
                format!(
                    r#"{{"id":"msg_{r}","type":"message","role":"assistant","model":{model},"content":[{block}],"stop_reason":"compaction","stop_sequence":null,"usage":{{"input_tokens":{n},"output_tokens":{out},"iterations":[{{"type":"compaction","input_tokens":{n},"output_tokens":{out}}}]}}}}"#
                ),
                false,
            ));
        }
        // The reply's thinking is bound to everything it answers.
        let prefix = json!({"system": system, "tools": tools, "messages": expanded, "blocks": []});
        let signature = format!("sig-{r}-{}", digest(&prefix));
        self.signatures.insert(signature.clone(), digest(&prefix));
        let thinking = json!({"type": "thinking", "thinking": format!("Thinking about reply {r}."), "signature": signature});
        let last = messages.last().cloned().unwrap_or(Value::Null);
        let wants_tool = kind == "chat"
            && !has_type(&last, "tool_result")
            && last.to_string().contains("[tool]");
        let (second, stop) = if kind == "summary" {
            (
                json!({"type": "text", "text": format!("Summary {r}: the user sent numbered notes about the parser, the assistant answered each, and the work goes on from the latest note.")}),
                "end_turn",
            )
        } else if wants_tool {
            (
                json!({"type": "tool_use", "id": format!("toolu_{r}"), "name": "lookup", "input": {"n": r}}),
                "tool_use",
            )
        } else {
            (
                json!({"type": "text", "text": format!("Reply {r}.")}),
                "end_turn",
            )
        };
        let content = json!([thinking, second]);
        let usage = json!({"input_tokens": n, "output_tokens": 20});
        if body.get("stream") == Some(&Value::Bool(true)) {
            return Ok((stream(&model, &content, stop, &usage), true));
        }
        Ok((
            json!({"id": format!("msg_{r}"), "type": "message", "role": "assistant", "model": model,
                   "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
            .to_string(),
            false,
        ))
    }
}

/// The rule of tool use: each user message that follows an assistant message with `tool_use`
/// blocks starts with one `tool_result` for each of them, and no `tool_result` answers
/// anything but a call of the message right before it. The errors are the API's words.
fn pairing(messages: &[Value]) -> Result<(), String> {
    let blocks = |m: &Value| -> Vec<Value> {
        m.get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let ids = |m: &Value, kind: &str, field: &str| -> Vec<String> {
        blocks(m)
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
            .filter_map(|b| b.get(field).and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    for (i, message) in messages.iter().enumerate() {
        let calls = if i == 0 {
            Vec::new()
        } else {
            ids(&messages[i - 1], "tool_use", "id")
        };
        let results = ids(message, "tool_result", "tool_use_id");
        for id in &results {
            if !calls.contains(id) {
                return Err(format!(
                    "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        if calls.is_empty() {
            continue;
        }
        let missing: Vec<&String> = calls.iter().filter(|c| !results.contains(c)).collect();
        if !missing.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let first_other = blocks(message)
            .iter()
            .position(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
        if first_other.is_some_and(|k| k < results.len()) {
            return Err(format!(
                "messages.{i}: tool_result blocks must come first in the content of the message that answers the tool calls"
            ));
        }
    }
    Ok(())
}

/// Whether a message holds a block of type `kind`.
fn has_type(message: &Value, kind: &str) -> bool {
    message
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        })
}

/// A readable summary of messages: the start of each user text.
fn summarize(messages: &[Value]) -> String {
    let texts: Vec<String> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .map(|t| t.chars().take(24).collect())
        .collect();
    format!(
        "Summary of {} messages: {}",
        messages.len(),
        texts.join("; ")
    )
}

/// The reply as a stream of the documented events.
fn stream(model: &Value, content: &Value, stop: &str, usage: &Value) -> String {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}}),
    )];
    for (index, block) in content.as_array().into_iter().flatten().enumerate() {
        let (start, deltas) = match block["type"].as_str().unwrap_or_default() {
            "thinking" => (
                json!({"type": "thinking", "thinking": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ],
            ),
            "tool_use" => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                vec![
                    json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
                ],
            ),
            _ => (
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": block["text"]})],
            ),
        };
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": usage["output_tokens"]}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

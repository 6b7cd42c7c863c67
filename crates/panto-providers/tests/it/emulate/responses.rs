//! An `OpenAI` Responses emulator that enforces the rules of reasoning items and speaks both
//! ways of compacting.
//!
//! The rules, as `OpenAI`'s pages state them:
//! - "Reasoning" and the Responses reference: with `store: false` a reasoning item comes back
//!   with the `encrypted_content` the API returned (asked with
//!   `include: ["reasoning.encrypted_content"]`); content it did not issue "could not be
//!   verified"; and a reasoning item is refused when it comes "without its required following
//!   item" (the item it preceded in the output). No binding to the prefix is documented, so
//!   none is emulated.
//! - "Function calling" (<https://developers.openai.com/api/docs/guides/function-calling>):
//!   each `function_call` in the input is answered by a `function_call_output` with its
//!   `call_id` ("No tool output found for function call …"), and each output answers a call
//!   before it ("No tool call found for function call output with `call_id` …").
//! - "Compaction" (<https://developers.openai.com/api/docs/guides/compaction>):
//!   `POST /responses/compact` returns the window to continue from, the user's messages and
//!   one opaque `compaction` item with `encrypted_content`, to be passed back as it is; with
//!   `context_management: [{"type": "compaction", "compact_threshold": N}]` a response whose
//!   input crosses the threshold carries a `compaction` item in its output.

use std::collections::HashMap;

use serde_json::{Value, json};
use wiremock::matchers::path;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use super::{SUMMARY_PROMPT, Seen, Shared, digest, serve, tokens};

/// What the emulator knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The window, in tokens.
    pub(crate) window: u64,
    /// The reasoning contents it issued.
    pub(crate) reasoning: HashMap<String, String>,
    /// The compaction items it issued, by `encrypted_content`, with their exact text.
    pub(crate) compactions: HashMap<String, String>,
    /// Every request, in order.
    pub(crate) seen: Vec<Seen>,
    /// When set, `/responses/compact` answers with this status and message.
    pub(crate) fail_compaction: Option<(u16, String)>,
    /// When set, every reasoning item sent is taken as one the API issued: a test seeds a
    /// conversation it did not produce here, then checks what panto makes of it.
    pub(crate) prime: bool,
    /// Reasoning items checked and accepted.
    pub(crate) accepted: usize,
    /// Requests that carried a compaction item byte for byte.
    pub(crate) exact_items: usize,
    replies: usize,
}

/// The emulator, shared with the test.
#[derive(Clone, Debug, Default)]
pub(crate) struct Responses(pub(crate) Shared<State>);

impl Responses {
    /// Starts an emulator with a window of `window` tokens.
    pub(crate) async fn start(window: u64) -> (MockServer, Responses) {
        let responses = Responses(Shared::new(State {
            window,
            ..State::default()
        }));
        serve(
            responses,
            ["/v1/responses", "/v1/responses/compact"].map(path),
        )
        .await
    }

    /// The state.
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock()
    }
}

fn error(message: &str, code: Option<&str>) -> (u16, String) {
    (
        400,
        json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": code}}).to_string(),
    )
}

impl Respond for Responses {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let raw = String::from_utf8_lossy(&request.body).into_owned();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let compact = request.url.path().ends_with("/compact");
        let mut state = self.0.lock();
        let summary = body
            .get("instructions")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(SUMMARY_PROMPT));
        let kind = if compact {
            "compaction"
        } else if summary {
            "summary"
        } else {
            "chat"
        };
        let (status, text) = match state.answer(&raw, &body, kind) {
            Ok(text) => (200, text),
            Err(e) => e,
        };
        state.seen.push(Seen {
            path: request.url.path().to_owned(),
            raw,
            body: body.clone(),
            status,
            refusal: (status != 200).then(|| text.clone()),
            kind,
        });
        if status == 200 && body.get("stream") == Some(&Value::Bool(true)) {
            let response: Value = serde_json::from_str(&text).unwrap_or_default();
            let mut events = format!(
                "event: response.created\ndata: {}\n\n",
                json!({"type": "response.created", "response": {"id": response["id"], "status": "in_progress", "output": []}})
            );
            for (i, item) in response["output"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                events.push_str(&format!(
                    "event: response.output_item.done\ndata: {}\n\n",
                    json!({"type": "response.output_item.done", "output_index": i, "item": item})
                ));
            }
            // The final response object is written as the server wrote it, keys in its order.
            events.push_str(&format!(
                "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{text}}}\n\n"
            ));
            return ResponseTemplate::new(200)
                .set_body_raw(events.into_bytes(), "text/event-stream");
        }
        ResponseTemplate::new(status).set_body_raw(text.into_bytes(), "application/json")
    }
}

impl State {
    fn answer(
        &mut self,
        raw: &str,
        body: &Value,
        kind: &'static str,
    ) -> Result<String, (u16, String)> {
        let n = tokens(raw.as_bytes());
        if n > self.window {
            return Err(error(
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
                Some("context_length_exceeded"),
            ));
        }
        if kind == "compaction"
            && let Some((status, message)) = self.fail_compaction.clone()
        {
            return Err((status, json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}).to_string()));
        }
        let input = body
            .get("input")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Err(message) = pairing(&input) {
            return Err(error(&message, None));
        }
        let mut accepted = 0;
        let mut exact = false;
        for (i, item) in input.iter().enumerate() {
            match item.get("type").and_then(Value::as_str).unwrap_or_default() {
                "reasoning" => {
                    let content = item
                        .get("encrypted_content")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if self.prime {
                        self.reasoning.insert(content.to_owned(), String::new());
                    }
                    if !self.reasoning.contains_key(content) {
                        return Err(error(
                            &format!(
                                "The encrypted content for item input[{i}] could not be verified."
                            ),
                            Some("invalid_encrypted_content"),
                        ));
                    }
                    let follows = input.get(i + 1).is_some_and(|next| {
                        matches!(
                            next.get("type").and_then(Value::as_str),
                            Some("function_call")
                        ) || (next.get("type").and_then(Value::as_str) == Some("message")
                            && next.get("role").and_then(Value::as_str) == Some("assistant"))
                    });
                    if !follows {
                        return Err(error(
                            &format!(
                                "Item 'input[{i}]' of type 'reasoning' was provided without its required following item."
                            ),
                            None,
                        ));
                    }
                    accepted += 1;
                }
                "compaction" => {
                    let content = item
                        .get("encrypted_content")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let Some(text) = self.compactions.get(content) else {
                        return Err(error(
                            &format!(
                                "The encrypted content for item input[{i}] could not be verified."
                            ),
                            Some("invalid_encrypted_content"),
                        ));
                    };
                    if !raw.contains(text.as_str()) {
                        return Err(error(
                            &format!("Item input[{i}] of type 'compaction' was modified."),
                            None,
                        ));
                    }
                    exact = true;
                }
                _ => {}
            }
        }
        self.accepted += accepted;
        if exact {
            self.exact_items += 1;
        }
        self.replies += 1;
        let r = self.replies;
        let model = body.get("model").cloned().unwrap_or(Value::Null);
        let usage = json!({"input_tokens": n, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": n + 20});
        if kind == "compaction" {
            let content = format!("cmp-{r}-{}", digest(body));
            // `id` before `type`, as output items list them.
            let item = format!(
                r#"{{"id":"cmp_{r}","type":"compaction","encrypted_content":"{content}","created_by":"emulator"}}"#
            );
            self.compactions.insert(content, item.clone());
            let users: Vec<String> = input
                .iter()
                .filter(|i| {
                    i.get("type").and_then(Value::as_str) == Some("message")
                        && i.get("role").and_then(Value::as_str) == Some("user")
                })
                .map(Value::to_string)
                .collect();
            let mut output = users;
            output.push(item);
            return Ok(format!(
                r#"{{"id":"resp_cmp{r}","object":"response.compaction","created_at":1767225600,"model":{model},"output":[{}],"usage":{usage}}}"#,
                output.join(",")
            ));
        }
        let mut output: Vec<String> = Vec::new();
        let threshold = body
            .pointer("/context_management/0/compact_threshold")
            .and_then(Value::as_u64);
        if threshold.is_some_and(|t| n > t) {
            let content = format!("cmp-{r}-{}", digest(body));
            let item = format!(
                r#"{{"id":"cmp_{r}","type":"compaction","encrypted_content":"{content}","created_by":"emulator"}}"#
            );
            self.compactions.insert(content, item.clone());
            output.push(item);
        }
        let include = body
            .get("include")
            .is_some_and(|i| i.to_string().contains("reasoning.encrypted_content"));
        if include {
            let content = format!("enc-{r}-{}", digest(body));
            self.reasoning.insert(content.clone(), String::new());
            output.push(json!({"id": format!("rs_{r}"), "type": "reasoning", "summary": [{"type": "summary_text", "text": format!("Thinking about reply {r}.")}], "encrypted_content": content}).to_string());
        }
        let last = input.last().cloned().unwrap_or(Value::Null);
        let answered = last.get("type").and_then(Value::as_str) == Some("function_call_output");
        if kind == "chat" && !answered && last.to_string().contains("[tool]") {
            output.push(json!({"id": format!("fc_{r}"), "type": "function_call", "status": "completed", "call_id": format!("call_{r}"), "name": "lookup", "arguments": format!("{{\"n\":{r}}}")}).to_string());
        } else {
            let text = if kind == "summary" {
                format!(
                    "Summary {r}: the user sent numbered notes about the parser, the assistant answered each, and the work goes on from the latest note."
                )
            } else {
                format!("Reply {r}.")
            };
            output.push(json!({"id": format!("msg_{r}"), "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}).to_string());
        }
        Ok(format!(
            r#"{{"id":"resp_{r}","object":"response","created_at":1767225600,"status":"completed","model":{model},"output":[{}],"usage":{usage}}}"#,
            output.join(",")
        ))
    }
}

/// The rule of function calling (module docs): calls and outputs pair by `call_id`, each
/// output after its call.
fn pairing(input: &[Value]) -> Result<(), String> {
    let call_id = |item: &Value| {
        item.get("call_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let kind = |item: &Value| {
        item.get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut calls: Vec<String> = Vec::new();
    for item in input {
        match kind(item).as_str() {
            "function_call" => calls.push(call_id(item)),
            "function_call_output" if !calls.contains(&call_id(item)) => {
                return Err(format!(
                    "No tool call found for function call output with call_id {}.",
                    call_id(item)
                ));
            }
            _ => {}
        }
    }
    for id in calls {
        let answered = input
            .iter()
            .any(|i| kind(i) == "function_call_output" && call_id(i) == id);
        if !answered {
            return Err(format!("No tool output found for function call {id}."));
        }
    }
    Ok(())
}

//! An `OpenAI` Chat Completions emulator that enforces the pairing of tool calls and results.
//!
//! The rule, as "Function calling" states it
//! (<https://platform.openai.com/docs/guides/function-calling>, the Chat Completions form):
//! an assistant message with `tool_calls` is followed by one `tool` message for each call,
//! with its `tool_call_id`, before any other message, and a `tool` message answers a call of
//! the assistant message before its run. The refusals quote the API's messages. It answers in
//! the documented stream of chunks.

use serde_json::{Value, json};
use wiremock::matchers::path;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use super::{SUMMARY_PROMPT, Seen, Shared, serve, tokens};

/// What the emulator knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The window, in tokens.
    pub(crate) window: u64,
    /// Every request, in order.
    pub(crate) seen: Vec<Seen>,
    replies: usize,
}

/// The emulator, shared with the test.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chat(pub(crate) Shared<State>);

impl Chat {
    /// Starts an emulator with a window of `window` tokens, at `{uri}/v1`.
    pub(crate) async fn start(window: u64) -> (MockServer, Chat) {
        let chat = Chat(Shared::new(State {
            window,
            ..State::default()
        }));
        serve(chat, [path("/v1/chat/completions")]).await
    }

    /// The state.
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock()
    }
}

fn error(message: &str) -> (u16, String) {
    (
        400,
        json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": null}}).to_string(),
    )
}

impl Respond for Chat {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let raw = String::from_utf8_lossy(&request.body).into_owned();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let mut state = self.0.lock();
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let summary = messages
            .first()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(SUMMARY_PROMPT));
        let kind = if summary { "summary" } else { "chat" };
        let n = tokens(raw.as_bytes());
        let answer = if n > state.window {
            Err(error(&format!(
                "This model's maximum context length is {} tokens. However, your messages resulted in {n} tokens.",
                state.window
            )))
        } else {
            pairing(&messages).map_err(|m| error(&m))
        };
        state.replies += 1;
        let r = state.replies;
        let (status, text) = match answer {
            Ok(()) => (200, reply(r, &messages, summary)),
            Err(e) => e,
        };
        state.seen.push(Seen {
            path: request.url.path().to_owned(),
            raw,
            body,
            status,
            refusal: (status != 200).then(|| text.clone()),
            kind,
        });
        let sse = status == 200;
        ResponseTemplate::new(status).set_body_raw(
            text.into_bytes(),
            if sse {
                "text/event-stream"
            } else {
                "application/json"
            },
        )
    }
}

/// The rule of the module docs.
fn pairing(messages: &[Value]) -> Result<(), String> {
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut open: Vec<String> = Vec::new();
    let mut answerable: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if role(m) == "tool" {
            let id = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !answerable.contains(&id) {
                return Err(format!(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages[{i}], tool_call_id {id})"
                ));
            }
            open.retain(|o| *o != id);
            continue;
        }
        if !open.is_empty() {
            return Err(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                open.join(", ")
            ));
        }
        answerable = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        open.clone_from(&answerable);
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            open.join(", ")
        ))
    }
}

/// The reply `r` as a stream of chunks: a call when the last message asks for one, else text.
fn reply(r: usize, messages: &[Value], summary: bool) -> String {
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let wants_tool = !summary
        && last.get("role").and_then(Value::as_str) == Some("user")
        && last.to_string().contains("[tool]");
    let chunk = |delta: Value, finish: Value| {
        json!({"id": format!("chatcmpl-{r}"), "object": "chat.completion.chunk", "created": 1767225600,
               "model": "gpt-emulated", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let (delta, finish) = if wants_tool {
        (
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_{r}"), "type": "function",
                   "function": {"name": "lookup", "arguments": format!("{{\"n\":{r}}}")}}]}),
            "tool_calls",
        )
    } else if summary {
        (
            json!({"role": "assistant", "content": format!("Summary {r}: the user sent numbered notes about the parser, the assistant answered each, and the work goes on from the latest note.")}),
            "stop",
        )
    } else {
        (
            json!({"role": "assistant", "content": format!("Reply {r}.")}),
            "stop",
        )
    };
    let usage = json!({"id": format!("chatcmpl-{r}"), "object": "chat.completion.chunk", "created": 1767225600,
                       "model": "gpt-emulated", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}});
    [
        chunk(delta, Value::Null),
        chunk(json!({}), json!(finish)),
        usage,
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
    .collect()
}

//! A Gemini emulator that enforces thought signatures.
//!
//! The rule, as "Thought signatures" states it (<https://ai.google.dev/gemini-api/docs/thought-signatures>,
//! and the Vertex AI page of the same name): Gemini 3 returns a `thoughtSignature` on the first
//! function call of each step (and on the last part of an answer without calls), and the
//! signatures of the current turn's function calls must come back, exactly, or the request is
//! refused with a 400 ("Function call is missing a `thought_signature` in functionCall parts");
//! the current turn is everything after the last user message with the user's own words, and
//! earlier turns are not checked. A call Gemini did not write may carry the documented value
//! `skip_thought_signature_validator`. The pages state no binding to the prefix, so none is
//! emulated: a compaction that replaces the prefix leaves the signatures valid. A call the
//! emulator signed must come back with that signature, not the value for foreign calls.
//!
//! And the rule of function calling (<https://ai.google.dev/gemini-api/docs/function-calling>):
//! the content after a model turn with `functionCall` parts holds one `functionResponse` for
//! each of them, and a `functionResponse` answers a call of the turn right before it ("Please
//! ensure that the number of function response parts is equal to the number of function call
//! parts of the function call turn.").

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use wiremock::matchers::path_regex;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use super::{SUMMARY_PROMPT, Seen, Shared, serve, tokens};

/// What the emulator knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The window, in tokens.
    pub(crate) window: u64,
    /// The signatures it issued.
    pub(crate) signatures: HashSet<String>,
    /// Every request, in order.
    pub(crate) seen: Vec<Seen>,
    /// The signature of each call it signed, by the call (`name` and `args`).
    pub(crate) calls: HashMap<String, HashSet<String>>,
    /// When set, every signature sent is taken as one the API issued for its part: a test
    /// seeds a conversation it did not produce here, then checks what panto makes of it.
    pub(crate) prime: bool,
    /// Current-turn function calls checked and accepted.
    pub(crate) accepted: usize,
    replies: usize,
}

/// The emulator, shared with the test.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gemini(pub(crate) Shared<State>);

impl Gemini {
    /// Starts an emulator with a window of `window` tokens.
    pub(crate) async fn start(window: u64) -> (MockServer, Gemini) {
        let gemini = Gemini(Shared::new(State {
            window,
            ..State::default()
        }));
        let generate = path_regex("^/v1beta/models/[^/]+:(generateContent|streamGenerateContent)$");
        serve(gemini, [generate]).await
    }

    /// The state.
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock()
    }
}

fn error(message: &str) -> (u16, String) {
    (
        400,
        json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
            .to_string(),
    )
}

impl Respond for Gemini {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let raw = String::from_utf8_lossy(&request.body).into_owned();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let stream = request.url.path().ends_with(":streamGenerateContent");
        let mut state = self.0.lock();
        let summary = body
            .pointer("/systemInstruction/parts/0/text")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(SUMMARY_PROMPT));
        let kind = if summary { "summary" } else { "chat" };
        let (status, text) = match state.answer(&raw, &body, summary) {
            Ok(chunk) => (200, chunk),
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
        if status == 200 && stream {
            ResponseTemplate::new(200).set_body_raw(
                format!("data: {text}\n\n").into_bytes(),
                "text/event-stream",
            )
        } else {
            ResponseTemplate::new(status).set_body_raw(text.into_bytes(), "application/json")
        }
    }
}

impl State {
    fn answer(&mut self, raw: &str, body: &Value, summary: bool) -> Result<String, (u16, String)> {
        let n = tokens(raw.as_bytes());
        if n > self.window {
            return Err(error(&format!(
                "The input token count ({n}) exceeds the maximum number of tokens allowed ({}).",
                self.window
            )));
        }
        let contents = body
            .get("contents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let parts = |c: &Value| {
            c.get("parts")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        if let Err(message) = pairing(&contents) {
            return Err(error(&message));
        }
        if self.prime {
            for content in &contents {
                for part in parts(content) {
                    if let Some(signature) = part.get("thoughtSignature").and_then(Value::as_str) {
                        self.signatures.insert(signature.to_owned());
                        if let Some(call) = part.get("functionCall") {
                            self.calls
                                .entry(call_key(call))
                                .or_default()
                                .insert(signature.to_owned());
                        }
                    }
                }
            }
        }
        let current = contents
            .iter()
            .rposition(|c| {
                c.get("role").and_then(Value::as_str) == Some("user")
                    && parts(c).iter().any(|p| p.get("text").is_some())
            })
            .map_or(0, |i| i + 1);
        let mut accepted = 0;
        for (k, content) in contents.iter().enumerate().skip(current) {
            if content.get("role").and_then(Value::as_str) != Some("model") {
                continue;
            }
            let mut first_call = true;
            for part in parts(content) {
                let signature = part.get("thoughtSignature").and_then(Value::as_str);
                if let Some(signature) = signature
                    && signature != "skip_thought_signature_validator"
                    && !self.signatures.contains(signature)
                {
                    return Err(error("Corrupted thought signature."));
                }
                if let Some(call) = part.get("functionCall") {
                    let signed = self.calls.get(&call_key(call));
                    if signed.is_some_and(|s| !signature.is_some_and(|g| s.contains(g))) {
                        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                        return Err(error(&format!(
                            "Function call `{name}` in the {k}. content block is missing its `thought_signature`."
                        )));
                    }
                    if first_call && signature.is_none() {
                        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                        return Err(error(&format!(
                            "Function call `{name}` in the {k}. content block is missing a `thought_signature`."
                        )));
                    }
                    if first_call {
                        accepted += 1;
                    }
                    first_call = false;
                }
            }
        }
        self.accepted += accepted;
        self.replies += 1;
        let r = self.replies;
        let signature = format!("gsig-{r}");
        self.signatures.insert(signature.clone());
        let last = contents.last().cloned().unwrap_or(Value::Null);
        let answered = parts(&last)
            .iter()
            .any(|p| p.get("functionResponse").is_some());
        let wants_tool = !summary && !answered && last.to_string().contains("[tool]");
        let (part, finish) = if summary {
            (
                json!({"text": format!("Summary {r}: the user sent numbered notes about the parser, the assistant answered each, and the work goes on from the latest note."), "thoughtSignature": signature}),
                "STOP",
            )
        } else if wants_tool {
            let call = json!({"name": "lookup", "args": {"n": r}});
            self.calls
                .entry(call_key(&call))
                .or_default()
                .insert(signature.clone());
            (
                json!({"functionCall": call, "thoughtSignature": signature}),
                "STOP",
            )
        } else {
            (
                json!({"text": format!("Reply {r}."), "thoughtSignature": signature}),
                "STOP",
            )
        };
        let thought = json!({"text": format!("Thinking about reply {r}."), "thought": true});
        Ok(json!({
            "candidates": [{"content": {"role": "model", "parts": [thought, part]}, "finishReason": finish, "index": 0}],
            "usageMetadata": {"promptTokenCount": n, "candidatesTokenCount": 20, "thoughtsTokenCount": 5, "totalTokenCount": n + 25},
            "modelVersion": body.get("model").cloned().unwrap_or(json!("gemini-emulated"))
        })
        .to_string())
    }
}

/// The rule of function calling (module docs): the content after a model turn with calls
/// answers each of them, and answers only a turn with calls.
fn pairing(contents: &[Value]) -> Result<(), String> {
    let count = |c: &Value, key: &str| {
        c.get("parts")
            .and_then(Value::as_array)
            .map_or(0, |ps| ps.iter().filter(|p| p.get(key).is_some()).count())
    };
    for (k, content) in contents.iter().enumerate() {
        let responses = count(content, "functionResponse");
        let calls = k
            .checked_sub(1)
            .map_or(0, |j| count(&contents[j], "functionCall"));
        if (k > 0 && calls > 0 && responses != calls) || (calls == 0 && responses > 0) {
            return Err(format!(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn. ({k}. content block: {responses} responses to {calls} calls)"
            ));
        }
    }
    Ok(())
}

/// What identifies a call the emulator signed: its name and arguments.
fn call_key(call: &Value) -> String {
    json!({"name": call.get("name"), "args": call.get("args")}).to_string()
}

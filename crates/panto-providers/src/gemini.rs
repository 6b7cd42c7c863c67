//! The Google Gemini adapter: `POST {base}/v1beta/models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse`.

use std::collections::HashMap;

use panto_model::stop_reason;
use panto_model::{
    ContentBlock, Extra, Message, Name, Role, TextBlock, ThinkingBlock, ToolUseBlock, Usage,
};
use panto_provider::{EventSink, Provider, ProviderError, Request, ToolChoice};
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::{Map, Value, json};

use crate::adapter::adapter_common;
use crate::body::{Splice, WireBody};
use crate::classify;
use crate::config::{BaseUrl, Config, Error};
use crate::prepare::{compaction_text, flatten_result, prepare_sendable};
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::shared::{
    StopReasons, assistant, cached_prompt_usage, has_calls, insert_sampling, key_header,
    map_stop_reason, reasoning_budget, tool_choice,
};
use crate::sse::SseEvent;
use crate::transport::{
    Sink, StreamParser, Transport, Wire, error_payload, event_json, fresh_id, malformed,
};

/// The extra field of a text, thinking or tool-call block that holds Gemini's
/// `thoughtSignature` for the part it came in. Gemini wants it back on the same part; other
/// adapters never send it.
pub(crate) const THOUGHT_SIGNATURE: &str = "thoughtSignature";

/// The thought signature Gemini documents for a function call it did not produce itself (a
/// turn from another model or provider, or a call written by hand): sent on such a call of the
/// current turn, where Gemini 3 refuses a call without a signature
/// (<https://ai.google.dev/gemini-api/docs/thought-signatures>, FAQ; the Vertex AI
/// "Thought signatures" page).
pub(crate) const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// The prefix of the ids given to Gemini function calls (Gemini itself gives none).
pub(crate) const CALL_ID_PREFIX: &str = "gemini_call_";

/// Google Gemini (the Generative Language API).
///
/// The key travels in the `x-goog-api-key` header, never in the URL, so it cannot appear in
/// an error message that quotes the URL.
///
/// Request options: `generationConfig.temperature` and `topP`, the reasoning effort as
/// `generationConfig.thinkingConfig.thinkingBudget` (1,024, 8,192 or 24,576 tokens, which
/// both the 2.5 and the 3 models read), and the tool choice as
/// `toolConfig.functionCallingConfig` (`AUTO`, `NONE`, `ANY`, or `ANY` limited to one
/// function by `allowedFunctionNames`; sent only when the request has tools).
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub struct GeminiProvider {
    transport: Transport,
    wire: GeminiWire,
}

impl GeminiProvider {
    /// The official API.
    pub const DEFAULT_BASE_URL: &'static str = Protocol::Gemini.environment().default_base_url;

    /// An adapter with this configuration.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`].
    pub fn new(config: Config) -> Result<GeminiProvider, Error> {
        Ok(GeminiProvider {
            transport: Transport::new(config)?,
            wire: GeminiWire,
        })
    }
}

adapter_common!(GeminiProvider, Gemini, native: "Gemini");

/// The protocol description.
#[derive(Debug)]
pub(crate) struct GeminiWire;

impl Wire for GeminiWire {
    type Stream = GeminiStream;

    fn protocol(&self) -> Protocol {
        Protocol::Gemini
    }

    fn endpoint(&self, base: &BaseUrl, request: &Request, stream: bool) -> String {
        let model = request.model.trim_start_matches('/');
        let model = if model.contains('/') {
            model.to_owned()
        } else {
            format!("models/{model}")
        };
        let method = if stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        base.endpoint("v1beta", &format!("{model}:{method}"))
    }

    fn headers(&self, key: &ApiKey, _request: &Request, headers: &mut HeaderMap) {
        key_header(headers, HeaderName::from_static("x-goog-api-key"), "", key);
    }

    fn body(&self, request: &Request, _stream: bool) -> WireBody {
        WireBody::new(request_body(request), Splice::default(), request)
    }

    fn parse(&self, body: &Value) -> Result<Message, ProviderError> {
        let mut stream = GeminiStream::default();
        stream.chunk(body, None)?;
        if stream.finish_reason.is_none() {
            // A whole answer without a finish reason is still whole; mark it so finish accepts.
            stream.finish_reason = Some("STOP".to_owned());
        }
        stream.finish(true)
    }

    fn stream(&self) -> GeminiStream {
        GeminiStream::default()
    }
}

/// The request body.
pub(crate) fn request_body(request: &Request) -> Value {
    let messages = prepare_sendable(&request.messages, &compaction_text, None, &|_, b| sends(b));
    // Function responses name the function, not the call: map call ids to names.
    let mut names: HashMap<&str, &str> = HashMap::new();
    for message in &messages {
        for block in &message.content {
            if let ContentBlock::ToolUse(u) = block {
                names.insert(&u.id, &u.name);
            }
        }
    }
    // The current turn: the messages after the last one with the user's own words. Its
    // function calls must carry a signature; earlier turns' are not checked.
    let current = messages
        .iter()
        .rposition(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text(_) | ContentBlock::Image(_)))
        })
        .map_or(0, |i| i + 1);
    let contents: Vec<Value> = messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let parts = render_parts(m, &names, i >= current);
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "model",
            };
            (!parts.is_empty()).then(|| json!({"role": role, "parts": parts}))
        })
        .collect();
    let mut body = Map::new();
    if !request.system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": request.system}]}),
        );
    }
    body.insert("contents".into(), Value::Array(contents));
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.input_schema}))
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    render_options(request, &mut body);
    Value::Object(body)
}

/// The generation config (the output limit and the sampling options) and the tool config of
/// the request options (see [`GeminiProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    let mut generation = Map::new();
    generation.insert("maxOutputTokens".into(), json!(request.max_output_tokens));
    insert_sampling(options, &mut generation, "topP");
    if let Some(effort) = options.reasoning_effort {
        generation.insert(
            "thinkingConfig".into(),
            json!({"thinkingBudget": reasoning_budget(effort)}),
        );
    }
    body.insert("generationConfig".into(), Value::Object(generation));
    let calling = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!({"mode": "AUTO"})),
        ToolChoice::None => Some(json!({"mode": "NONE"})),
        ToolChoice::Required => Some(json!({"mode": "ANY"})),
        ToolChoice::Tool(name) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
        _ => None,
    });
    if let Some(calling) = calling {
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": calling}),
        );
    }
}

/// Whether a block goes on the wire ([`render_parts`] renders it): text, tool calls and results,
/// images, and thinking only with Gemini's thought signature.
fn sends(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text(_)
        | ContentBlock::ToolUse(_)
        | ContentBlock::ToolResult(_)
        | ContentBlock::Image(_) => true,
        ContentBlock::Thinking(t) => t.extra.contains_key(THOUGHT_SIGNATURE),
        _ => false,
    }
}

/// Adds the block's thought signature, if it carries one, to a part.
fn signed(mut part: Value, extra: &Extra) -> Value {
    if let Some(signature) = extra.get(THOUGHT_SIGNATURE) {
        part[THOUGHT_SIGNATURE] = signature.clone();
    }
    part
}

fn inline_image(source: &Value) -> Value {
    let get = |k: &str| source.get(k).and_then(Value::as_str);
    match (get("type"), get("data"), get("url")) {
        (Some("base64"), Some(data), _) => {
            json!({"inlineData": {"mimeType": get("media_type").unwrap_or("image/png"), "data": data}})
        }
        (_, _, Some(url)) => json!({"text": format!("[image: {url}]")}),
        _ => json!({"text": "[image]"}),
    }
}

fn render_parts(message: &Message, names: &HashMap<&str, &str>, current: bool) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut result_images = Vec::new();
    // Gemini signs the first function call of a step; a step of the current turn whose calls
    // came without any signature (another model wrote them) gets the documented stand-in on
    // its first call.
    let unsigned_step = current
        && message.role == Role::Assistant
        && !message.content.iter().any(|b| match b {
            ContentBlock::ToolUse(u) => u.extra.contains_key(THOUGHT_SIGNATURE),
            _ => false,
        });
    let mut first_call = true;
    for block in &message.content {
        match block {
            ContentBlock::Text(t) => parts.push(signed(json!({"text": t.text}), &t.extra)),
            ContentBlock::Thinking(t) if t.extra.contains_key(THOUGHT_SIGNATURE) => {
                parts.push(signed(
                    json!({"text": t.thinking, "thought": true}),
                    &t.extra,
                ));
            }
            ContentBlock::ToolUse(u) => {
                let args = match u.input.value() {
                    Value::Object(_) => u.input.value().clone(),
                    Value::Null => json!({}),
                    other => json!({ "value": other }),
                };
                let mut part = signed(
                    json!({"functionCall": {"name": u.name, "args": args}}),
                    &u.extra,
                );
                if unsigned_step && first_call {
                    part[THOUGHT_SIGNATURE] = json!(FOREIGN_SIGNATURE);
                }
                first_call = false;
                parts.push(part);
            }
            ContentBlock::ToolResult(r) => {
                let name = names
                    .get(r.tool_use_id.as_str())
                    .copied()
                    .unwrap_or(&r.tool_use_id);
                let (text, images) = flatten_result(r, false);
                let key = if r.failed() { "error" } else { "output" };
                parts.push(json!({"functionResponse": {"name": name, "response": {key: text}}}));
                result_images.extend(images);
            }
            ContentBlock::Image(i) => parts.push(inline_image(&i.source)),
            _ => {}
        }
    }
    parts.extend(result_images.iter().map(|i| inline_image(&i.source)));
    parts
}

/// Finish reasons on the session file's stop reasons.
const STOP_REASONS: StopReasons = StopReasons {
    end: "STOP",
    map: &[
        ("MAX_TOKENS", stop_reason::MAX_TOKENS),
        ("SAFETY", stop_reason::REFUSAL),
        ("RECITATION", stop_reason::REFUSAL),
        ("BLOCKLIST", stop_reason::REFUSAL),
        ("PROHIBITED_CONTENT", stop_reason::REFUSAL),
        ("SPII", stop_reason::REFUSAL),
        ("IMAGE_SAFETY", stop_reason::REFUSAL),
    ],
};

/// Gemini usage on the Contract 1 names: `input_tokens` is the prompt minus its cached part
/// (`cachedContentTokenCount`, which goes to `cache_read_input_tokens`); `output_tokens` is
/// the candidates plus the thoughts (both are generated and billed as output).
fn parse_usage(v: &Value) -> Option<Usage> {
    let count = |k: &str| v.get(k).and_then(Value::as_u64);
    let prompt =
        count("promptTokenCount").unwrap_or(0) + count("toolUsePromptTokenCount").unwrap_or(0);
    let cached = count("cachedContentTokenCount");
    let output =
        count("candidatesTokenCount").unwrap_or(0) + count("thoughtsTokenCount").unwrap_or(0);
    if v.as_object().is_none_or(Map::is_empty) {
        return None;
    }
    Some(cached_prompt_usage(prompt, output, cached, None))
}

/// The state of one answer, fed chunk by chunk (a whole answer is one chunk).
#[derive(Debug, Default)]
pub(crate) struct GeminiStream {
    content: Vec<ContentBlock>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl GeminiStream {
    /// Adds one `GenerateContentResponse`.
    fn chunk(
        &mut self,
        chunk: &Value,
        mut sink: Option<&mut Sink<'_>>,
    ) -> Result<(), ProviderError> {
        if let Some(usage) = chunk.get("usageMetadata").and_then(parse_usage) {
            self.usage = Some(usage);
        }
        if let Some(model) = chunk.get("modelVersion").and_then(Value::as_str) {
            self.model = Some(model.to_owned());
        }
        let Some(candidate) = chunk
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            if let Some(reason) = chunk
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                return Err(ProviderError::InvalidRequest {
                    status: 200,
                    message: format!("the prompt was blocked ({reason})"),
                });
            }
            return match chunk.get("usageMetadata") {
                Some(_) => Ok(()),
                None => Err(malformed("the answer has no `candidates`")),
            };
        };
        let parts = candidate
            .pointer("/content/parts")
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            let signature = part.get(THOUGHT_SIGNATURE).filter(|s| s.is_string());
            if let Some(call) = part.get("functionCall") {
                let name = call
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed("a functionCall without a name"))?;
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| fresh_id(CALL_ID_PREFIX), str::to_owned);
                if let Some(sink) = sink.as_deref_mut() {
                    sink.tool_call(name);
                }
                let mut extra = Extra::new();
                if let Some(signature) = signature {
                    extra.insert(THOUGHT_SIGNATURE.into(), signature.clone());
                }
                self.content.push(ContentBlock::ToolUse(
                    ToolUseBlock::new(
                        id,
                        name,
                        call.get("args").cloned().unwrap_or_else(|| json!({})),
                    )
                    .with_extra(extra),
                ));
            } else if let Some(text) = part
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty() || signature.is_some())
            {
                let thought = part
                    .get("thought")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if let Some(sink) = sink.as_deref_mut() {
                    if thought {
                        sink.thinking(text);
                    } else {
                        sink.text(text);
                    }
                }
                self.add_text(text, thought, signature);
            } else if signature.is_some() {
                self.add_text("", false, signature);
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(())
    }

    /// Appends streamed text to the last block of its kind, or starts a new block. A
    /// signature belongs to the part it came in: a block that already has one is not extended.
    fn add_text(&mut self, text: &str, thought: bool, signature: Option<&Value>) {
        let extend = match self.content.last_mut() {
            Some(ContentBlock::Text(t)) if !thought => Some((&mut t.text, &mut t.extra)),
            Some(ContentBlock::Thinking(t)) if thought => Some((&mut t.thinking, &mut t.extra)),
            _ => None,
        };
        if let Some((buffer, extra)) = extend
            && !extra.contains_key(THOUGHT_SIGNATURE)
        {
            buffer.push_str(text);
            if let Some(signature) = signature {
                extra.insert(THOUGHT_SIGNATURE.into(), signature.clone());
            }
            return;
        }
        let mut extra = Extra::new();
        if let Some(signature) = signature {
            extra.insert(THOUGHT_SIGNATURE.into(), signature.clone());
        }
        self.content.push(if thought {
            ContentBlock::Thinking(ThinkingBlock::new(text, None).with_extra(extra))
        } else {
            ContentBlock::Text(TextBlock::new(text).with_extra(extra))
        });
    }
}

impl StreamParser for GeminiStream {
    fn event(&mut self, event: &SseEvent, sink: &mut Sink<'_>) -> Result<bool, ProviderError> {
        if event.event == "error" {
            return Err(classify::classify_stream_error(
                Protocol::Gemini,
                &error_payload(event),
            ));
        }
        let chunk = event_json(event)?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(classify::classify_stream_error(Protocol::Gemini, &chunk));
        }
        self.chunk(&chunk, Some(sink))?;
        Ok(false)
    }

    fn finish(self, _terminal: bool) -> Result<Message, ProviderError> {
        let Some(reason) = self.finish_reason else {
            return Err(malformed("the stream ended before a finishReason"));
        };
        let calls = has_calls(&self.content);
        let mut message = assistant(self.content);
        message.model = self.model.map(Name::from);
        message.stop_reason = Some(map_stop_reason(&STOP_REASONS, &reason, calls));
        message.usage = self.usage;
        Ok(message)
    }
}

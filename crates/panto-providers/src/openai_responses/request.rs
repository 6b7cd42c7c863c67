//! How the OpenAI Responses adapter writes a request: the body, rendered from the prepared
//! conversation, and the request's options.

use panto_model::{ContentBlock, Message, NATIVE_OPENAI_RESPONSES, Role};
use panto_provider::{Request, ToolChoice};
use serde_json::{Map, Value, json};

use crate::body::{Splice, WireBody};
use crate::prepare::{compaction_text, flatten_result, image_url, prepare_sendable};
use crate::shared::{arguments, insert_cache_params, insert_sampling, tool_choice};

use super::ENCRYPTED_CONTENT;

/// The `input` items of a request. A leading compaction message that carries an `OpenAI`
/// native payload becomes that payload's items, exactly as `/responses/compact` returned
/// them; every other compaction is the summary's text.
pub(super) fn render_input(request: &Request, splice: &mut Splice) -> Vec<Value> {
    let mut input = Vec::new();
    let mut messages = request.messages.as_slice();
    if let Some(ContentBlock::Compaction(c)) = messages.first().and_then(|m| m.content.first())
        && c.native_protocol() == Some(NATIVE_OPENAI_RESPONSES)
        && let Some(items) = c.native_payload()
    {
        input.extend(items.iter().map(|item| splice.raw(item.json())));
        messages = &messages[1..];
    }
    let prepared = prepare_sendable(
        messages,
        &compaction_text,
        Some(NATIVE_OPENAI_RESPONSES),
        &sends,
    );
    for message in prepared {
        match message.role {
            Role::User => render_user(&message, &mut input),
            Role::Assistant => render_assistant(&message, &mut input, splice),
        }
    }
    input
}

/// Whether a block of a message of `role` goes on the wire by itself ([`render_user`] and
/// [`render_assistant`] render it): text, tool calls and results, a user's images and a native
/// compaction item. Thinking does not: a reasoning item goes back only before something else of
/// its message, so a message of nothing but thinking renders nothing.
fn sends(role: Role, block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text(_) | ContentBlock::ToolUse(_) | ContentBlock::ToolResult(_) => true,
        ContentBlock::Image(i) => role == Role::User && input_image(&i.source).is_some(),
        ContentBlock::Other(o) => {
            role == Role::Assistant && o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES)
        }
        _ => false,
    }
}

/// The request body as it goes on the wire.
pub(super) fn wire_body(request: &Request, stream: bool, encrypted_reasoning: bool) -> WireBody {
    let mut splice = Splice::default();
    let input = render_input(request, &mut splice);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !request.system.is_empty() {
        body.insert("instructions".into(), json!(request.system));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("max_output_tokens".into(), json!(request.max_output_tokens));
    body.insert("store".into(), Value::Bool(false));
    if encrypted_reasoning {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.input_schema})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    render_options(request, &mut body);
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    WireBody::new(Value::Object(body), splice, request)
}

/// The request options this protocol carries (see [`OpenAiResponsesProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    insert_sampling(options, body, "top_p");
    insert_cache_params(request, body);
    if let Some(effort) = options.reasoning_effort {
        body.insert("reasoning".into(), json!({"effort": effort.as_str()}));
    }
    let choice = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!("auto")),
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) => Some(json!({"type": "function", "name": name})),
        _ => None,
    });
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
}

fn input_image(source: &Value) -> Option<Value> {
    image_url(source).map(|url| json!({"type": "input_image", "image_url": url}))
}

/// A user message: `function_call_output` items first, then the message, then the images the
/// tool results held (outputs are strings here).
fn render_user(message: &Message, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    let mut result_images = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(r) => {
                let (text, images) = flatten_result(r, true);
                out.push(json!({"type": "function_call_output", "call_id": r.tool_use_id, "output": text}));
                result_images.extend(images);
            }
            ContentBlock::Text(t) => parts.push(json!({"type": "input_text", "text": t.text})),
            ContentBlock::Image(i) => parts.extend(input_image(&i.source)),
            _ => {}
        }
    }
    if !parts.is_empty() {
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
    if !result_images.is_empty() {
        let mut parts =
            vec![json!({"type": "input_text", "text": "Images returned by the tool calls above:"})];
        parts.extend(result_images.iter().filter_map(|i| input_image(&i.source)));
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
}

/// An assistant message: its blocks in order, as output-text messages, function calls,
/// reasoning items (when they carry encrypted content) and native compaction items (exactly as
/// received). A reasoning item is sent only with the item that followed it: the API refuses
/// one "provided without its required following item" (so of two in a row, the first is left
/// out).
fn render_assistant(message: &Message, out: &mut Vec<Value>, splice: &mut Splice) {
    let start = out.len();
    let mut text: Vec<Value> = Vec::new();
    let flush = |text: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(
                json!({"type": "message", "role": "assistant", "content": std::mem::take(text)}),
            );
        }
    };
    for block in &message.content {
        match block {
            ContentBlock::Text(t) => text.push(json!({"type": "output_text", "text": t.text})),
            ContentBlock::ToolUse(u) => {
                flush(&mut text, out);
                out.push(
                    json!({"type": "function_call", "call_id": u.id, "name": u.name,
                                "arguments": arguments(&u.input)}),
                );
            }
            ContentBlock::Thinking(t) => {
                if let Some(encrypted) = t.extra.get(ENCRYPTED_CONTENT).and_then(Value::as_str) {
                    flush(&mut text, out);
                    // A reasoning item right before this one (two replies merged, the first
                    // left with nothing after its reasoning) has no following item of its own.
                    if out.len() > start && is_reasoning(out.last()) {
                        out.pop();
                    }
                    let summary: Vec<Value> = if t.thinking.is_empty() {
                        Vec::new()
                    } else {
                        vec![json!({"type": "summary_text", "text": t.thinking})]
                    };
                    out.push(json!({"type": "reasoning", "summary": summary,
                                    "encrypted_content": encrypted}));
                }
            }
            ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES) => {
                flush(&mut text, out);
                if let Ok(item) = serde_json::to_string(&ContentBlock::Other(o.clone())) {
                    out.push(splice.raw(&item));
                }
            }
            _ => {}
        }
    }
    flush(&mut text, out);
    // A reasoning item that nothing of its message follows (an answer cut while it reasoned).
    while out.len() > start && is_reasoning(out.last()) {
        out.pop();
    }
}

/// Whether an input item is a reasoning item.
fn is_reasoning(item: Option<&Value>) -> bool {
    item.and_then(|item| item.get("type"))
        .and_then(Value::as_str)
        == Some("reasoning")
}

//! How the Anthropic adapter writes a request: the body, rendered from the prepared
//! conversation, and the request's options.

use panto_model::{
    ContentBlock, Extra, Message, NATIVE_ANTHROPIC, NATIVE_OPENAI_RESPONSES, ToolResultContent,
};
use panto_provider::{Request, ToolChoice};
use serde_json::{Map, Value, json};

use panto_size::Heuristic;

use crate::body::{Splice, WireBody};
use crate::prepare::{compaction_text, prepare_sendable};
use crate::shared::{insert_sampling, reasoning_budget, tool_choice};
use crate::thinking::thinking_replay;

use super::cache::{Stable, place_breakpoints};
use super::{native_head, thinking_on};

/// The request body as it goes on the wire.
pub(super) fn wire_body(request: &Request, stream: bool) -> WireBody {
    let replay = thinking_replay(&request.messages, thinking_on(request));
    let kept = native_head(replay.apply(&request.messages));
    let mut splice = Splice::default();
    let messages = render_messages(&kept, &mut splice);
    let stable = stable_blocks(request, &replay.apply(&request.messages), &messages);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_output_tokens));
    if !request.system.is_empty() {
        body.insert("system".into(), json!(request.system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    tool.insert("description".into(), json!(t.description));
                }
                tool.insert("input_schema".into(), t.input_schema.clone());
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    render_options(request, &mut body);
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    let mut body = WireBody::new(Value::Object(body), splice, request);
    let (value, splice) = body.parts_mut();
    place_breakpoints(value, request, stable, &|block| block_tokens(block, splice));
    if replay.drop_block
        && let Some(Value::Object(thinking)) = body.value.get_mut("thinking")
    {
        thinking.insert(
            "block_binding".into(),
            json!({"prefix_mismatch_behavior": "drop_block"}),
        );
    }
    body
}

/// The thinking budget panto sends for the request's reasoning effort: at least 1,024 tokens
/// and below `max_tokens`, else none.
pub(super) fn thinking_budget(request: &Request) -> Option<u32> {
    request
        .options
        .reasoning_effort
        .map(|e| reasoning_budget(e).min(request.max_output_tokens.saturating_sub(1)))
        .filter(|b| *b >= 1024)
}

/// The request options this protocol carries (see [`AnthropicProvider`]).
fn render_options(request: &Request, body: &mut Map<String, Value>) {
    let options = &request.options;
    insert_sampling(options, body, "top_p");
    let choice = tool_choice(request).and_then(|choice| match choice {
        ToolChoice::Auto => Some(json!({"type": "auto"})),
        ToolChoice::None => Some(json!({"type": "none"})),
        ToolChoice::Required => Some(json!({"type": "any"})),
        ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
        _ => None,
    });
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    // The budget must be at least 1,024 tokens and below `max_tokens`.
    if let Some(budget) = thinking_budget(request) {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
}

/// The messages rendered for the wire, after the wire preparation. Thinking without a signature
/// cannot go back (the API accepts a thinking block only with the signature it gave), nor can an
/// `OpenAI` compaction item: a message of nothing else is left out there and the messages
/// around it merged (`prepare_sendable`), rather than vanish at rendering and leave two user
/// messages side by side on the wire.
fn render_messages(messages: &[Message], splice: &mut Splice) -> Vec<Value> {
    prepare_sendable(
        messages,
        &compaction_text,
        Some(NATIVE_ANTHROPIC),
        &|_, b| sends(b),
    )
    .iter()
    .filter_map(|m| render_message(m, splice))
    .collect()
}

/// Whether this protocol sends a block back ([`render_block`] renders it): not thinking without
/// a signature, nor an `OpenAI` compaction item.
fn sends(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking(t) => t.signature.as_deref().is_some_and(|s| !s.is_empty()),
        ContentBlock::Other(o) => o.native_compaction() != Some(NATIVE_OPENAI_RESPONSES),
        _ => true,
    }
}

/// How many rendered blocks the request's stable leading messages
/// (`PromptCache::stable_messages`) make, when the rendering of the whole starts with theirs
/// unchanged (results moved to their calls, or messages merged, can make it start otherwise).
fn stable_blocks(request: &Request, kept: &[Message], rendered: &[Value]) -> Stable {
    let n = request.options.cache.stable_messages.min(kept.len());
    if n == 0 {
        return Stable::default();
    }
    let head = native_head(kept[..n].to_vec());
    let own = render_messages(&head, &mut Splice::default());
    let blocks = |messages: &[Value]| -> Vec<Value> {
        messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .cloned()
            .collect()
    };
    let (own, all) = (blocks(&own), blocks(rendered));
    // A piece spliced in byte for byte stands as a placeholder unique to each rendering.
    let same = |a: &Value, b: &Value| a == b || (a.is_string() && b.is_string());
    let agrees = own.len() <= all.len() && own.iter().zip(&all).all(|(a, b)| same(a, b));
    Stable {
        blocks: agrees.then_some(own.len()),
    }
}

/// Estimated tokens of a rendered block: a content block's size by panto's heuristic, a piece
/// spliced in byte for byte by its text.
fn block_tokens(block: &Value, splice: &Splice) -> u64 {
    let heuristic = Heuristic;
    if let Value::String(placeholder) = block {
        return splice.piece(placeholder).map_or(0, |t| heuristic.text(t));
    }
    match serde_json::from_value::<ContentBlock>(block.clone()) {
        Ok(parsed) => heuristic.block(&parsed),
        Err(_) => heuristic.text(&block.to_string()),
    }
}

fn render_message(message: &Message, splice: &mut Splice) -> Option<Value> {
    let content: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| render_block(b, splice))
        .collect();
    (!content.is_empty()).then(|| json!({"role": message.role.as_str(), "content": content}))
}

/// Copies `cache_control` from a block's unmodelled fields: the one extra field every
/// Anthropic block accepts. Other extras (another provider's annotations) are not sent.
fn with_cache_control(mut block: Map<String, Value>, extra: &Extra) -> Value {
    if let Some(cc) = extra.get("cache_control") {
        block.insert("cache_control".into(), cc.clone());
    }
    Value::Object(block)
}

fn render_block(block: &ContentBlock, splice: &mut Splice) -> Option<Value> {
    let object = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Some(match block {
        ContentBlock::Text(t) => {
            with_cache_control(object(json!({"type": "text", "text": t.text})), &t.extra)
        }
        ContentBlock::Thinking(t) => {
            // A thinking block is only accepted back with the signature Anthropic gave it.
            let signature = t.signature.as_deref().filter(|s| !s.is_empty())?;
            json!({"type": "thinking", "thinking": t.thinking, "signature": signature})
        }
        ContentBlock::ToolUse(u) => with_cache_control(
            object(
                json!({"type": "tool_use", "id": u.id, "name": u.name, "input": tool_input(&u.input)}),
            ),
            &u.extra,
        ),
        ContentBlock::ToolResult(r) => {
            let mut out = object(json!({"type": "tool_result", "tool_use_id": r.tool_use_id}));
            let content = match &r.content {
                ToolResultContent::Text(s) => json!(s),
                ToolResultContent::Blocks(blocks) => Value::Array(
                    blocks
                        .iter()
                        .filter_map(|b| render_block(b, splice))
                        .collect(),
                ),
            };
            out.insert("content".into(), content);
            if let Some(is_error) = r.is_error {
                out.insert("is_error".into(), json!(is_error));
            }
            with_cache_control(out, &r.extra)
        }
        ContentBlock::Image(i) => with_cache_control(
            object(json!({"type": "image", "source": i.source})),
            &i.extra,
        ),
        // The wire layer never leaves one, but render it as text rather than drop it.
        ContentBlock::Compaction(c) => json!({"type": "text", "text": compaction_text(&c.summary)}),
        // An `OpenAI` compaction item means nothing here (it is opaque): left out.
        ContentBlock::Other(o) if o.native_compaction() == Some(NATIVE_OPENAI_RESPONSES) => {
            return None;
        }
        // Everything else panto does not model (`redacted_thinking`, a native compaction
        // block, a server tool's block) goes back exactly as it was received.
        ContentBlock::Other(o) => {
            let text = serde_json::to_string(&ContentBlock::Other(o.clone())).ok()?;
            splice.raw(&text)
        }
    })
}

/// Anthropic requires `input` to be an object; other values are wrapped.
fn tool_input(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::Null => json!({}),
        other => json!({ "value": other }),
    }
}

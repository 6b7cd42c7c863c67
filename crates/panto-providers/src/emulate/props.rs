//! The property every request panto builds must have, on every protocol: the emulators of the
//! providers' caching accept it (Anthropic: at most four breakpoints, none on thinking or empty
//! text, lifetimes in order with their beta; `OpenAI`: a retention the model offers), its
//! caching changes nothing of the prompt but its markers, and caching off sends nothing of
//! panto's own. Over generated conversations with thinking, tool loops of 50 calls, images,
//! a leading compaction, cleared tool results and breakpoints of the caller's own.

use std::time::Duration;

use panto_model::arbitrary::session;
use panto_model::{CompactionBlock, ContentBlock, Message, Role, ToolResultContent};
use panto_provider::{CacheMode, CacheTtl, PromptCache, Request, RequestOptions, ToolSpec};
use proptest::prelude::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{AnthropicCache, OpenAiCache, OpenAiFlavor, canonical};
use crate::anthropic::AnthropicWire;
use crate::gemini::GeminiWire;
use crate::openai_chat::{ChatWire, MaxTokensField};
use crate::openai_responses::ResponsesWire;
use crate::secret::ApiKey;
use crate::transport::Wire;

/// What a generated request adds to a generated conversation.
#[derive(Clone, Debug)]
struct Shape {
    compaction: bool,
    long_loop: Option<usize>,
    cleared: bool,
    own_markers: usize,
    system_chars: usize,
    mode: CacheMode,
    ttl: CacheTtl,
    key: bool,
    model: &'static str,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        prop::option::weighted(0.4, 20usize..=50),
        any::<bool>(),
        prop_oneof![4 => Just(0usize), 1 => 1usize..=6],
        prop_oneof![Just(20usize), Just(6_000), Just(40_000)],
        prop_oneof![
            Just(CacheMode::ReadWrite),
            Just(CacheMode::ReadOnly),
            Just(CacheMode::Off)
        ],
        prop_oneof![Just(CacheTtl::Short), Just(CacheTtl::Long)],
        any::<bool>(),
        prop_oneof![
            Just("claude-sonnet-4-5"),
            Just("claude-opus-5"),
            Just("claude-haiku-4-5"),
            Just("gpt-5.1"),
            Just("gpt-4o"),
            Just("gpt-5.5"),
        ],
    )
        .prop_map(
            |(compaction, long_loop, cleared, own_markers, system_chars, mode, ttl, key, model)| {
                Shape {
                    compaction,
                    long_loop,
                    cleared,
                    own_markers,
                    system_chars,
                    mode,
                    ttl,
                    key,
                    model,
                }
            },
        )
}

/// The request a generated conversation and shape make.
fn request(mut messages: Vec<Message>, shape: &Shape) -> Request {
    let mut stable = 0;
    if shape.compaction {
        let summary = "The user is fixing a flaky test. ".repeat(200);
        messages.insert(
            0,
            Message::new(
                Role::User,
                vec![ContentBlock::Compaction(CompactionBlock::new(summary))],
            ),
        );
        stable = 1;
    }
    if let Some(calls) = shape.long_loop {
        let uses = (0..calls)
            .map(|i| {
                ContentBlock::tool_use(
                    format!("loop_{i}"),
                    "read",
                    json!({"path": format!("src/f{i}.rs")}),
                )
            })
            .collect();
        let results = (0..calls)
            .map(|i| {
                ContentBlock::tool_result(format!("loop_{i}"), "fn main() {}\n".repeat(40), false)
            })
            .collect();
        messages.push(Message::new(Role::Assistant, uses));
        messages.push(Message::new(Role::User, results));
    }
    if shape.cleared {
        for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
            if let ContentBlock::ToolResult(r) = block {
                r.content = ToolResultContent::Text("[cleared: re-read the file if needed]".into());
            }
        }
    }
    let mut marked = 0;
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        if marked == shape.own_markers {
            break;
        }
        if let ContentBlock::Text(t) = block
            && !t.text.is_empty()
        {
            t.extra
                .insert("cache_control".into(), json!({"type": "ephemeral"}));
            marked += 1;
        }
    }
    let mut cache = PromptCache::new()
        .with_mode(shape.mode)
        .with_ttl(shape.ttl)
        .with_stable_messages(stable);
    if shape.key {
        cache = cache.with_key("panto-0123456789abcdef");
    }
    let tools = vec![ToolSpec::new(
        "read",
        "Read a file",
        json!({"type": "object"}),
    )];
    Request::new(
        shape.model,
        "You are terse. ".repeat(shape.system_chars / 14),
        messages,
        4_096,
    )
    .with_tools(tools)
    .with_options(RequestOptions::new().with_cache(cache))
}

fn bytes_of<W: Wire>(wire: &W, request: &Request) -> Value {
    serde_json::from_slice(&wire.body(request, false).to_bytes().unwrap()).unwrap()
}

/// The body without markers, the system prompt as a list: the prompt itself.
fn prompt(body: &Value) -> String {
    let mut body = body.clone();
    if let Some(Value::String(s)) = body.get("system").cloned() {
        body["system"] = json!([{"type": "text", "text": s}]);
    }
    canonical(&body)
}

fn betas(request: &Request) -> Vec<String> {
    let mut headers = HeaderMap::new();
    AnthropicWire::default().headers(&ApiKey::new("k"), request, &mut headers);
    headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_request_passes_the_caching_rules(conversation in session(6), shape in shape()) {
        let request = request(conversation.messages, &shape);
        let mut off = request.clone();
        off.options.cache = PromptCache::off();

        // Anthropic: accepted, twice (the second reads), and the prompt unchanged.
        let body = bytes_of(&AnthropicWire::default(), &request);
        let betas = betas(&request);
        let betas: Vec<&str> = betas.iter().map(String::as_str).collect();
        let breakpoints = AnthropicCache::breakpoints(&body, &betas);
        prop_assert!(breakpoints.is_ok(), "{:?}", breakpoints);
        let mut cache = AnthropicCache::new(1024);
        prop_assert!(cache.check(&body, &betas, Duration::ZERO).is_ok());
        prop_assert!(cache.check(&body, &betas, Duration::from_secs(60)).is_ok());
        prop_assert_eq!(prompt(&body), prompt(&bytes_of(&AnthropicWire::default(), &off)));
        if shape.mode == CacheMode::Off {
            let own = breakpoints.unwrap().len();
            prop_assert!(own <= shape.own_markers.min(4));
        }

        // OpenAI: the retention the model offers, the key when caching is on.
        for flavor in [OpenAiFlavor::Chat, OpenAiFlavor::Responses] {
            let body = match flavor {
                OpenAiFlavor::Chat => bytes_of(&ChatWire { max_tokens_field: MaxTokensField::MaxCompletionTokens }, &request),
                OpenAiFlavor::Responses => bytes_of(&ResponsesWire { encrypted_reasoning: false }, &request),
            };
            let checked = OpenAiCache::new().check(&body, flavor, Duration::ZERO);
            prop_assert!(checked.is_ok(), "{:?}", checked);
            let key = body.get("prompt_cache_key").and_then(Value::as_str);
            let expected = (shape.key && shape.mode != CacheMode::Off).then_some("panto-0123456789abcdef");
            prop_assert_eq!(key, expected);
            if shape.mode == CacheMode::Off {
                prop_assert!(body.get("prompt_cache_retention").is_none());
            }
        }

        // Gemini caches implicitly: nothing of panto's own is sent.
        let gemini = bytes_of(&GeminiWire, &request);
        let text = gemini.to_string();
        prop_assert!(!text.contains("cache_control") && !text.contains("prompt_cache"));
    }
}

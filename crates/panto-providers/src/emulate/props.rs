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
    /// Every thinking block without its signature (a conversation carried over from a
    /// provider that signs nothing): Anthropic cannot take it back.
    unsigned: bool,
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
        prop::bool::weighted(0.25),
    )
        .prop_map(
            |(
                compaction,
                long_loop,
                cleared,
                own_markers,
                system_chars,
                mode,
                ttl,
                key,
                model,
                unsigned,
            )| {
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
                    unsigned,
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
    if shape.unsigned {
        for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
            if let ContentBlock::Thinking(t) = block {
                t.signature = None;
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

/// Whether the messages of a body alternate in role (the wire preparation's promise): two
/// messages of one role side by side are merged by the API into one turn, behind the back of
/// the breakpoints placed on them.
fn alternates(body: &Value) -> bool {
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["role"].as_str())
        .collect();
    roles.windows(2).all(|w| w[0] != w[1])
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
        prop_assert!(alternates(&body), "{}", body["messages"]);
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

/// An assistant message of nothing but thinking without a signature (which Anthropic cannot
/// take back) is dropped before the wire preparation, so the user messages around it are
/// merged into one there, where the breakpoints are placed, rather than sent side by side; the
/// emulator accepts the request and reads it back from the cache.
#[test]
fn an_assistant_message_of_unsigned_thinking_leaves_no_two_user_messages_side_by_side() {
    let results = "fn main() {}\n".repeat(400);
    let messages = vec![
        Message::user_text("Read the parser."),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                "c1",
                "read",
                json!({"path": "src/parser.rs"}),
            )],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result("c1", results, false)],
        ),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::Thinking(panto_model::ThinkingBlock::new(
                "The parser looks fine.",
                None,
            ))],
        ),
        Message::user_text("Then run its tests."),
    ];
    let request = Request::new("claude-sonnet-4-5", "You are terse.", messages, 4_096)
        .with_options(RequestOptions::new().with_cache(PromptCache::new()));
    let body = bytes_of(&AnthropicWire::default(), &request);
    assert!(alternates(&body), "{}", body["messages"]);
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    // The results and the next prompt, in that order, in the one user message.
    let last = &body["messages"][2]["content"];
    assert_eq!(last[0]["type"], "tool_result", "{last}");
    assert_eq!(last[1]["text"], "Then run its tests.", "{last}");
    let mut cache = AnthropicCache::new(1024);
    cache.check(&body, &[], Duration::ZERO).unwrap();
    let again = cache.check(&body, &[], Duration::from_secs(60)).unwrap();
    assert!(again.cache_read > 0, "{again:?}");
}

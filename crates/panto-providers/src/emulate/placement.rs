//! The adapters' caching against the emulators, case by case: where the Anthropic adapter puts
//! its breakpoints and what they save, and the `OpenAI` adapters' parameters.
//!
//! Anthropic: "Prompt caching", <https://platform.claude.com/docs/en/build-with-claude/prompt-caching>.
//! `OpenAI`: "Prompt caching", <https://developers.openai.com/api/docs/guides/prompt-caching>.

use std::time::Duration;

use panto_model::{CompactionBlock, ContentBlock, Message, Role, ThinkingBlock};
use panto_provider::{CacheMode, CacheTtl, PromptCache, Request, RequestOptions, ToolSpec};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{AnthropicCache, Billed, OpenAiCache, OpenAiFlavor};
use crate::anthropic::{AnthropicWire, EXTENDED_CACHE_TTL_BETA};
use crate::openai_chat::{ChatWire, MaxTokensField};
use crate::openai_responses::ResponsesWire;
use crate::secret::ApiKey;
use crate::transport::Wire;

const SYSTEM: &str = "You are a careful coding agent. Read before you write, run the tests.";

/// A tool-using conversation: `rounds` rounds of a prompt, a call and its result.
fn conversation(rounds: usize) -> Vec<Message> {
    let mut out = Vec::new();
    for r in 0..rounds {
        out.push(Message::user_text(format!(
            "Round {r}: fix the next failing test."
        )));
        out.push(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Reading the file."),
                ContentBlock::tool_use(
                    format!("call_{r}"),
                    "read",
                    json!({"path": format!("src/m{r}.rs")}),
                ),
            ],
        ));
        out.push(Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                format!("call_{r}"),
                "fn f() { todo!() }\n".repeat(60),
                false,
            )],
        ));
    }
    out
}

fn request(messages: Vec<Message>, cache: PromptCache) -> Request {
    let tools = vec![ToolSpec::new(
        "read",
        "Read a file",
        json!({"type": "object"}),
    )];
    Request::new("claude-sonnet-4-5", SYSTEM, messages, 1_024)
        .with_tools(tools)
        .with_options(RequestOptions::new().with_cache(cache))
}

fn anthropic(request: &Request) -> (Value, Vec<String>) {
    let wire = AnthropicWire::default();
    let body = serde_json::from_slice(&wire.body(request, false).to_bytes().unwrap()).unwrap();
    let mut headers = HeaderMap::new();
    wire.headers(&ApiKey::new("k"), request, &mut headers);
    let betas = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    (body, betas)
}

fn bill(cache: &mut AnthropicCache, request: &Request, at: Duration) -> Billed {
    let (body, betas) = anthropic(request);
    let betas: Vec<&str> = betas.iter().map(String::as_str).collect();
    cache.check(&body, &betas, at).unwrap()
}

/// Where the breakpoints are: (message, block) of each marked block, `None` for the system.
fn marks(body: &Value) -> Vec<Option<(usize, usize)>> {
    let mut out = Vec::new();
    if body["system"]
        .as_array()
        .is_some_and(|s| s.iter().any(|b| b.get("cache_control").is_some()))
    {
        out.push(None);
    }
    for (m, message) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (b, block) in message["content"].as_array().unwrap().iter().enumerate() {
            if block.get("cache_control").is_some() {
                out.push(Some((m, b)));
            }
        }
    }
    out
}

/// Each turn reads what the turn before wrote: after the first, nearly all of the input is
/// read, and only the new blocks are written.
#[test]
fn each_turn_reads_the_one_before() {
    let mut cache = AnthropicCache::new(1024);
    let mut messages = conversation(6);
    let first = bill(
        &mut cache,
        &request(messages.clone(), PromptCache::new()),
        Duration::ZERO,
    );
    assert!(
        first.cache_write > 1024 && first.cache_read == 0,
        "{first:?}"
    );
    messages.extend(conversation(7).split_off(18));
    let second = bill(
        &mut cache,
        &request(messages, PromptCache::new()),
        Duration::from_secs(30),
    );
    assert_eq!(second.cache_read, first.cache_write, "{second:?}");
    assert!(second.cache_write < second.cache_read / 4, "{second:?}");
}

/// A tool loop of 50 calls adds 100 blocks: more than the 20 a hit is looked for back from the
/// latest breakpoint, so the adapter bridges with one where the previous request ended.
#[test]
fn a_long_tool_loop_is_bridged() {
    let mut messages = conversation(3);
    let mut cache = AnthropicCache::new(1024);
    let before = bill(
        &mut cache,
        &request(messages.clone(), PromptCache::new()),
        Duration::ZERO,
    );
    let calls: Vec<ContentBlock> = (0..50)
        .map(|i| ContentBlock::tool_use(format!("loop_{i}"), "read", json!({"path": i})))
        .collect();
    let results: Vec<ContentBlock> = (0..50)
        .map(|i| ContentBlock::tool_result(format!("loop_{i}"), "ok", false))
        .collect();
    messages.push(Message::new(Role::Assistant, calls));
    messages.push(Message::new(Role::User, results));
    let after = request(messages, PromptCache::new());
    let (mut body, _) = anthropic(&after);
    // The previous request ended with the last block of message 6 (the third round's result).
    assert!(marks(&body).contains(&Some((6, 0))), "{:?}", marks(&body));
    let mut twin = AnthropicCache::new(1024);
    twin.check(
        &anthropic(&request(conversation(3), PromptCache::new())).0,
        &[],
        Duration::ZERO,
    )
    .unwrap();
    let bridged = cache.check(&body, &[], Duration::from_secs(30)).unwrap();
    assert_eq!(bridged.cache_read, before.cache_write);
    // Without the bridge, the lookback finds nothing.
    body["messages"][6]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    assert_eq!(
        twin.check(&body, &[], Duration::from_secs(30))
            .unwrap()
            .cache_read,
        0
    );
}

/// The first request after a compaction reads the tools and system prompt and writes only what
/// changed: the compaction block and what follows it, which the stable anchor then keeps.
#[test]
fn after_a_compaction_only_what_changed_is_written() {
    let mut cache = AnthropicCache::new(200);
    let long_system = format!("{SYSTEM} {}", "Keep the diff small. ".repeat(200));
    let with = |messages: Vec<Message>, stable| {
        let mut r = request(messages, PromptCache::new().with_stable_messages(stable));
        r.system.clone_from(&long_system);
        r
    };
    bill(&mut cache, &with(conversation(4), 0), Duration::ZERO);
    let head = Message::new(
        Role::User,
        vec![ContentBlock::Compaction(CompactionBlock::new(
            "Rounds 0 to 2 fixed three tests. ".repeat(80),
        ))],
    );
    let mut compacted = vec![head];
    compacted.extend(conversation(4).split_off(9));
    let after = with(compacted, 1);
    let (body, _) = anthropic(&after);
    assert_eq!(
        marks(&body)[..2],
        [None, Some((0, 0))],
        "{:?}",
        marks(&body)
    );
    let billed = bill(&mut cache, &after, Duration::from_secs(30));
    let system_part = super::tokens_of(&body["tools"][0]) + super::tokens_of(&body["system"][0]);
    assert_eq!(billed.cache_read, system_part, "{billed:?}");
    assert_eq!(
        billed.total() - billed.cache_read,
        billed.cache_write + billed.input
    );
}

/// Thinking blocks never carry a breakpoint: the latest anchor moves to the block before.
#[test]
fn thinking_is_never_marked() {
    let mut messages = conversation(3);
    messages.push(Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text("Let me think."),
            ContentBlock::Thinking(ThinkingBlock::new("hm", Some("sig".into()))),
        ],
    ));
    let (body, _) = anthropic(&request(messages, PromptCache::new()));
    let last = body["messages"].as_array().unwrap().len() - 1;
    assert!(
        marks(&body).contains(&Some((last, 0))),
        "{:?}",
        marks(&body)
    );
    assert!(!marks(&body).contains(&Some((last, 1))));
}

/// `cache_ttl = "1h"`: every anchor asks for an hour, with the beta; `prompt_cache = false`:
/// none; a read-only request (a native compaction) takes no latest anchor.
#[test]
fn the_settings_reach_the_wire() {
    let long = request(conversation(4), PromptCache::new().with_ttl(CacheTtl::Long));
    let (body, betas) = anthropic(&long);
    assert!(betas.iter().any(|b| b == EXTENDED_CACHE_TTL_BETA));
    // Rounds' results and next prompts merge: nine messages, the last the fourth result.
    let last = &body["messages"][8]["content"][0]["cache_control"];
    assert_eq!(last, &json!({"type": "ephemeral", "ttl": "1h"}));
    let (off, betas) = anthropic(&request(conversation(4), PromptCache::off()));
    assert!(marks(&off).is_empty() && betas.is_empty());
    let read_only = request(
        conversation(4),
        PromptCache::new().with_mode(CacheMode::ReadOnly),
    );
    let (body, _) = anthropic(&read_only);
    assert!(!marks(&body).contains(&Some((8, 0))), "{:?}", marks(&body));
    assert!(marks(&body).contains(&Some((6, 1))), "{:?}", marks(&body));
}

/// A caller's breakpoints are kept and counted: with three of its own, panto adds one; past
/// four, the last of the caller's are left out; below the minimum, panto adds none.
#[test]
fn the_callers_breakpoints_count() {
    let own = |n: usize| {
        let mut messages = conversation(4);
        for m in messages.iter_mut().filter(|m| m.role == Role::User).take(n) {
            if let ContentBlock::Text(t) = &mut m.content[0] {
                t.extra
                    .insert("cache_control".into(), json!({"type": "ephemeral"}));
            }
        }
        marks(&anthropic(&request(messages, PromptCache::new())).0).len()
    };
    assert_eq!(own(3), 4);
    assert_eq!(own(4), 4);
    let short = vec![Message::user_text("hi")];
    assert!(marks(&anthropic(&request(short, PromptCache::new())).0).is_empty());
}

/// `OpenAI`: the conversation's key, and extended retention only where the model offers it.
#[test]
fn openai_gets_the_key_and_the_retention_its_model_offers() {
    let body = |model: &str, cache: PromptCache, flavor: OpenAiFlavor| -> Value {
        let mut r = request(conversation(2), cache);
        r.model = model.to_owned();
        let bytes = match flavor {
            OpenAiFlavor::Chat => ChatWire {
                max_tokens_field: MaxTokensField::MaxTokens,
            }
            .body(&r, false),
            OpenAiFlavor::Responses => ResponsesWire {
                encrypted_reasoning: false,
            }
            .body(&r, false),
        };
        serde_json::from_slice(&bytes.to_bytes().unwrap()).unwrap()
    };
    for flavor in [OpenAiFlavor::Chat, OpenAiFlavor::Responses] {
        let keyed = PromptCache::new()
            .with_key("panto-abc")
            .with_ttl(CacheTtl::Long);
        let b = body("gpt-5.1", keyed.clone(), flavor);
        assert_eq!(b["prompt_cache_key"], json!("panto-abc"));
        assert_eq!(b["prompt_cache_retention"], json!("24h"));
        assert!(OpenAiCache::new().check(&b, flavor, Duration::ZERO).is_ok());
        let b = body("gpt-4o", keyed, flavor);
        assert!(b.get("prompt_cache_retention").is_none());
        let b = body("gpt-5.1", PromptCache::new().with_key("panto-abc"), flavor);
        assert!(b.get("prompt_cache_retention").is_none());
        let b = body("gpt-5.1", PromptCache::off().with_key("panto-abc"), flavor);
        assert!(b.get("prompt_cache_key").is_none());
    }
}

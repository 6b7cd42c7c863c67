//! Tests of the emulators themselves: each rule as its page states it, so that a request panto
//! builds is checked against rules that are known to hold.
//!
//! Anthropic: "Prompt caching", <https://platform.claude.com/docs/en/build-with-claude/prompt-caching>.
//! `OpenAI`: "Prompt caching", <https://developers.openai.com/api/docs/guides/prompt-caching>.

use std::time::Duration;

use serde_json::{Value, json};

use super::{AnthropicCache, Billed, OpenAiCache, OpenAiFlavor};

const LONG_BETA: &str = "extended-cache-ttl-2025-04-11";

fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// A text of about `tokens` emulator tokens (a quarter of its bytes).
fn text(tokens: usize, seed: &str) -> String {
    seed.repeat(tokens * 4 / seed.len().max(1) + 1)
}

/// An Anthropic body: a system prompt, then `blocks` user text blocks of `each` tokens, a
/// breakpoint on the blocks named in `marks` (with `ttl` when given).
fn claude(blocks: usize, each: usize, marks: &[(usize, Option<&str>)]) -> Value {
    let content: Vec<Value> = (0..blocks)
        .map(|i| {
            let mut b = json!({"type": "text", "text": text(each, &format!("block {i} "))});
            if let Some((_, ttl)) = marks.iter().find(|(m, _)| *m == i) {
                b["cache_control"] = match ttl {
                    Some(t) => json!({"type": "ephemeral", "ttl": t}),
                    None => json!({"type": "ephemeral"}),
                };
            }
            b
        })
        .collect();
    json!({"model": "claude-x", "max_tokens": 100, "system": "Be brief.",
           "messages": [{"role": "user", "content": content}]})
}

fn refusal(body: &Value, betas: &[&str]) -> String {
    AnthropicCache::breakpoints(body, betas)
        .unwrap_err()
        .message
}

/// "You can define up to 4 cache breakpoints"; "Thinking blocks cannot be explicitly marked";
/// empty text blocks cannot be cached; "cache entries with longer TTL must appear before
/// shorter TTLs"; the 1-hour lifetime needs its beta.
#[test]
fn anthropic_refuses_what_the_page_says_it_refuses() {
    let five: Vec<(usize, Option<&str>)> = (0..5).map(|i| (i, None)).collect();
    assert!(refusal(&claude(6, 10, &five), &[]).contains("A maximum of 4 blocks"));
    assert!(AnthropicCache::breakpoints(&claude(6, 10, &five[..4]), &[]).is_ok());
    // The request-level marker of automatic caching takes a slot.
    let mut auto = claude(6, 10, &five[..4]);
    auto["cache_control"] = json!({"type": "ephemeral"});
    assert!(refusal(&auto, &[]).contains("Found 5"));

    let thinking = json!({"model": "claude-x", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s",
            "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "ok"}]}]});
    assert!(refusal(&thinking, &[]).contains("Extra inputs are not permitted"));
    let empty = json!({"model": "claude-x", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}]}]});
    assert!(refusal(&empty, &[]).contains("empty text"));

    let hour = claude(3, 10, &[(0, Some("1h")), (2, None)]);
    assert!(refusal(&hour, &[]).contains(LONG_BETA));
    assert!(AnthropicCache::breakpoints(&hour, &[LONG_BETA]).is_ok());
    let backwards = claude(3, 10, &[(0, None), (2, Some("1h"))]);
    assert!(refusal(&backwards, &[LONG_BETA]).contains("must not come after"));
}

/// A prefix is read back exactly when it is unchanged up to the breakpoint; the new part is
/// written; tokens after the last breakpoint are plain input.
#[test]
fn anthropic_reads_an_unchanged_prefix_and_writes_the_rest() {
    let mut cache = AnthropicCache::new(1024);
    let first = claude(4, 400, &[(2, None)]);
    let billed = cache.check(&first, &[], Duration::ZERO).unwrap();
    assert_eq!(billed.cache_read, 0);
    assert!(billed.cache_write >= 1200, "{billed:?}");
    assert!(billed.input >= 400 && billed.input < 420, "{billed:?}");
    // The same request a minute later reads what the first wrote.
    let again = cache.check(&first, &[], minutes(1)).unwrap();
    assert_eq!(again.cache_read, billed.cache_write);
    assert_eq!(again.cache_write, 0);
    // A change before the breakpoint misses.
    let mut changed = first.clone();
    changed["messages"][0]["content"][0]["text"] = json!("something else entirely");
    assert_eq!(
        cache.check(&changed, &[], minutes(2)).unwrap().cache_read,
        0
    );
    // The usage fields.
    let usage = AnthropicCache::usage(&again, 7);
    assert_eq!(usage["cache_read_input_tokens"], json!(again.cache_read));
    assert_eq!(usage["cache_creation_input_tokens"], json!(0));
    assert_eq!(
        usage["cache_creation"]["ephemeral_1h_input_tokens"],
        json!(0)
    );
    assert_eq!(usage["output_tokens"], json!(7));
}

/// "The minimum cacheable prompt length": a shorter prefix is not cached, and no error.
#[test]
fn anthropic_caches_nothing_below_the_minimum() {
    let mut cache = AnthropicCache::new(4096);
    let body = claude(3, 400, &[(2, None)]);
    for at in [0, 1] {
        let billed = cache.check(&body, &[], minutes(at)).unwrap();
        assert_eq!((billed.cache_read, billed.cache_write), (0, 0));
        assert_eq!(billed.input, billed.total());
    }
}

/// "Checks for cache hits at all previous content block boundaries (up to approximately 20
/// blocks before your explicit breakpoint)": 19 blocks on, the earlier entry is found; 25
/// blocks on, it is not, unless a breakpoint stands where it was written.
#[test]
fn anthropic_looks_back_twenty_blocks() {
    let hit = |later: usize, bridge: bool| {
        let mut cache = AnthropicCache::new(100);
        cache
            .check(&claude(10, 50, &[(9, None)]), &[], Duration::ZERO)
            .unwrap();
        let mut marks = vec![(9 + later, None)];
        if bridge {
            marks.insert(0, (9, None));
        }
        let body = claude(10 + later, 50, &marks);
        cache.check(&body, &[], minutes(1)).unwrap().cache_read
    };
    assert!(hit(19, false) > 0);
    assert_eq!(hit(25, false), 0);
    assert!(hit(25, true) > 0);
}

/// "The cache has a minimum 5-minute lifetime", refreshed each time it is used; `"1h"` keeps
/// an hour.
#[test]
fn anthropic_entries_expire_unless_used() {
    let mut cache = AnthropicCache::new(100);
    let body = claude(3, 100, &[(2, None)]);
    cache.check(&body, &[], Duration::ZERO).unwrap();
    assert!(cache.check(&body, &[], minutes(4)).unwrap().cache_read > 0);
    // Refreshed at 4 minutes: still there at 8, gone at 14.
    assert!(cache.check(&body, &[], minutes(8)).unwrap().cache_read > 0);
    assert_eq!(cache.check(&body, &[], minutes(14)).unwrap().cache_read, 0);
    let long = claude(3, 100, &[(2, Some("1h"))]);
    let mut cache = AnthropicCache::new(100);
    let written = cache.check(&long, &[LONG_BETA], Duration::ZERO).unwrap();
    assert!(written.cache_write_long > 0 && written.cache_write == 0);
    assert!(
        cache
            .check(&long, &[LONG_BETA], minutes(50))
            .unwrap()
            .cache_read
            > 0
    );
}

/// A Chat Completions body of a system prompt and `turns` user messages of `each` tokens.
fn chat(turns: usize, each: usize, key: Option<&str>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "Be brief."})];
    messages.extend(
        (0..turns).map(|i| json!({"role": "user", "content": text(each, &format!("turn {i} "))})),
    );
    let mut body = json!({"model": "gpt-5", "messages": messages});
    if let Some(key) = key {
        body["prompt_cache_key"] = json!(key);
    }
    body
}

/// "Caching is enabled automatically for prompts that are 1024 tokens or longer", hits "in
/// increments of 128 tokens", and the usage field of each protocol.
#[test]
fn openai_caches_long_prompts_in_steps() {
    let mut cache = OpenAiCache::new();
    let short = chat(1, 500, None);
    cache
        .check(&short, OpenAiFlavor::Chat, Duration::ZERO)
        .unwrap();
    assert_eq!(
        cache
            .check(&short, OpenAiFlavor::Chat, minutes(1))
            .unwrap()
            .cache_read,
        0
    );
    let long = chat(3, 700, Some("k"));
    let first = cache.check(&long, OpenAiFlavor::Chat, minutes(1)).unwrap();
    assert_eq!(first.cache_read, 0);
    let mut grown = chat(4, 700, Some("k"));
    let second = cache.check(&grown, OpenAiFlavor::Chat, minutes(2)).unwrap();
    assert!(
        second.cache_read >= 1024 && (second.cache_read - 1024).is_multiple_of(128),
        "{second:?}"
    );
    assert!(second.cache_read <= first.total());
    // Another key routes elsewhere: nothing is met there.
    grown["prompt_cache_key"] = json!("other");
    assert_eq!(
        cache
            .check(&grown, OpenAiFlavor::Chat, minutes(3))
            .unwrap()
            .cache_read,
        0
    );
    let usage = OpenAiCache::usage(&second, 5, OpenAiFlavor::Chat);
    assert_eq!(usage["prompt_tokens"], json!(second.total()));
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"],
        json!(second.cache_read)
    );
    let usage = OpenAiCache::usage(&second, 5, OpenAiFlavor::Responses);
    assert_eq!(
        usage["input_tokens_details"]["cached_tokens"],
        json!(second.cache_read)
    );
}

/// In-memory entries are cleared after idle minutes; `prompt_cache_retention: "24h"` keeps
/// them, on the models that offer it ("Prompt cache retention"), and GPT-5.5 and later refuse
/// `in_memory`.
#[test]
fn openai_retention_follows_the_model() {
    let mut cache = OpenAiCache::new();
    let body = chat(3, 700, Some("k"));
    cache
        .check(&body, OpenAiFlavor::Chat, Duration::ZERO)
        .unwrap();
    assert_eq!(
        cache
            .check(&body, OpenAiFlavor::Chat, minutes(20))
            .unwrap()
            .cache_read,
        0
    );
    let mut kept = chat(3, 700, Some("k2"));
    kept["prompt_cache_retention"] = json!("24h");
    cache
        .check(&kept, OpenAiFlavor::Chat, Duration::ZERO)
        .unwrap();
    assert!(
        cache
            .check(&kept, OpenAiFlavor::Chat, minutes(120))
            .unwrap()
            .cache_read
            > 0
    );
    let mut refused = kept.clone();
    refused["model"] = json!("gpt-4o");
    assert!(
        cache
            .check(&refused, OpenAiFlavor::Chat, Duration::ZERO)
            .is_err()
    );
    let mut newer = body.clone();
    newer["model"] = json!("gpt-5.5");
    newer["prompt_cache_retention"] = json!("in_memory");
    let message = cache
        .check(&newer, OpenAiFlavor::Chat, Duration::ZERO)
        .unwrap_err()
        .message;
    assert!(message.contains("only with 24h"), "{message}");
}

#[test]
fn a_bill_adds_up() {
    let billed = Billed {
        input: 1,
        cache_read: 2,
        cache_write: 3,
        cache_write_long: 4,
    };
    assert_eq!(billed.total(), 10);
}

//! The `cost` section: what a long tool-using session is billed on each protocol, with panto's
//! prompt caching and without, against loopback emulators that enforce the providers' caching as
//! their pages state it (`panto_providers::emulate`, docs/providers.md "Prompt caching").
//!
//! The session: 300 user turns of a scripted coding agent (a long system prompt and three
//! tools), each turn 0 to 3 tool calls whose results are 300 to 2,000 tokens, sent through the
//! real `Driver` and the real adapters (Anthropic Messages, `OpenAI` Chat Completions and
//! Responses) to a `Loopback` whose window (40,000 of its tokens) is smaller than the one panto
//! is configured with (56,000): the first overflow teaches the window, then `auto_compact = 0.8`
//! compacts ahead. A virtual clock moves 20 seconds a request, and 15 minutes every 60 turns (the
//! cache goes cold). What each request is billed is the emulator's usage weighed by
//! `panto_model::usage_cost`, the function every report uses.
//!
//! `--sweep` runs instead the same session with each part of the cache-aware rule
//! (`CacheAware`) on and off, over emulator windows of 24,000 to 64,000 (panto configured with
//! the same) and three patterns of pauses (none, 15 minutes every 60 turns, 6 minutes every 10),
//! per protocol: the measurements the rule was chosen from (docs/compaction.md).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Result;
use panto_compact::provider::{PromptCache, Provider, RequestOptions, ToolSpec};
use panto_compact::{
    CacheAware, Compactor, CompactorConfig, Driver, MemoryLog, MemoryStore, ModelRef, Window,
    WindowSource,
};
use panto_model::{ContentBlock, Cost, Message, Prices, Role, Usage, usage_cost};
use panto_providers::emulate::{Loopback, LoopbackConfig, Script, Scripted, Seen, tokens_of};
use panto_providers::{
    AnthropicProvider, Config, OpenAiChatProvider, OpenAiResponsesProvider, Protocol, RetryPolicy,
};
use serde_json::{Value, json};

use super::Flags;
use crate::table::Table;

mod sweep;

/// User turns of the session.
const TURNS: usize = 300;
/// The emulator's window, in its tokens.
const WINDOW: u64 = 40_000;
/// The window panto is configured with: larger, so that the first overflow teaches it, and by
/// more than a quarter, so that `auto_compact = 0.8` of it lies above the emulator's window and
/// every protocol's session holds an overflow compaction besides its proactive ones (at 48,000
/// the `OpenAI` sessions compacted ahead before any overflow).
const CONFIGURED: u64 = 56_000;
/// Turns between two long pauses.
const IDLE_EVERY: usize = 60;
/// The emulator's windows of the sweep (`--sweep`).
const SWEEP_WINDOWS: [u64; 6] = [24_000, 32_000, 40_000, 48_000, 56_000, 64_000];

/// One session to run: a protocol, how panto caches, the windows and the pauses.
#[derive(Clone, Copy, Debug)]
struct Variant {
    protocol: Protocol,
    caching: bool,
    /// The parts of the cache-aware rule the driver applies.
    parts: CacheAware,
    /// The emulator's window, in its tokens.
    window: u64,
    /// The window panto is configured with.
    configured: u64,
    pauses: Pauses,
}

impl Variant {
    /// The default run's session of `protocol`.
    fn default_run(protocol: Protocol, caching: bool, parts: CacheAware) -> Variant {
        Variant {
            protocol,
            caching,
            parts,
            window: WINDOW,
            configured: CONFIGURED,
            pauses: Pauses::OCCASIONAL,
        }
    }
}

/// When the scripted user pauses, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pauses {
    /// A pause after every `every`th turn (none when 0).
    every: usize,
    /// Its length, in minutes.
    minutes: u64,
    name: &'static str,
}

impl Pauses {
    const NONE: Pauses = Pauses {
        every: 0,
        minutes: 0,
        name: "none",
    };
    /// The default run's: 15 minutes every 60 turns, past a 5-minute cache.
    const OCCASIONAL: Pauses = Pauses {
        every: IDLE_EVERY,
        minutes: 15,
        name: "15 min / 60 turns",
    };
    /// Past the cache's lifetime every tenth turn.
    const FREQUENT: Pauses = Pauses {
        every: 10,
        minutes: 6,
        name: "6 min / 10 turns",
    };
}

/// What a session was billed, and what the emulator saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Every answered request, weighed.
    billed: Cost,
    /// Every request the emulator saw, refused ones included.
    requests: usize,
    /// Requests refused for another reason than an overflow (a breakpoint the API refuses).
    refused: Vec<String>,
    overflows: usize,
    compaction_requests: usize,
    /// What the compaction requests alone were billed.
    compaction_billed: u64,
    /// The input of the conversation's answered requests (not the compactions'), and how many.
    conversation_input: u64,
    conversation_requests: u64,
    compactions: usize,
    /// The first answered request after each compaction: (read, written, total, unchanged
    /// prefix: tools and system prompt).
    after: Vec<(u64, u64, u64, u64)>,
    errors: Vec<String>,
}

pub(crate) fn cost(_root: &std::path::Path, flags: &Flags) -> Result<()> {
    let turns = if flags.quick { TURNS / 3 } else { TURNS };
    if flags.sweep {
        return sweep::sweep(turns);
    }
    if flags.sweep_warm {
        return sweep::sweep_warm(turns);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut summary = Table::new([
        "protocol",
        "requests",
        "compactions",
        "input tokens (no cache)",
        "billed, prompt_cache = false",
        "billed, panto's caching",
        "cheaper than no cache",
        "cheaper than prompt_cache = false",
        "read from cache",
        "refused",
    ])
    .right([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let mut after = Table::new([
        "protocol",
        "compactions",
        "read the unchanged prefix",
        "read",
        "unchanged prefix",
        "written",
        "written share",
    ])
    .right([1, 2, 3, 4, 5, 6]);
    let mut rule = Table::new([
        "protocol",
        "billed, plain share",
        "billed, cache-aware share",
        "saved",
        "compactions plain / aware",
    ])
    .right([1, 2, 3, 4]);
    let (mut requests, mut refused) = (0, 0);
    for protocol in [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
    ] {
        let run = |caching, parts| {
            runtime.block_on(session(
                Variant::default_run(protocol, caching, parts),
                turns,
            ))
        };
        let aware = run(true, CacheAware::DEFAULT)?;
        let plain = run(true, CacheAware::OFF)?;
        let none = run(false, CacheAware::OFF)?;
        for o in [&aware, &plain, &none] {
            requests += o.requests;
            refused += o.refused.len();
            if let Some(first) = o.refused.first() {
                eprintln!("cost: {}: refused: {first}", protocol.name());
            }
            if !o.errors.is_empty() {
                eprintln!(
                    "cost: {}: {} sends failed: {:?}",
                    protocol.name(),
                    o.errors.len(),
                    o.errors.first()
                );
            }
        }
        let name = protocol.name();
        if aware.overflows == 0 || aware.compactions <= aware.overflows {
            eprintln!(
                "cost: {name}: {} overflow and {} proactive compactions; the section wants both",
                aware.overflows,
                aware.compactions.saturating_sub(aware.overflows)
            );
        }
        summary.row([
            name.to_owned(),
            aware.billed.replies.to_string(),
            format!("{} ({} overflow)", aware.compactions, aware.overflows),
            aware.billed.input_total().to_string(),
            none.billed.billed_input_tokens.to_string(),
            aware.billed.billed_input_tokens.to_string(),
            format!(
                "{:.2}×",
                ratio(aware.billed.input_total(), aware.billed.billed_input_tokens)
            ),
            format!(
                "{:.2}×",
                ratio(
                    none.billed.billed_input_tokens,
                    aware.billed.billed_input_tokens
                )
            ),
            format!("{:.0}%", 100.0 * aware.billed.cache_hit_share()),
            (aware.refused.len() + plain.refused.len() + none.refused.len()).to_string(),
        ]);
        let n = aware.after.len().max(1) as u64;
        let (read, prefix, written, total) = aware.after.iter().fold((0, 0, 0, 0), |a, x| {
            (a.0 + x.0, a.1 + x.3, a.2 + x.1, a.3 + x.2)
        });
        let whole = aware.after.iter().filter(|x| x.0 >= x.3).count();
        after.row([
            name.to_owned(),
            aware.after.len().to_string(),
            format!("{whole} of {}", aware.after.len()),
            (read / n).to_string(),
            (prefix / n).to_string(),
            (written / n).to_string(),
            format!("{:.0}%", 100.0 * written as f64 / total.max(1) as f64),
        ]);
        rule.row([
            name.to_owned(),
            plain.billed.billed_input_tokens.to_string(),
            aware.billed.billed_input_tokens.to_string(),
            format!(
                "{:.1}%",
                100.0
                    * (1.0
                        - ratio(
                            aware.billed.billed_input_tokens,
                            plain.billed.billed_input_tokens
                        ))
            ),
            format!("{} / {}", plain.compactions, aware.compactions),
        ]);
    }
    println!(
        "{turns} turns, window {WINDOW} of the emulator's tokens (panto configured with {CONFIGURED}), `auto_compact = 0.8`. Billed input in tokens at the full input price (`panto_model::usage_cost`): \"no cache\" bills every input token at that price; `prompt_cache = false` is the same session with panto's caching off (`OpenAI` still caches automatically). Requests and compactions of the cached run, conversation requests and compaction requests together.\n"
    );
    print!("{summary}");
    println!(
        "\nThe first conversation request after each compaction (means; one after a pause finds the cache expired and reads nothing):\n"
    );
    print!("{after}");
    println!(
        "\nThe proactive rule: the configured share against the cache-aware one as shipped (`CacheAware::DEFAULT`, the cold part alone; docs/compaction.md; `--sweep` measures each part over windows and pauses):\n"
    );
    print!("{rule}");
    println!(
        "\nRequests sent in the {} sessions: {requests}; refused for a caching rule: {refused}.",
        3 * 3
    );
    Ok(())
}

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}

/// Runs one session and adds up what the emulator billed.
async fn session(variant: Variant, turns: usize) -> Result<Outcome> {
    let plan = Arc::new(Mutex::new(Plan::default()));
    let script = Arc::new(Agent {
        plan: Arc::clone(&plan),
    });
    let config = LoopbackConfig {
        window: variant.window,
        anthropic_minimum: 1024,
    };
    let loopback = Arc::new(Loopback::start(config, script).await?);
    let model = match variant.protocol {
        Protocol::Anthropic => "claude-sonnet-4-5",
        _ => "gpt-5.1",
    };
    let mut driver = driver(variant, &loopback, model)?;
    let mut errors = Vec::new();
    for turn in 1..=turns {
        plan_turn(&plan, turn);
        let mut new = vec![Message::user_text(prompt(turn))];
        loop {
            loopback.advance(Duration::from_secs(20));
            let reply = match driver.send(new, &mut |_| {}).await {
                Ok(reply) => reply,
                Err(e) => {
                    errors.push(format!("turn {turn}: {e}"));
                    break;
                }
            };
            let results: Vec<ContentBlock> = reply
                .message
                .content
                .iter()
                .enumerate()
                .filter_map(|(j, b)| match b {
                    ContentBlock::ToolUse(u) => Some(ContentBlock::tool_result(
                        u.id.clone(),
                        file_text(turn, j),
                        false,
                    )),
                    _ => None,
                })
                .collect();
            if results.is_empty() {
                break;
            }
            new = vec![Message::new(Role::User, results)];
        }
        if variant.pauses.every > 0 && turn % variant.pauses.every == 0 {
            loopback.advance(Duration::from_secs(variant.pauses.minutes * 60));
        }
    }
    let mut outcome = account(&loopback.take(), model);
    outcome.errors = errors;
    Ok(outcome)
}

/// The driver of a variant, over the loopback.
fn driver(variant: Variant, loopback: &Arc<Loopback>, model: &str) -> Result<Driver<MemoryStore>> {
    let config = Config::new(loopback.base_url(), "bench-key")
        .with_streaming(false)
        .with_retry(RetryPolicy::none());
    let provider: Arc<dyn Provider> = match variant.protocol {
        Protocol::Anthropic => Arc::new(AnthropicProvider::new(config)?),
        Protocol::OpenAiChat => Arc::new(OpenAiChatProvider::new(config)?),
        _ => Arc::new(OpenAiResponsesProvider::new(config)?),
    };
    let compactor = Compactor::new(ModelRef::new(provider, model))
        .with_config(CompactorConfig::new().with_keep_tokens(4_000));
    let cache = if variant.caching {
        PromptCache::new().with_key("panto-bench")
    } else {
        PromptCache::off()
    };
    let clock = Arc::clone(loopback);
    Ok(
        Driver::new(compactor, MemoryLog::memory(), Default::default())
            .with_system(agent_prompt())
            .with_tools(tools())
            .with_max_output_tokens(1024)
            .with_window(Window::new(variant.configured, WindowSource::Configured))
            .with_auto_compact(Some(0.8))
            .with_request_options(RequestOptions::new().with_cache(cache))
            .with_cache_aware_parts(variant.parts)
            .with_clock(Arc::new(move || clock.now())),
    )
}

/// What the emulator's answers were billed, weighed; refusals, overflows, and the first request
/// after each compaction.
fn account(seen: &[Seen], model: &str) -> Outcome {
    let mut out = Outcome {
        requests: seen.len(),
        ..Outcome::default()
    };
    let mut compacting = false;
    for s in seen {
        let compaction = !is_agent(&s.body);
        if let Some(refusal) = &s.refusal {
            if refusal.contains("too long") || refusal.contains("context") {
                out.overflows += 1;
            } else {
                out.refused.push(refusal.clone());
            }
            continue;
        }
        let b = s.billed;
        let mut usage = Usage::new(b.input, 0)
            .with_cache_read(b.cache_read)
            .with_cache_creation(b.cache_write + b.cache_write_long);
        usage.extra.insert(
            "cache_creation".into(),
            json!({"ephemeral_5m_input_tokens": b.cache_write, "ephemeral_1h_input_tokens": b.cache_write_long}),
        );
        let cost = usage_cost(&usage, Some(model), &Prices::new());
        out.billed += cost;
        if compaction {
            out.compaction_requests += 1;
            out.compaction_billed += cost.billed_input_tokens;
            if !compacting {
                out.compactions += 1;
            }
            compacting = true;
        } else {
            out.conversation_input += b.total();
            out.conversation_requests += 1;
        }
        if !compaction && compacting {
            compacting = false;
            let written = b.cache_write + b.cache_write_long;
            out.after
                .push((b.cache_read, written, b.total(), unchanged_prefix(&s.body)));
        }
    }
    out
}

/// The emulator's tokens of the tools and the system prompt (what a compaction leaves as it
/// was), counted block by block as the Anthropic emulator counts them.
fn unchanged_prefix(body: &Value) -> u64 {
    let tools: u64 = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(tokens_of)
        .sum();
    let system = match &body["system"] {
        Value::String(s) => tokens_of(&json!({"type": "text", "text": s})),
        Value::Array(blocks) => blocks.iter().map(tokens_of).sum(),
        _ => body
            .get("instructions")
            .or_else(|| body["messages"][0].get("content"))
            .map_or(0, |i| tokens_of(&json!({"type": "text", "text": i}))),
    };
    tools + system
}

/// The agent's system prompt: the rules of a coding agent, about 2,500 tokens.
fn agent_prompt() -> String {
    let mut prompt = String::from("You are a careful coding agent working in a Rust repository.\n");
    for i in 1..=60 {
        prompt.push_str(&format!(
            "Rule {i}: read the files a change touches before editing them, keep each change small, run the tests of the crate after rule {i} applies, and say what you changed and why.\n"
        ));
    }
    prompt
}

fn tools() -> Vec<ToolSpec> {
    let schema = |field: &str| json!({"type": "object", "properties": {field: {"type": "string", "description": format!("The {field} to use.")}}, "required": [field]});
    vec![
        ToolSpec::new(
            "read",
            "Read a file of the repository and return its text.",
            schema("path"),
        ),
        ToolSpec::new(
            "edit",
            "Replace a passage of a file with new text.",
            schema("patch"),
        ),
        ToolSpec::new(
            "run",
            "Run a shell command in the repository and return its output.",
            schema("command"),
        ),
    ]
}

fn prompt(turn: usize) -> String {
    format!(
        "Turn {turn}: the test of module {turn} fails after the last refactor. Find out why and fix it, keeping the public API as it is; {}",
        "tell me what the cause was and which files changed. ".repeat(1 + turn % 5)
    )
}

/// The text of the `j`th file read in `turn`: 300 to 2,000 tokens of test code.
fn file_text(turn: usize, j: usize) -> String {
    let tokens = 300 + (turn * 37 + j * 101) % 1_700;
    let mut text = String::new();
    let mut k = 0;
    while text.len() < tokens * 4 {
        text.push_str(&format!(
            "fn test_{turn}_{j}_{k}() {{ assert_eq!(parse(\"{k}\"), Ok({k})); }}\n"
        ));
        k += 1;
    }
    text
}

/// The scripted agent's plan for the current turn.
#[derive(Debug, Default)]
struct Plan {
    turn: usize,
    calls_left: usize,
    call: usize,
}

fn plan_turn(plan: &Mutex<Plan>, turn: usize) {
    let mut p = plan.lock().unwrap_or_else(PoisonError::into_inner);
    *p = Plan {
        turn,
        calls_left: turn % 4,
        call: 0,
    };
}

/// The model: `calls_left` tool calls one at a time, then a short answer; a summary for a
/// compaction request.
struct Agent {
    plan: Arc<Mutex<Plan>>,
}

impl Script for Agent {
    fn answer(&self, _protocol: Protocol, body: &Value) -> Scripted {
        if !is_agent(body) {
            return Scripted {
                text: summary_of(body),
                calls: Vec::new(),
            };
        }
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        if plan.calls_left == 0 {
            return Scripted {
                text: format!("Turn {} done: the test passes again.", plan.turn),
                calls: Vec::new(),
            };
        }
        plan.calls_left -= 1;
        plan.call += 1;
        let (turn, call) = (plan.turn, plan.call);
        Scripted {
            text: String::new(),
            calls: vec![(
                format!("call_{turn}_{call}"),
                "read".to_owned(),
                json!({"path": format!("src/m{turn}/f{call}.rs")}),
            )],
        }
    }
}

/// Whether a request is the agent's (its system prompt), not a compaction's.
fn is_agent(body: &Value) -> bool {
    let system = match &body["system"] {
        Value::String(s) => s.as_str(),
        Value::Array(blocks) => blocks
            .first()
            .and_then(|b| b["text"].as_str())
            .unwrap_or(""),
        _ => body["instructions"]
            .as_str()
            .or_else(|| body["messages"][0]["content"].as_str())
            .unwrap_or(""),
    };
    system.starts_with("You are a careful coding agent")
}

/// A summary naming the turns a compaction request's transcript covers.
fn summary_of(body: &Value) -> String {
    let text = body.to_string();
    let turns: Vec<usize> = text
        .split("Turn ")
        .skip(1)
        .filter_map(|rest| rest.split(':').next()?.parse().ok())
        .collect();
    let (first, last) = (
        turns.iter().min().copied().unwrap_or(0),
        turns.iter().max().copied().unwrap_or(0),
    );
    format!(
        "The user asked, turn by turn from turn {first} to turn {last}, to fix the failing test of each module after a refactor. The agent read the modules' test files ({} turns covered) and each test passes again; nothing is left open.",
        turns.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_tells_its_own_requests_from_compactions() {
        let anthropic = json!({"system": agent_prompt(), "messages": []});
        let marked = json!({"system": [{"type": "text", "text": agent_prompt(), "cache_control": {"type": "ephemeral"}}]});
        let chat = json!({"messages": [{"role": "system", "content": agent_prompt()}]});
        let responses = json!({"instructions": agent_prompt(), "input": []});
        for body in [anthropic, marked, chat, responses] {
            assert!(is_agent(&body), "{body}");
        }
        assert!(!is_agent(&json!({"system": "Summarize the transcript."})));
        let summary = summary_of(&json!({"messages": ["Turn 4: a", "Turn 9: b"]}));
        assert!(summary.contains("turn 4 to turn 9"), "{summary}");
    }

    #[test]
    fn files_have_the_sizes_the_session_promises() {
        for (turn, j) in [(1, 0), (7, 2), (300, 1)] {
            let n = file_text(turn, j).len() / 4;
            assert!((300..=2_100).contains(&n), "{n}");
        }
    }
}

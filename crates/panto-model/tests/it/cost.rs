//! What replies cost (`usage_cost`): each provider's documented multipliers, prices, and the
//! sums that reports add up.

use panto_model::arbitrary::usage;
use panto_model::{CacheRates, Cost, CostReport, CostRowKind, Price, Prices, Usage, usage_cost};
use proptest::prelude::*;
use serde_json::json;

/// Anthropic's reads are a tenth of the input price, 5-minute writes 1.25×, 1-hour writes 2×
/// (<https://platform.claude.com/docs/en/build-with-claude/prompt-caching>, "Pricing"); the
/// 1-hour share is `usage.cache_creation.ephemeral_1h_input_tokens`, kept as the API sent it.
#[test]
fn anthropic_usage_is_weighted_by_its_documented_multipliers() {
    let mut usage = Usage::new(1_000, 200)
        .with_cache_read(50_000)
        .with_cache_creation(3_000);
    usage.extra.insert(
        "cache_creation".into(),
        json!({"ephemeral_5m_input_tokens": 2_000, "ephemeral_1h_input_tokens": 1_000}),
    );
    let cost = usage_cost(&usage, Some("claude-sonnet-4-5"), &Prices::new());
    // 1,000 + 50,000 × 0.1 + 2,000 × 1.25 + 1,000 × 2
    assert_eq!(cost.billed_input_tokens, 1_000 + 5_000 + 2_500 + 2_000);
    assert_eq!(cost.cache_write_long_tokens, 1_000);
    assert_eq!(cost.input_total(), 54_000);
    assert!((cost.cache_hit_share() - 50_000.0 / 54_000.0).abs() < 1e-12);
    // No price: tokens only.
    assert_eq!(cost.money(), None);
    assert_eq!(cost.unpriced, 1);
}

#[test]
fn money_comes_from_the_users_prices_and_the_missing_cache_prices_from_the_rates() {
    let usage = Usage::new(1_000_000, 100_000)
        .with_cache_read(2_000_000)
        .with_cache_creation(400_000);
    let prices = Prices::new().with("claude-sonnet-4-5", Price::new(3.0, 15.0));
    // A dated release takes the price of its family's name.
    let cost = usage_cost(&usage, Some("claude-sonnet-4-5-20250929"), &prices);
    // 3 + 2 × 0.3 + 0.4 × 3.75 + 0.1 × 15
    let expected = 3.0 + 0.6 + 1.5 + 1.5;
    assert!((cost.money().unwrap() - expected).abs() < 1e-9, "{cost:?}");
    // A cache price of the user's own wins over the rate.
    let prices = Prices::new().with(
        "claude-sonnet-4-5",
        Price::new(3.0, 15.0).with_cache(Some(0.0), None, None),
    );
    let cost = usage_cost(&usage, Some("claude-sonnet-4-5"), &prices);
    assert!((cost.money().unwrap() - (expected - 0.6)).abs() < 1e-9);
    // Another model has no price.
    assert_eq!(usage_cost(&usage, Some("gpt-5"), &prices).money(), None);
}

/// `OpenAI`'s rates by family (<https://developers.openai.com/api/docs/guides/prompt-caching>:
/// cache writes cost 1.25× from GPT-5.6 on, nothing extra before).
#[test]
fn each_family_has_its_documented_rates() {
    let cases = [
        ("claude-opus-4-6", (0.1, 1.25, 2.0)),
        ("anthropic/claude-haiku-4-5", (0.1, 1.25, 2.0)),
        ("gpt-5.6-mini", (0.1, 1.25, 1.25)),
        ("gpt-6", (0.1, 1.25, 1.25)),
        ("gpt-5.1-codex", (0.1, 1.0, 1.0)),
        ("gpt-5-mini", (0.1, 1.0, 1.0)),
        ("gpt-4.1-nano", (0.25, 1.0, 1.0)),
        ("gpt-4o", (0.5, 1.0, 1.0)),
        ("o3-mini", (0.5, 1.0, 1.0)),
        ("gemini-2.5-flash", (0.25, 1.0, 1.0)),
        ("qwen3-coder", (1.0, 1.0, 1.0)),
    ];
    for (model, (read, write, long)) in cases {
        assert_eq!(
            CacheRates::for_model(model),
            CacheRates::new(read, write, long),
            "{model}"
        );
    }
}

proptest! {
    /// Rows add up to their totals exactly, in every field: a report's sum is the sum of its
    /// rows' costs, whatever order they come in.
    #[test]
    fn costs_add_up(usages in prop::collection::vec(usage(), 0..20), priced in any::<bool>()) {
        let prices = if priced {
            Prices::new().with("claude-x", Price::new(3.0, 15.0))
        } else {
            Prices::new()
        };
        let rows: Vec<Cost> = usages.iter().map(|u| usage_cost(u, Some("claude-x"), &prices)).collect();
        let total: Cost = rows.iter().copied().sum();
        let reversed: Cost = rows.iter().rev().copied().sum();
        prop_assert_eq!(total, reversed);
        prop_assert_eq!(total.replies, rows.len() as u64);
        prop_assert_eq!(total.billed_input_tokens, rows.iter().map(|r| r.billed_input_tokens).sum::<u64>());
        prop_assert_eq!(total.input_total(), usages.iter().map(Usage::input_total).sum::<u64>());
        prop_assert_eq!(total.money().is_some(), priced && !rows.is_empty());
    }

    /// A read never bills more than the same tokens uncached, and on Anthropic a write bills
    /// more: weighing stays between the two bounds its rates give.
    #[test]
    fn weighing_stays_within_its_rates(u in usage()) {
        let cost = usage_cost(&u, Some("claude-x"), &Prices::new());
        let read = u.cache_read_input_tokens.unwrap_or(0);
        let written = u.cache_creation_input_tokens.unwrap_or(0);
        let low = u.input_tokens as f64 + read as f64 * 0.1 + written as f64 * 1.25;
        prop_assert!((cost.billed_input_tokens as f64 - low).abs() <= 0.5 + 1e-6);
        prop_assert!(cost.billed_input_tokens <= u.input_total() + written / 4 + 1);
        let plain = usage_cost(&u, None, &Prices::new());
        prop_assert_eq!(plain.billed_input_tokens, u.input_total());
    }
}

/// A session's report: a row per prompt with its tool loop, a row per compaction with the
/// writes of the first reply after it, kept copies not counted twice, and rows that add up.
#[test]
fn a_session_report_counts_each_reply_once() {
    let text = r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"fix it"}]}
{"type":"message","id":"m2","role":"assistant","model":"claude-x","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":2000},"content":[{"type":"tool_use","id":"t1","name":"read","input":{}}]}
{"type":"message","id":"m3","role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}
{"type":"message","id":"m4","role":"assistant","model":"claude-x","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2000,"cache_creation_input_tokens":100},"content":[{"type":"text","text":"done"}]}
{"type":"compaction","id":"c1","summary":"fixed","model":"claude-x","kept_messages":1,"copies_marked":true,"usage":{"input_tokens":3000,"output_tokens":200}}
{"type":"message","id":"m5","role":"assistant","kept_by":"c1","model":"claude-x","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2000},"content":[{"type":"text","text":"done"}]}
{"type":"message","id":"m6","role":"user","content":[{"type":"text","text":"next"}]}
{"type":"message","id":"m7","role":"assistant","model":"claude-x","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":800,"cache_creation_input_tokens":1500},"content":[{"type":"text","text":"ok"}]}
"#;
    let entries = panto_model::read_entries(text.as_bytes()).unwrap();
    let report = CostReport::from_entries(&entries, None, &Prices::new());
    let kinds: Vec<(CostRowKind, usize, u64)> = report
        .rows
        .iter()
        .map(|r| (r.kind, r.turn, r.cost.replies))
        .collect();
    assert_eq!(
        kinds,
        [
            (CostRowKind::Turn, 1, 2),
            (CostRowKind::Compaction, 1, 1),
            (CostRowKind::Turn, 2, 1)
        ]
    );
    assert_eq!(report.rows[1].written_after, Some(1500));
    assert_eq!(report.rows[1].cost.input_tokens, 3000);
    let sum: Cost = report.rows.iter().map(|r| r.cost).sum();
    assert_eq!(sum, report.totals);
    assert_eq!(report.totals.cache_read_tokens, 2800);
}

/// A real Claude Code session (`../shared/data/sessions/cc-tool_heavy.jsonl`, or in
/// `PANTO_CALIBRATE_SESSIONS`): its rows add up, and most of its input was read from the cache,
/// as the agent's caching made it.
#[test]
fn a_real_sessions_report_adds_up() {
    let dir = std::env::var_os("PANTO_CALIBRATE_SESSIONS").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/sessions"),
        std::path::PathBuf::from,
    );
    let path = dir.join("cc-tool_heavy.jsonl");
    let Ok(text) = std::fs::read(&path) else {
        eprintln!("skipped: {} is absent", path.display());
        return;
    };
    let entries = panto_model::read_entries(&text).unwrap();
    let prices = Prices::new().with("claude-opus-4-6", Price::new(5.0, 25.0));
    let report = CostReport::from_entries(&entries, None, &prices);
    let sum: Cost = report.rows.iter().map(|r| r.cost).sum();
    assert_eq!(sum, report.totals);
    let replies = entries
        .iter()
        .filter(|e| matches!(e, panto_model::Entry::Message(m) if m.usage.is_some()))
        .count() as u64;
    assert_eq!(report.totals.replies, replies);
    assert!(report.totals.cache_hit_share() > 0.5, "{:?}", report.totals);
    assert!(report.totals.billed_input_tokens < report.totals.input_total());
    assert!(report.totals.money().is_some());
}

proptest! {
    /// Over generated sessions, with and without compactions, the rows add up to the totals
    /// and every reply with usage is counted once.
    #[test]
    fn a_report_adds_up(session in panto_model::arbitrary::session(6)) {
        let entries: Vec<panto_model::Entry> =
            session.messages.into_iter().map(panto_model::Entry::Message).collect();
        let report = CostReport::from_entries(&entries, Some("claude-x"), &Prices::new());
        let sum: Cost = report.rows.iter().map(|r| r.cost).sum();
        prop_assert_eq!(sum, report.totals);
        let replies = entries
            .iter()
            .filter(|e| matches!(e, panto_model::Entry::Message(m) if m.usage.is_some()))
            .count() as u64;
        prop_assert_eq!(report.totals.replies, replies);
    }
}

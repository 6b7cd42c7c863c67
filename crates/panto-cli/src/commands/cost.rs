//! `panto cost SESSION [--json]`: what a session cost, turn by turn and compaction by
//! compaction, read from its whole history page by page and weighed by
//! `panto_model::usage_cost` (`CostCounter`): the input as billed (cache reads and writes at
//! their providers' multipliers), money with the user's `[prices]`, and the share of the input
//! read from the cache. The rows add up to the totals, in every field.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use panto_compact::{Head, Store};
use panto_model::{Cost, CostCounter, CostReport, CostRow, CostRowKind};
use serde_json::{Value, json};

use crate::bad_input;
use crate::config::Config;
use crate::ui::{for_stdout, short_count};

use super::{open_store, print_json, session_name, store_error};

/// How many records are read at a time.
const PAGE: usize = 1000;

pub(crate) async fn cost(config: &Config, session: &Path, json: bool) -> Result<()> {
    let name = session_name(session);
    let Some(report) = session_cost(config, &name).await? else {
        return Err(bad_input(format!(
            "{name}: the session is empty: no entries yet"
        )));
    };
    if json {
        return print_json(&report_json(&report, config));
    }
    print!("{}", for_stdout(&report_text(&report)));
    Ok(())
}

/// What session `name` of the configured store cost, from its whole history read page by page;
/// nothing when the session holds no entry. `panto cost` prints it; the meter of a chat or a
/// send starts from its totals (`commands::meter`).
///
/// # Errors
/// A store that cannot be read, or an entry that does not decode (named with its line).
pub(crate) async fn session_cost(config: &Config, name: &str) -> Result<Option<CostReport>> {
    let store = open_store(config).await?;
    let mut counter = CostCounter::new(config.model.value.as_deref(), config.prices());
    let (mut from, mut line, mut any) = (Head::EMPTY, 0, false);
    loop {
        let page = store.read(name, from, PAGE).await.map_err(store_error)?;
        if page.records.is_empty() {
            break;
        }
        for record in &page.records {
            line += 1;
            let entry = record
                .decode(line)
                .map_err(|e| bad_input(format!("{name}: {e}")))?;
            counter.push(&entry);
            any = true;
        }
        from = page.next;
    }
    Ok(any.then(|| counter.finish()))
}

/// The `--json` document: `turns` (a row per user turn and per compaction, in session order)
/// and `totals`, whose numbers are the rows' sums (the share read from the cache aside).
fn report_json(report: &CostReport, config: &Config) -> Value {
    let rows: Vec<Value> = report.rows.iter().map(row_json).collect();
    let mut totals = cost_json(&report.totals);
    totals["cache_hit_share"] = json!(report.totals.cache_hit_share());
    totals["turns"] = json!(count(report, CostRowKind::Turn));
    totals["compactions"] = json!(count(report, CostRowKind::Compaction));
    json!({
        "turns": rows,
        "totals": totals,
        "priced_models": config.prices.value.keys().collect::<Vec<_>>(),
    })
}

fn count(report: &CostReport, kind: CostRowKind) -> usize {
    report.rows.iter().filter(|r| r.kind == kind).count()
}

fn row_json(row: &CostRow) -> Value {
    let mut value = cost_json(&row.cost);
    value["kind"] = json!(match row.kind {
        CostRowKind::Compaction => "compaction",
        _ => "turn",
    });
    value["turn"] = json!(row.turn);
    value["id"] = json!(row.id);
    value["model"] = json!(row.model);
    if row.kind == CostRowKind::Compaction {
        value["written_after"] = json!(row.written_after);
    }
    value
}

/// A cost's figures: counts in tokens, money in millionths of the prices' currency (exact, so
/// rows add up) and as a number for people (`null` when some reply had no price).
pub(super) fn cost_json(cost: &Cost) -> Value {
    json!({
        "replies": cost.replies,
        "input_tokens": cost.input_tokens,
        "cache_read_tokens": cost.cache_read_tokens,
        "cache_write_tokens": cost.cache_write_tokens,
        "cache_write_long_tokens": cost.cache_write_long_tokens,
        "output_tokens": cost.output_tokens,
        "billed_input_tokens": cost.billed_input_tokens,
        "money_micros": cost.money_micros,
        "money": cost.money(),
        "unpriced": cost.unpriced,
    })
}

/// The report for people: a line per turn and per compaction, then the totals.
fn report_text(report: &CostReport) -> String {
    let priced = report.totals.money().is_some();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}{}",
        "turn",
        "replies",
        "input",
        "read",
        "written",
        "output",
        "billed",
        if priced { "     money" } else { "" }
    );
    for row in &report.rows {
        match row.kind {
            CostRowKind::Compaction => {
                let _ = writeln!(
                    out,
                    "{:>6} compaction {}: {}{}",
                    "",
                    row.id.as_deref().unwrap_or("?"),
                    figures(&row.cost, priced),
                    row.written_after.map_or(String::new(), |w| format!(
                        "; the next reply wrote {}",
                        short_count(w)
                    ))
                );
            }
            _ => {
                let _ = writeln!(out, "{:>6} {}", row.turn, columns(&row.cost, priced));
            }
        }
    }
    let _ = writeln!(out, "{:>6} {}", "total", columns(&report.totals, priced));
    let _ = writeln!(
        out,
        "{}% of the input read from the cache; billed input {} of {} tokens{}",
        (report.totals.cache_hit_share() * 100.0).round(),
        short_count(report.totals.billed_input_tokens),
        short_count(report.totals.input_total()),
        if priced || report.totals.replies == 0 {
            String::new()
        } else {
            " (set [prices] in config.toml for money)".to_owned()
        }
    );
    out
}

fn columns(cost: &Cost, priced: bool) -> String {
    format!(
        "{:>7} {:>8} {:>8} {:>8} {:>8} {:>8}{}",
        cost.replies,
        short_count(cost.input_tokens),
        short_count(cost.cache_read_tokens),
        short_count(cost.cache_write_tokens),
        short_count(cost.output_tokens),
        short_count(cost.billed_input_tokens),
        if priced {
            format!(" {:>9.4}", cost.money().unwrap_or(0.0))
        } else {
            String::new()
        }
    )
}

fn figures(cost: &Cost, priced: bool) -> String {
    let mut text = format!(
        "{} in, {} out, billed {}",
        short_count(cost.input_total()),
        short_count(cost.output_tokens),
        short_count(cost.billed_input_tokens)
    );
    if priced && let Some(money) = cost.money() {
        let _ = write!(text, ", {money:.4}");
    }
    if cost.replies == 0 {
        text = "no usage recorded".to_owned();
    }
    text
}

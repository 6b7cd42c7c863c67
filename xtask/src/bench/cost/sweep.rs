//! `cargo xtask bench cost --sweep`: the section's session with each part of the cache-aware
//! rule (`CacheAware`) on and off, over emulator windows of 24,000 to 64,000 (panto configured
//! with the same) and three patterns of pauses, per protocol, one thread each: the
//! measurements the rule was chosen from (docs/compaction.md, "Compaction that respects the
//! cache").

use anyhow::Result;
use panto_compact::CacheAware;
use panto_providers::Protocol;

use super::{Outcome, Pauses, SWEEP_WINDOWS, Variant, ratio, session};
use crate::table::Table;

/// The parts of the rule the sweep compares: none (the plain share), each alone, both.
const RULES: [CacheAware; 4] = [
    CacheAware::OFF,
    CacheAware::OFF.with_cold(true),
    CacheAware::OFF.with_warm(true),
    CacheAware::ON,
];

/// A window, a pattern of pauses, and the sessions of each rule of [`RULES`] under them.
type SweepRow = (u64, Pauses, Vec<Outcome>);

/// The sweep (`--sweep`): each part of the cache-aware rule on and off, over windows and
/// pauses, per protocol (one thread each); what each session was billed against the plain
/// share's.
pub(super) fn sweep(turns: usize) -> Result<()> {
    let protocols = [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
    ];
    let runs = on_threads(&protocols, |&protocol| sweep_protocol(protocol, turns));
    let mut table = Table::new([
        "protocol",
        "window",
        "pauses",
        "billed, plain",
        "cold only",
        "warm only",
        "both",
        "compactions (overflows) plain / cold / warm / both",
        "compaction requests' share, plain / both",
        "mean request, plain / cold / warm / both",
    ])
    .right([1, 3, 4, 5, 6]);
    let mut worst = [
        (0.0_f64, String::new()),
        (0.0, String::new()),
        (0.0, String::new()),
    ];
    for (protocol, rows) in protocols.iter().zip(runs) {
        for (window, pauses, outcomes) in rows? {
            let plain = outcomes[0].billed.billed_input_tokens;
            let mut cells = vec![
                protocol.name().to_owned(),
                window.to_string(),
                pauses.name.to_owned(),
                plain.to_string(),
            ];
            let at = format!("{} {window} {}", protocol.name(), pauses.name);
            rule_cells(&outcomes, &mut worst, &at, &mut cells);
            let share =
                |o: &Outcome| 100.0 * ratio(o.compaction_billed, o.billed.billed_input_tokens);
            cells.push(format!(
                "{:.0}% / {:.0}%",
                share(&outcomes[0]),
                share(&outcomes[3])
            ));
            cells.push(mean_requests(&outcomes));
            table.row(cells);
        }
    }
    println!(
        "{turns} turns per session; panto configured with the emulator's window; `auto_compact = 0.8`; a request every 20 s of a virtual clock. Billed input (cache-weighted tokens) with the plain share, and each rule's difference from it (negative: cheaper).\n"
    );
    print!("{table}");
    let named = |(more, at): &(f64, String)| {
        if at.is_empty() {
            "never".to_owned()
        } else {
            format!("{:+.1}% ({at})", 100.0 * more)
        }
    };
    println!(
        "\nThe most each rule cost more than the plain share over the sweep: cold only {}, warm only {}, both {}.",
        named(&worst[0]),
        named(&worst[1]),
        named(&worst[2])
    );
    Ok(())
}

/// The cells every sweep's row shares, after its plain share: each rule's billed input against
/// the plain share's (the first outcome), noting in `worst` the most each cost more and `at`
/// which cell, then the compactions (and overflows) of every rule.
fn rule_cells(
    outcomes: &[Outcome],
    worst: &mut [(f64, String)],
    at: &str,
    cells: &mut Vec<String>,
) {
    let plain = outcomes[0].billed.billed_input_tokens;
    for (k, o) in outcomes.iter().enumerate().skip(1) {
        let more = ratio(o.billed.billed_input_tokens, plain) - 1.0;
        if more > worst[k - 1].0 {
            worst[k - 1] = (more, at.to_owned());
        }
        cells.push(format!("{:+.1}%", 100.0 * more));
    }
    cells.push(joined(outcomes, |o| {
        format!("{} ({})", o.compactions, o.overflows)
    }));
}

/// Every rule's mean conversation request, joined.
fn mean_requests(outcomes: &[Outcome]) -> String {
    joined(outcomes, |o| {
        (o.conversation_input / o.conversation_requests.max(1)).to_string()
    })
}

/// `cell` of every outcome, joined by ` / `.
fn joined(outcomes: &[Outcome], cell: impl Fn(&Outcome) -> String) -> String {
    outcomes.iter().map(cell).collect::<Vec<_>>().join(" / ")
}

/// The sweep's sessions of one protocol: per window and pauses, one per rule of [`RULES`].
/// `run` on each of `parts`, each on a thread of its own, the answers in `parts`' order; a
/// thread that panicked answers an error.
fn on_threads<P: Sync, F>(parts: &[P], run: F) -> Vec<Result<Vec<SweepRow>>>
where
    F: Fn(&P) -> Result<Vec<SweepRow>> + Sync,
{
    let run = &run;
    std::thread::scope(|scope| {
        let threads: Vec<_> = parts
            .iter()
            .map(|part| scope.spawn(move || run(part)))
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a sweep thread panicked")))
            })
            .collect()
    })
}

fn sweep_protocol(protocol: Protocol, turns: usize) -> Result<Vec<SweepRow>> {
    sweep_rules(protocol, turns, &SWEEP_WINDOWS, &RULES)
}

/// The sessions of `protocol` over `windows` and the three patterns of pauses, one per rule of
/// `rules`.
fn sweep_rules(
    protocol: Protocol,
    turns: usize,
    windows: &[u64],
    rules: &[CacheAware],
) -> Result<Vec<SweepRow>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for &window in windows {
        for pauses in [Pauses::NONE, Pauses::OCCASIONAL, Pauses::FREQUENT] {
            let mut outcomes = Vec::new();
            for &parts in rules {
                let v = Variant {
                    protocol,
                    caching: true,
                    parts,
                    window,
                    configured: window,
                    pauses,
                };
                let o = runtime.block_on(session(v, turns))?;
                if !o.refused.is_empty() || !o.errors.is_empty() {
                    eprintln!(
                        "cost: {} {window} {}: refused {:?}, failed {:?}",
                        protocol.name(),
                        pauses.name,
                        o.refused.first(),
                        o.errors.first()
                    );
                }
                outcomes.push(o);
            }
            rows.push((window, pauses, outcomes));
        }
    }
    Ok(rows)
}

/// The rules of the warm sweep (`--sweep-warm`): the plain share, the warm wait compacting to
/// the waited share's headroom (as `--sweep` measured it) and to the configured share's, and
/// both parts with each.
const WARM_RULES: [CacheAware; 5] = [
    CacheAware::OFF,
    CacheAware::OFF.with_warm(true),
    CacheAware::OFF.with_warm(true).with_warm_keeps_share(true),
    CacheAware::ON,
    CacheAware::ON.with_warm_keeps_share(true),
];

/// The warm sweep (`--sweep-warm`): whether the warm wait pays when its compaction keeps the
/// configured share's amount (`CacheAware::warm_keeps_share`) rather than the waited share's,
/// on Anthropic (the one protocol of the section whose model writes its cache at a premium, so
/// the only one where the warm part applies), over the windows of [`SWEEP_WINDOWS`], one thread
/// per two windows.
pub(super) fn sweep_warm(turns: usize) -> Result<()> {
    let chunks: Vec<&[u64]> = SWEEP_WINDOWS.chunks(2).collect();
    let runs = on_threads(&chunks, |windows| {
        sweep_rules(Protocol::Anthropic, turns, windows, &WARM_RULES)
    });
    let mut table = Table::new([
        "window",
        "pauses",
        "billed, plain",
        "warm, waited headroom",
        "warm, configured headroom",
        "both, waited headroom",
        "both, configured headroom",
        "compactions (overflows) plain / warm / warm kept / both / both kept",
        "mean request, plain / warm / warm kept / both / both kept",
    ])
    .right([0, 2, 3, 4, 5, 6]);
    let mut worst = vec![(f64::MIN, String::new()); WARM_RULES.len() - 1];
    for rows in runs {
        for (window, pauses, outcomes) in rows? {
            let plain = outcomes[0].billed.billed_input_tokens;
            let mut cells = vec![
                window.to_string(),
                pauses.name.to_owned(),
                plain.to_string(),
            ];
            let at = format!("{window} {}", pauses.name);
            rule_cells(&outcomes, &mut worst, &at, &mut cells);
            cells.push(mean_requests(&outcomes));
            table.row(cells);
        }
    }
    println!(
        "Anthropic, {turns} turns per session; panto configured with the emulator's window; `auto_compact = 0.8`; a request every 20 s of a virtual clock. Billed input (cache-weighted tokens) with the plain share, and each rule's difference from it (negative: cheaper). \"Waited headroom\": a warm wait's compaction keeps half the waited share (as `--sweep`); \"configured headroom\": half the configured share (`CacheAware::warm_keeps_share`).\n"
    );
    print!("{table}");
    let named = |(more, at): &(f64, String)| format!("{:+.1}% ({at})", 100.0 * more);
    println!(
        "\nThe most each rule cost more than the plain share: warm, waited headroom {}; warm, configured headroom {}; both, waited {}; both, configured {}.",
        named(&worst[0]),
        named(&worst[1]),
        named(&worst[2]),
        named(&worst[3])
    );
    Ok(())
}

//! `cargo xtask quality --strategies`: summary, clearing and tiered compared (issue 37, point 8)
//! on the shared real sessions, each written in five parts with a compaction after each part
//! (five chained cycles).
//!
//! - **At equal retained tokens** (`chain.rs`): after each part, `panto compact` with the
//!   offline summarizer. The clearing sets the budget: its chain, with a keep budget of an eighth
//!   of the session, retains R tokens (the effective context's estimate after the fifth cycle;
//!   a clearing keeps all the text and only drops old tool output, so R is the most it can be
//!   brought to). The summary's and the tiered chains are then run again with keep budgets found
//!   by the secant until they retain R within 5%, every chain in a session configured with a
//!   window of 2R (`context_window`), so that the tiered rule's target (half the window) is R.
//!   The same questions are asked of every strategy: the recall exam's needles
//!   (`recall/questions.rs`) of the first four parts whose answers the fifth part does not
//!   hold, scored closed-book on the final effective context. Model requests and tokens (each
//!   request's input and summary, as `panto compact --json` reports them) and the process's
//!   wall time are per compaction written.
//! - **Under pressure** (`load.rs`): the same parts sent with `panto send` against the loopback
//!   model of `quality --pressure` at windows of 4,096, 8,192 and 16,384 tokens, so every
//!   compaction is an overflow's; requests and tokens as the server counted them.
//! - **A 5 MB tool result at a 4,096 window** (`load.rs`, `huge`): one send, with the release
//!   build of `panto`, for tiered and summary.
//!
//! The goals of issue 37 are checked and printed; those in [`GATED`] fail the command when
//! missed. `--no-huge` leaves out the release build and the 5 MB row.

mod chain;
mod load;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use self::chain::{CHAIN, Chain, Runner, Session, TIERED_ORIGINALS, TOLERANCE, work_dir};
use self::load::{HUGE_BYTES, HUGE_WINDOW, Huge, Load, huge, load};
use super::loopback::Loopback;
use super::pressure::WINDOWS;
use crate::table::Table;

/// The strategies compared, in the order of the tables.
const STRATEGIES: [&str; 3] = ["summary", "clear", "tiered"];

/// The strategies compared at equal retained tokens: the three, and tiered as it would be if
/// its summary saw the originals of what it cleared ([`TIERED_ORIGINALS`]).
const EQUAL_STRATEGIES: [&str; 4] = ["summary", "clear", "tiered", TIERED_ORIGINALS];

/// The window of the loopback model that summarizes at equal retained tokens: larger than any
/// request, so that it only counts.
const UNBOUNDED: u64 = 100_000_000;

/// A session whose tool results hold at least this share of its bytes is tool-heavy.
const TOOL_HEAVY: f64 = 0.5;

/// How many times fewer model tokens per compaction tiered must spend on tool-heavy sessions.
const TOKEN_FACTOR: f64 = 5.0;

/// The goals that fail the command when missed (the others are reported). `KeepsMore` holds
/// since a clearing carries the ledger of what it cleared (issue 37, point 8), narrowly
/// (docs/compaction.md, "The six open questions").
const GATED: &[Goal] = &[Goal::KeepsMore, Goal::FewerTokens, Goal::Huge];

/// The goals of issue 37, point 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Goal {
    /// Tiered answers more questions than summary at equal retained tokens.
    KeepsMore,
    /// Tiered spends at least [`TOKEN_FACTOR`] times fewer model tokens per compaction on
    /// tool-heavy sessions, at equal retained tokens.
    FewerTokens,
    /// The same under pressure (every compaction an overflow's, at small windows).
    FewerTokensUnderPressure,
    /// A 5 MB tool result at 4,096 tokens: under 10 requests and under 2 s, tiered.
    Huge,
}

impl Goal {
    fn name(self) -> &'static str {
        match self {
            Goal::KeepsMore => "tiered keeps more than summary at equal retained tokens",
            Goal::FewerTokens => {
                "tiered spends at least 5x fewer model tokens per compaction on tool-heavy sessions, at equal retained tokens"
            }
            Goal::FewerTokensUnderPressure => {
                "the same under pressure (overflow compactions at 4k, 8k and 16k)"
            }
            Goal::Huge => "a 5 MB tool result at a 4k window: under 10 requests and under 2 s",
        }
    }
}

/// One session's chains at equal retained tokens, in the order of [`EQUAL_STRATEGIES`].
struct Equal<'a> {
    summarizer: &'static str,
    session: &'a Session,
    target: u64,
    chains: Vec<Chain>,
}

pub(super) fn run(root: &Path, panto: &Path, sessions: &[PathBuf], args: &[String]) -> Result<()> {
    let mut with_huge = true;
    for arg in args {
        match arg.as_str() {
            "--no-huge" => with_huge = false,
            _ => bail!("quality --strategies takes no argument but --no-huge"),
        }
    }
    let started = Instant::now();
    let work = work_dir(root);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("user-config"))?;
    let mut read = Vec::new();
    for path in sessions {
        read.push(Session::read(path)?);
    }
    let server = Loopback::start(UNBOUNDED)?;
    let runners = runners(panto, &work, &server);
    let mut equal = Vec::new();
    for runner in &runners {
        for session in &read {
            if let Some(e) = equal_retained(runner, session)? {
                equal.push(e);
            } else {
                eprintln!("quality --strategies: {}: nothing to clear", session.name);
            }
        }
    }
    drop(server);
    let equal_time = started.elapsed();
    let mut loads: Vec<(u64, &Session, Vec<Load>)> = Vec::new();
    for &window in WINDOWS {
        let server = Loopback::start(window)?;
        for session in &read {
            let mut by = Vec::new();
            for strategy in STRATEGIES {
                by.push(load(panto, &work, &server, session, strategy)?);
            }
            loads.push((window, session, by));
        }
    }
    let load_time = started.elapsed() - equal_time;
    let huge_rows = if with_huge {
        let release = crate::e2e::build_panto_in(root, true)?;
        let mut rows = Vec::new();
        for strategy in ["tiered", "summary"] {
            rows.push((strategy, huge(&release, &work, strategy)?));
        }
        Some(rows)
    } else {
        None
    };
    print_equal(&equal);
    print_loads(&loads);
    if let Some(rows) = &huge_rows {
        print_huge(rows);
    }
    println!(
        "\nstrategies: equal retained tokens {:.1} s, under pressure {:.1} s, in all {:.1} s",
        equal_time.as_secs_f64(),
        load_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let goals = goals(&equal, &loads, huge_rows.as_deref());
    let mut misses = Vec::new();
    for (goal, holds, detail) in &goals {
        let state = if *holds { "holds" } else { "MISSED" };
        let gated = if GATED.contains(goal) {
            "checked"
        } else {
            "reported"
        };
        println!("- {} ({gated}): {state}; {detail}", goal.name());
        if !holds && GATED.contains(goal) {
            misses.push(goal.name());
        }
    }
    // A send that fails is the strategy's outcome, reported, not the exam's failure: a
    // clearing alone cannot hold a small window by design (docs/compaction.md).
    println!("\nsends that failed:\n");
    for (_, _, by) in &loads {
        for (strategy, l) in STRATEGIES.iter().zip(by) {
            for f in &l.failures {
                println!("- {strategy}: {}", f.replace('\n', " / "));
            }
        }
    }
    if misses.is_empty() {
        eprintln!("quality --strategies: every checked goal holds");
        Ok(())
    } else {
        bail!("quality --strategies: {}", misses.join("; "))
    }
}

/// The runners of the chains: with the offline summarizer, and with the loopback model
/// `server`.
fn runners<'a>(panto: &'a Path, work: &'a Path, server: &Loopback) -> [Runner<'a>; 2] {
    let loopback = [
        "--provider",
        "openai",
        "--model",
        "pressure-model",
        "--base-url",
        &server.base_url(),
    ];
    [
        Runner {
            panto,
            work,
            summarizer: "offline",
            provider: ["--provider", "offline"].map(str::to_owned).to_vec(),
        },
        Runner {
            panto,
            work,
            summarizer: "loopback",
            provider: loopback.map(str::to_owned).to_vec(),
        },
    ]
}

/// The chains of `session` at equal retained tokens ([`EQUAL_STRATEGIES`]), or `None` when the
/// clearing clears nothing (then every strategy but the summary has nothing to do).
fn equal_retained<'a>(runner: &Runner<'_>, session: &'a Session) -> Result<Option<Equal<'a>>> {
    let start = (session.tokens / 8).max(1);
    let clear = runner.chain(session, "clear", start, None)?;
    if clear.written() == 0 {
        return Ok(None);
    }
    // No window is configured: a manual compaction caps its keep budget at a quarter of a
    // known window, which would keep a summary from reaching R.
    let target = clear.retained;
    let window = None;
    let mut chains = vec![
        runner.tuned(session, "summary", target, start, window)?,
        clear,
    ];
    for strategy in &EQUAL_STRATEGIES[2..] {
        chains.push(runner.tuned(session, strategy, target, start, window)?);
    }
    Ok(Some(Equal {
        summarizer: runner.summarizer,
        session,
        target,
        chains,
    }))
}

/// Per compaction written: requests, tokens and wall time of a chain's cycles.
fn per_compaction(chain: &Chain) -> (f64, f64, Duration) {
    let n = chain.written().max(1);
    let requests: u64 = chain.cycles.iter().map(|c| c.requests).sum();
    let tokens: u64 = chain.cycles.iter().map(|c| c.tokens).sum();
    let wall: Duration = chain
        .cycles
        .iter()
        .filter(|c| c.written.is_some())
        .map(|c| c.wall)
        .sum();
    (
        requests as f64 / n as f64,
        tokens as f64 / n as f64,
        wall / u32::try_from(n).unwrap_or(u32::MAX),
    )
}

fn percent(part: usize, all: usize) -> String {
    if all == 0 {
        return "-".to_owned();
    }
    format!("{:.0}% ({part} of {all})", 100.0 * part as f64 / all as f64)
}

/// A summarizer and a strategy.
type Key = (&'static str, &'static str);

fn print_equal(equal: &[Equal<'_>]) {
    println!(
        "\nat equal retained tokens: {CHAIN} chained `panto compact`, the budget R set by the clearing, within {:.0}%; the offline summarizer (extractive) and the loopback model (its summary names no fact)\n",
        100.0 * TOLERANCE
    );
    let mut table = Table::new([
        "summarizer",
        "session",
        "tool output",
        "strategy",
        "keep_tokens (chains run)",
        "retained tokens (R)",
        "compactions written",
        "closed-book",
        "model requests / compaction",
        "model tokens / compaction",
        "wall / compaction",
    ]);
    // (summarizer, strategy) -> (questions answered, questions asked)
    let mut totals: Vec<(Key, (usize, usize))> = Vec::new();
    for e in equal {
        for (strategy, chain) in EQUAL_STRATEGIES.iter().zip(&e.chains) {
            let kinds: Vec<&str> = chain
                .cycles
                .iter()
                .filter_map(|c| c.written.as_deref())
                .collect();
            let answered = chain.answered(e.session);
            let key = (e.summarizer, *strategy);
            match totals.iter_mut().find(|(k, _)| *k == key) {
                Some((_, t)) => {
                    t.0 += answered;
                    t.1 += e.session.asked.len();
                }
                None => totals.push((key, (answered, e.session.asked.len()))),
            }
            let (requests, tokens, wall) = per_compaction(chain);
            table.row([
                e.summarizer.to_owned(),
                e.session.name.clone(),
                format!("{:.0}%", 100.0 * e.session.tool_share),
                (*strategy).to_owned(),
                format!("{} ({})", chain.keep, chain.tries),
                format!("{} ({})", chain.retained, e.target),
                format!("{} ({})", kinds.len(), kinds.join(", ")),
                percent(answered, e.session.asked.len()),
                format!("{requests:.1}"),
                format!("{tokens:.0}"),
                format!("{:.2} s", wall.as_secs_f64()),
            ]);
        }
    }
    for ((summarizer, strategy), (answered, asked)) in totals {
        table.row([
            summarizer.to_owned(),
            "all".to_owned(),
            String::new(),
            (*strategy).to_owned(),
            String::new(),
            String::new(),
            String::new(),
            percent(answered, asked),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    print!("{table}");
}

fn print_loads(loads: &[(u64, &Session, Vec<Load>)]) {
    println!(
        "\nunder pressure: {CHAIN} chained `panto send` against the loopback model, every compaction an overflow's\n"
    );
    let mut table = Table::new([
        "window",
        "session",
        "strategy",
        "compactions (clearings)",
        "model requests / compaction",
        "model tokens / compaction",
        "wall / compaction",
        "retained tokens",
        "closed-book",
    ]);
    for (window, session, by) in loads {
        for (strategy, l) in STRATEGIES.iter().zip(by) {
            let n = l.compactions.max(1);
            table.row([
                window.to_string(),
                session.name.clone(),
                (*strategy).to_owned(),
                if l.failures.is_empty() {
                    format!("{} ({})", l.compactions, l.clearings)
                } else {
                    format!("{} ({}), a send failed", l.compactions, l.clearings)
                },
                format!("{:.1}", l.requests as f64 / n as f64),
                format!("{:.0}", l.tokens as f64 / n as f64),
                format!("{:.2} s", l.wall.as_secs_f64() / n as f64),
                l.retained.to_string(),
                percent(l.answered, session.asked.len()),
            ]);
        }
    }
    print!("{table}");
}

fn print_huge(rows: &[(&str, Huge)]) {
    println!(
        "\none tool result of {HUGE_BYTES} bytes at a window of {HUGE_WINDOW} tokens, one `panto send` (release build)\n"
    );
    let mut table = Table::new([
        "strategy",
        "requests",
        "compaction requests",
        "wall",
        "written",
    ]);
    for (strategy, h) in rows {
        table.row([
            (*strategy).to_owned(),
            h.requests.to_string(),
            h.compaction_requests.to_string(),
            format!("{:.2} s", h.wall.as_secs_f64()),
            h.failure.as_ref().map_or_else(
                || h.written.clone().unwrap_or_default(),
                |f| format!("failed: {f}"),
            ),
        ]);
    }
    print!("{table}");
}

/// Each goal, whether it holds, and the numbers that say so.
fn goals(
    equal: &[Equal<'_>],
    loads: &[(u64, &Session, Vec<Load>)],
    huge: Option<&[(&str, Huge)]>,
) -> Vec<(Goal, bool, String)> {
    let mut out = Vec::new();
    let (mut keeps, mut kept) = (true, Vec::new());
    for summarizer in ["offline", "loopback"] {
        let of = |i: usize| -> usize {
            equal
                .iter()
                .filter(|e| e.summarizer == summarizer)
                .map(|e| e.chains[i].answered(e.session))
                .sum()
        };
        let (summary, tiered) = (of(0), of(2));
        keeps &= tiered > summary;
        kept.push(format!(
            "{summarizer}: tiered {tiered}, summary {summary} questions answered"
        ));
    }
    out.push((Goal::KeepsMore, keeps, kept.join("; ")));
    let mut at_r = Vec::new();
    for e in equal.iter().filter(|e| e.session.tool_share >= TOOL_HEAVY) {
        let (_, s, _) = per_compaction(&e.chains[0]);
        let (_, t, _) = per_compaction(&e.chains[2]);
        at_r.push((format!("{} ({})", e.session.name, e.summarizer), s, t));
    }
    out.push(ratio_goal(Goal::FewerTokens, &at_r));
    let mut pressed = Vec::new();
    for (window, session, by) in loads {
        if session.tool_share >= TOOL_HEAVY && by[0].compactions > 0 {
            let per = |l: &Load| l.tokens as f64 / l.compactions.max(1) as f64;
            pressed.push((
                format!("{} at {window}", session.name),
                per(&by[0]),
                per(&by[2]),
            ));
        }
    }
    out.push(ratio_goal(Goal::FewerTokensUnderPressure, &pressed));
    if let Some(rows) = huge
        && let Some((_, h)) = rows.iter().find(|(s, _)| *s == "tiered")
    {
        out.push((
            Goal::Huge,
            h.failure.is_none() && h.requests < 10 && h.wall < Duration::from_secs(2),
            format!("{} requests, {:.2} s", h.requests, h.wall.as_secs_f64()),
        ));
    }
    out
}

/// Whether tiered spent [`TOKEN_FACTOR`] times fewer tokens per compaction than summary in
/// every one of `ratios` (name, summary's, tiered's).
fn ratio_goal(goal: Goal, ratios: &[(String, f64, f64)]) -> (Goal, bool, String) {
    let holds = !ratios.is_empty() && ratios.iter().all(|(_, s, t)| *t * TOKEN_FACTOR <= *s);
    let detail: Vec<String> = ratios
        .iter()
        .map(|(n, s, t)| format!("{n}: summary {s:.0}, tiered {t:.0}"))
        .collect();
    (goal, holds, detail.join("; "))
}

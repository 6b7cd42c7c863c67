//! Words and terminal rules: compaction progress, retry lines, the meter and errors in words,
//! `NO_COLOR`, the pager, and the neutralising of control characters in human-readable text
//! written to a terminal. What is drawn below the output (the spinner, the chat's prompt) is
//! `screen.rs`.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use panto_compact::{CompactionEvent, CompactionStrategy};
use panto_model::{Cost, Trigger, Usage};
use panto_provider::{About, ProviderError, RetryNotice};

/// The line announcing a retry: `panto: retrying 2/3 in 4 s: connection failed: Connection
/// refused (os error 111)`.
pub(crate) fn describe_retry(notice: &RetryNotice<'_>) -> String {
    format!(
        "panto: retrying {}/{} in {}: {}",
        notice.retry,
        notice.max_retries,
        About(notice.delay),
        short_reason(notice.error)
    )
}

/// An error in a few words: a connection failure by its root cause (the last part of the
/// chain), anything else by its message, cut at 160 characters.
fn short_reason(error: &ProviderError) -> String {
    if let ProviderError::Connection { message } = error {
        // panto's own words, without the library's cause after them.
        let plain = message
            .split(panto_providers::CAUSE)
            .next()
            .unwrap_or(message);
        return format!("connection failed: {plain}");
    }
    panto_transcript::clip(&error.to_string(), 160)
}

/// Whether decorations (spinner) may be drawn: stderr is a terminal.
pub(crate) fn stderr_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stderr().is_terminal())
}

/// Whether stdout is a terminal.
pub(crate) fn stdout_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stdout().is_terminal())
}

/// Human-readable `text` for stdout: neutralised when stdout is a terminal, exact otherwise
/// (a pipe or a file gets the bytes as they are; `--json` output never comes here).
pub(crate) fn for_stdout(text: &str) -> Cow<'_, str> {
    if stdout_is_terminal() {
        neutralize(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// Human-readable `text` for stderr: neutralised when stderr is a terminal.
pub(crate) fn for_stderr(text: &str) -> Cow<'_, str> {
    if stderr_is_terminal() {
        neutralize(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// An error as one message: its chain joined with `: `, leaving out each cause whose text the
/// message already holds (an OS error quoted by every layer that wraps it is printed once).
/// The words of a library that panto quotes after its own (`; cause: `) go on a line of their
/// own, `cause: ...`, so that panto's sentence reads first and alone.
pub(crate) fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    match text.split_once(panto_providers::CAUSE) {
        Some((plain, cause)) => {
            // The cause runs to the end of its line; a hint may follow on the next one.
            let (cause, rest) = cause.split_once('\n').map_or((cause, ""), |(c, r)| (c, r));
            let mut out = format!("{plain}\ncause: {cause}");
            if !rest.is_empty() {
                out.push('\n');
                out.push_str(rest);
            }
            out
        }
        None => text,
    }
}

/// Writes a long output on stdout through the user's pager when stdout is a terminal (`$PAGER`,
/// run by `sh -c`; when it is unset, `less` if it is installed, with `LESS=FRX` unless `LESS`
/// is set, so that a short text is printed and the screen kept), and straight to stdout
/// otherwise: a pipe or a file never gets a pager. `PAGER=` (empty) or `PAGER=cat` turns it
/// off. Quitting the pager before the end is not an error.
///
/// # Errors
/// When stdout (or the pager's input) cannot be written for another reason than the pager
/// having quit.
pub(crate) fn paged(
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let Some(mut child) = pager() else {
        let mut out = std::io::stdout().lock();
        write(&mut out)?;
        return out.flush();
    };
    let written = match child.stdin.take() {
        Some(mut input) => write(&mut input).and_then(|()| input.flush()),
        None => Ok(()),
    };
    // The pager reads to the end of its input (closed when `input` was dropped), then waits
    // for the user.
    let _ = child.wait();
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The pager to start for a long output, when stdout is a terminal and one is wanted.
fn pager() -> Option<std::process::Child> {
    if !cfg!(unix) || !stdout_is_terminal() {
        return None;
    }
    let command = match std::env::var("PAGER") {
        Ok(command) => command,
        Err(_) if on_path("less") => "less".to_owned(),
        Err(_) => return None,
    };
    let command = command.trim();
    if command.is_empty() || command == "cat" {
        return None;
    }
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    cmd.spawn().ok()
}

/// Whether an executable `name` is in one of the folders of `$PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// Whether `error` is a write to a closed pipe (`panto context s.jsonl | head`): the reader
/// has all it wanted, so the command ends quietly.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `text` with nothing a terminal would act on: every control character but newline and tab
/// (C0, DEL and the C1 range, so ESC and CSI, and with them every escape sequence: colours,
/// cursor moves, titles, OSC 52 clipboard writes) and the bidirectional-override characters
/// that reorder what is shown, each written as a visible escape (`\x1b`, `\u{202e}`). A
/// carriage return just before a newline is dropped (a CRLF line end), any other is escaped.
pub(crate) fn neutralize(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if !needs_escape(c) {
            out.push(c);
        } else if u32::from(c) < 0x80 {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether colour is allowed: not when `NO_COLOR` is set (to anything non-empty), per
/// <https://no-color.org>. The spinner is the only coloured output, and only on a terminal.
pub(crate) fn color_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// One stderr line for a compaction event, in the words a person counts: messages, not the
/// library's turns. Sizes are of the conversation (the messages, without the agent's system
/// prompt), and say so; the context meter after a reply gives the whole next request.
/// `Failed` has no line: the error it carries is printed once, by whoever receives it.
pub(crate) fn describe_event(event: &CompactionEvent) -> String {
    match event {
        CompactionEvent::Started {
            trigger,
            model,
            plan,
            tokens_before,
        } => format!(
            "{}panto: compacting ({model}): summarizing {}, keeping {}; conversation about {tokens_before} tokens",
            if *trigger == Trigger::Overflow {
                "panto: the request was too large for the model: compacting, then retrying once\n"
            } else {
                ""
            },
            count(plan.prefix().len(), "message"),
            plan.kept().len(),
        ),
        CompactionEvent::Folding {
            steps,
            limit,
            transcript_tokens,
        } if *steps > 1 => format!(
            "panto: compacting in {steps} steps: its transcript is about {transcript_tokens} tokens{}",
            limit.map_or(String::new(), |l| format!(", about {l} tokens per request"))
        ),
        CompactionEvent::Step {
            step,
            steps,
            input_tokens,
            max_output_tokens,
            ..
        } if *steps > 1 => format!(
            "panto: step {step}/{steps}: about {input_tokens} tokens in, up to {max_output_tokens} out"
        ),
        CompactionEvent::Elided { step, items, bytes } => format!(
            "panto: step {step}: {} too large for any request {} shortened in the transcript ({} left out; the session keeps {})",
            count(*items, "item"),
            if *items == 1 { "was" } else { "were" },
            count(usize::try_from(*bytes).unwrap_or(usize::MAX), "byte"),
            if *items == 1 { "it" } else { "them" },
        ),
        CompactionEvent::Shrinking {
            step,
            limit,
            steps,
            cause,
        } => format!(
            // One ruler a line: the server's counts in its words, then panto's estimate.
            "panto: step {step} was too large for the model: {cause}\npanto: retrying with smaller requests: about {limit} tokens each by panto's estimate, {} in all",
            count(*steps, "step")
        ),
        CompactionEvent::FallingBack {
            failed_model,
            cause,
            model,
        } => format!(
            "panto: compaction model {failed_model} failed ({cause}); retrying once with {model}"
        ),
        CompactionEvent::NativeFailed { cause } => format!(
            "panto: the provider's native compaction failed ({cause}); writing panto's summary instead"
        ),
        CompactionEvent::ClearingNotEnough {
            tokens_before,
            tokens_after,
            cleared,
            reason,
        } => format!(
            "panto: clearing {} would take the conversation from about {tokens_before} to {tokens_after} tokens, which is not enough ({reason}): summarizing too",
            count(*cleared, "old block")
        ),
        CompactionEvent::ClearedAlone { reason } => format!(
            "panto: the summary of the cleared conversation is not written ({reason}): writing the clearing alone"
        ),
        CompactionEvent::Finished(report) if report.strategy == CompactionStrategy::Clear => {
            let bytes: usize = report.cleared.iter().map(|c| c.bytes).sum();
            format!(
                "panto: cleared {} ({bytes} bytes) without a model: conversation about {} -> {} tokens; {} kept verbatim",
                count(report.cleared.len(), "old block"),
                report.tokens_before,
                report.tokens_after,
                count(report.plan.kept().len(), "message"),
            )
        }
        CompactionEvent::Finished(report) => format!(
            "panto: compacted ({}{}{}{}): conversation about {} -> {} tokens; {} summarized, {} kept{}",
            report.model,
            match &report.native {
                Some(protocol) => format!(
                    ", {protocol} native compaction{}",
                    report.usage.as_ref().map_or(String::new(), |u| format!(
                        ", {} tokens in, {} out",
                        u.input_total(),
                        u.output_tokens
                    ))
                ),
                None => String::new(),
            },
            if report.fallback { ", fallback" } else { "" },
            match (
                report.steps.len(),
                report.steps.iter().filter(|s| s.recorded.is_some()).count(),
            ) {
                (n, recorded) if recorded > 0 => {
                    format!(", {n} steps, {recorded} of them recorded by panto")
                }
                (n, _) if n > 1 => format!(", {n} steps"),
                _ => String::new(),
            },
            report.tokens_before,
            report.tokens_after,
            report.plan.prefix().len(),
            report.plan.kept().len(),
            if report.truncated {
                "; the summary reached the output limit and may be cut short"
            } else if report.tokens_after >= report.tokens_before {
                "; the summary is no shorter than what it replaces: this compaction saves nothing, and went ahead only because it was forced"
            } else {
                ""
            }
        ),
        CompactionEvent::StepRecorded { step, steps, cause } => format!(
            "panto: warning: step {step}/{steps}: no model's summary of these turns passed ({cause}); panto's own record of them goes on as the summary so far, and the model is asked for the rest"
        ),
        CompactionEvent::Replanned { steps, cause } => format!(
            "panto: planned again ({cause}): {} in all",
            count(*steps, "step")
        ),
        CompactionEvent::Retrying {
            estimated_tokens,
            overflowed_tokens,
        } => format!(
            "panto: retrying the request: about {estimated_tokens} tokens now, {overflowed_tokens} before"
        ),
        CompactionEvent::CompactingAhead {
            estimated_tokens,
            threshold_tokens,
            window,
        } => format!(
            "panto: compacting ahead: the next request is {} of the {} window (about {estimated_tokens} tokens; compacting above {threshold_tokens})",
            percent(*estimated_tokens, window.tokens),
            short_count(window.tokens)
        ),
        CompactionEvent::AheadSkipped { reason, sending } => format!(
            "panto: did not compact ahead: {reason}; {}",
            if *sending {
                "sending the request as it is (it fits the window)"
            } else {
                "the request does not fit the window"
            }
        ),
        CompactionEvent::WindowUnknown => "panto: auto_compact is on, but the model's context window is unknown, so panto compacts only after an overflow (set context_window, or use a server that tells it: `panto window`)".to_owned(),
        CompactionEvent::SilentTruncation {
            truncation,
            estimated_tokens,
        } => format!(
            "panto: the server truncated the request silently: it counted {} input tokens for a request of about {estimated_tokens} (at least {}; it counted {} for the one before), so the model did not see the start of the conversation; that answer is not kept: compacting, then asking again\nhint: raise the server's context window (Ollama: num_ctx, or OLLAMA_CONTEXT_LENGTH; llama-server: -c), or set context_window and auto_compact so that panto compacts before the server cuts",
            truncation.counted, truncation.floor, truncation.previous
        ),
        _ => String::new(),
    }
}

/// The widest a meter line may be: it fits a terminal of 60 columns.
pub(crate) const METER_WIDTH: usize = 60;

/// The fewest columns a shortened model name keeps beside the cost on the meter; with less room
/// the name is left out (the chat names the model when it starts and on `/model`).
const MODEL_ROOM: usize = 8;

/// What the context meter shows: the size of the next request (system prompt included, as
/// `panto context` counts it) and its share of the window when the window is known, the
/// tokens of the request just answered as the provider counted them (input with cache reads
/// and writes, and output), and the active model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meter<'a> {
    /// `None` when no request was answered (after `/compact`, or on resuming a chat);
    /// `Some(None)` when the provider reported no counts.
    pub answered: Option<Option<&'a Usage>>,
    /// panto's estimate of the next request.
    pub next_request: u64,
    /// The model's window, when known.
    pub window: Option<u64>,
    /// Whether to say that the window is unknown (once per run).
    pub say_unknown: bool,
    /// The active model.
    pub model: &'a str,
    /// The share of the window above which requests are compacted ahead, when on.
    pub auto_compact: Option<f64>,
    /// What the conversation's requests cost so far in this run (replies and compactions).
    pub spent: Option<Cost>,
}

/// The context meter in a compact form that fits [`METER_WIDTH`] columns:
/// `panto: context 3.6k/64k (6%); 3.6k in, 7 out; gpt-4o`. The window's share comes first; the
/// counts of the request just answered are left out when the line would be wider, then the
/// model's name is shortened.
pub(crate) fn describe_meter(meter: &Meter<'_>) -> String {
    let next = short_count(meter.next_request);
    let context = match meter.window {
        Some(w) => format!(
            "context {next}/{} ({}{})",
            short_count(w),
            percent(meter.next_request, w),
            meter.auto_compact.map_or(String::new(), |share| format!(
                ", compacts at {}%",
                (share * 100.0).round()
            ))
        ),
        None if meter.say_unknown => format!("context {next}, window unknown"),
        None => format!("context {next}"),
    };
    let answered = match meter.answered {
        None => None,
        Some(None) => Some("no token counts".to_owned()),
        Some(Some(u)) => Some(format!(
            "{} in, {} out",
            short_count(u.input_total()),
            short_count(u.output_tokens)
        )),
    };
    let line = |parts: &[&str]| format!("panto: {}", parts.join("; "));
    let spent = meter.spent.as_ref().and_then(describe_spent);
    let mut parts: Vec<&str> = vec![&context];
    if let Some(a) = &answered {
        parts.push(a);
    }
    if let Some(s) = &spent {
        parts.push(s);
    }
    parts.push(meter.model);
    let full = line(&parts);
    if full.chars().count() <= METER_WIDTH {
        return full;
    }
    // The counts of the request just answered go first, then the model's name is shortened,
    // then left out: the cost stays.
    if let Some(s) = &spent {
        let with_cost = line(&[&context, s, meter.model]);
        let width = with_cost.chars().count();
        if width <= METER_WIDTH {
            return with_cost;
        }
        let room = METER_WIDTH.saturating_sub(width - meter.model.chars().count());
        if room >= MODEL_ROOM {
            return line(&[&context, s, &crate::fit::fit(meter.model, room)]);
        }
        let alone = line(&[&context, s]);
        if alone.chars().count() <= METER_WIDTH {
            return alone;
        }
    }
    let without = line(&[&context, meter.model]);
    let width = without.chars().count();
    if width <= METER_WIDTH {
        return without;
    }
    // Shorten the model's name to what is left, with an ellipsis.
    let room = METER_WIDTH.saturating_sub(width - meter.model.chars().count());
    line(&[&context, &crate::fit::fit(meter.model, room)])
}

/// What the requests cost so far, for the meter (`panto_model::usage_cost`'s figures): the
/// money when every reply had a price (`spent 0.042`), else the input as billed in tokens at
/// the full price (`45k billed`), with the share read from the cache when there was any
/// (` (91% cached)`). Nothing before the first reply, nor when it would say nothing the counts
/// do not (no price, and no cache read or write reported).
pub(crate) fn describe_spent(cost: &Cost) -> Option<String> {
    let cached = cost.cache_read_tokens + cost.cache_write_tokens > 0;
    if cost.replies == 0 || (cost.money().is_none() && !cached) {
        return None;
    }
    let amount = match cost.money() {
        Some(money) => format!("spent {}", short_money(money)),
        None => format!("{} billed", short_count(cost.billed_input_tokens)),
    };
    let share = cost.cache_hit_share();
    Some(if share > 0.0 {
        format!("{amount} ({}% cached)", (share * 100.0).floor())
    } else {
        amount
    })
}

/// An amount of money in a few characters: four decimals below 1, two above.
fn short_money(amount: f64) -> String {
    if amount < 1.0 {
        format!("{amount:.4}")
    } else {
        format!("{amount:.2}")
    }
}

/// A token count in a few characters: exact below 1,000, then `3.6k`, `36k`, `1.2M`.
pub(crate) fn short_count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=9_949 => format!("{:.1}k", n as f64 / 1_000.0).replace(".0k", "k"),
        9_950..=999_499 => format!("{}k", (n + 500) / 1_000),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0).replace(".0M", "M"),
    }
}

/// `part` as a share of `whole`, in whole percent; `<1%` for a little, never `0%` for some.
pub(crate) fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "?%".to_owned();
    }
    let share = u128::from(part) * 100 / u128::from(whole);
    if share == 0 && part > 0 {
        "<1%".to_owned()
    } else {
        format!("{share}%")
    }
}

/// `n` things, in the plural unless one: `1 message`, `3 messages`.
pub(crate) fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// The lines that say, loudly, that no model wrote the summary: why, each attempt's cause, what
/// panto wrote instead, and how to have a model summarize later.
pub(crate) fn describe_degraded(cause: &str, attempts: &[String]) -> Vec<String> {
    let mut lines = vec![format!(
        "panto: warning: no model could write the summary ({cause})"
    )];
    for (i, attempt) in attempts.iter().enumerate() {
        lines.push(format!("panto:   attempt {}: {attempt}", i + 1));
    }
    lines.push("panto: instead panto wrote its own record: the earlier summary, the assistant's last words and the whole ledger (`panto ledger` prints it); the conversation goes on from it".to_owned());
    lines.push("panto: to have a model summarize it later, run `panto compact SESSION` (`/compact` in a chat), with --compaction-model or a model with a larger window if the window was the cause".to_owned());
    lines
}

/// What cancels a request: Ctrl-C as the terminal driver delivers it (SIGINT, in cooked mode,
/// or `kill -INT`), and in the chat, whose terminal is in raw mode, the Ctrl-C key.
pub(crate) struct Cancel {
    key: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Cancel {
    /// Cancelled by SIGINT only.
    pub(crate) fn signal() -> Cancel {
        Cancel { key: None }
    }

    /// Cancelled by SIGINT, or when `key` becomes true.
    pub(crate) fn with_key(key: tokio::sync::watch::Receiver<bool>) -> Cancel {
        Cancel { key: Some(key) }
    }

    /// Resolves when the request is cancelled.
    pub(crate) async fn cancelled(&mut self) {
        let key = async {
            let pressed = match &mut self.key {
                Some(rx) => rx.wait_for(|pressed| *pressed).await.is_ok(),
                None => false,
            };
            if !pressed {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = interrupted() => {}
            () = key => {}
        }
    }
}

/// Resolves when the user presses Ctrl-C; never, where the signal cannot be listened to.
pub(crate) async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

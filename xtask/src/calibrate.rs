//! `cargo xtask calibrate`: measures panto-size's heuristic against the usage of real sessions.
//!
//! For every span between two consecutive requests of a session (the messages between assistant
//! message k and k+1), the truth is `input_total(k+1) - input_total(k) - output_tokens(k)`, and
//! the heuristic's estimate is the sum of `Heuristic::message` over the span. The truth comes
//! from `panto_size::measure_span` and the band from `panto_size::plausible`, the checks the
//! sizer applies, so the calibration measures exactly the spans the sizer believes. Two rules
//! are the calibration's own: a span after an implausible output is left out (the sizer
//! substitutes the heuristic for that output, which would make the truth depend on the very
//! estimate being measured), and so is a truth of zero (no ratio). Spans whose truth is not
//! usable are skipped and counted by reason. A second table compares the heuristic with
//! `output_tokens` for the assistant messages themselves. The output is Markdown, ready for
//! `docs/sizing.md`.
//!
//! The sessions folder defaults to `../shared/data/sessions` relative to the repository root;
//! `PANTO_CALIBRATE_SESSIONS` overrides it. A missing folder is reported and is not an error.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use panto_model::{ContentBlock, Entry, Message, Role, ToolResultContent, read_entries, replay};
use panto_size::{Fallback, Heuristic, PLAUSIBLE_FACTOR, measure_span, plausible};

use crate::table::Table;

/// The environment variable that points the calibration at another sessions folder.
pub(crate) const SESSIONS_ENV: &str = "PANTO_CALIBRATE_SESSIONS";

pub(crate) fn run(root: &Path) -> Result<()> {
    let dir = sessions_dir(root);
    if !dir.is_dir() {
        eprintln!(
            "calibrate: no sessions folder at {} (set {SESSIONS_ENV} to use another); nothing to \
             calibrate",
            dir.display()
        );
        return Ok(());
    }
    let report = calibrate_dir(&dir)?;
    print!("{}", report.markdown());
    let overall = report.overall();
    let met = overall.over >= 0.9 && overall.median < 1.5;
    eprintln!(
        "calibrate: {} usable spans, {:.1}% overestimated, median ratio {:.2} (target: at least \
         90% and under 1.5: {})",
        overall.count,
        100.0 * overall.over,
        overall.median,
        if met { "met" } else { "NOT met" }
    );
    Ok(())
}

/// The folder of sessions to calibrate on.
pub(crate) fn sessions_dir(root: &Path) -> PathBuf {
    match std::env::var_os(SESSIONS_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => root.join("../shared/data/sessions"),
    }
}

/// Why a span was left out of the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Skip {
    /// One of the two assistant messages has no usage.
    NoUsage,
    /// The two assistant messages name different models.
    ModelChange,
    /// One of them is a kept copy (measured before a compaction).
    KeptCopy,
    /// The span holds a compaction message.
    Compaction,
    /// No message between the two requests.
    Empty,
    /// The earlier output is below a quarter of the heuristic, so the difference holds an
    /// unmeasured part of the assistant message (Claude Code logs the count at stream start).
    ImplausibleOutput,
    /// The truth is zero or negative (cache reset, trimmed context, a dropped message).
    NotPositive,
    /// A guard panto-size added after this calibration was written.
    OtherGuard,
}

impl Skip {
    fn label(self) -> &'static str {
        match self {
            Skip::NoUsage => "no usage",
            Skip::ModelChange => "model change",
            Skip::KeptCopy => "kept copy",
            Skip::Compaction => "compaction",
            Skip::Empty => "empty",
            Skip::ImplausibleOutput => "implausible output",
            Skip::NotPositive => "truth <= 0",
            Skip::OtherGuard => "other guard",
        }
    }

    /// The skip for a guard of `panto_size::measure_span`.
    fn guard(reason: Fallback) -> Skip {
        match reason {
            Fallback::MissingUsage => Skip::NoUsage,
            Fallback::ModelChanged => Skip::ModelChange,
            Fallback::KeptCopy => Skip::KeptCopy,
            Fallback::Compaction => Skip::Compaction,
            Fallback::Decreasing => Skip::NotPositive,
            _ => Skip::OtherGuard,
        }
    }
}

/// One usable span: the heuristic's estimate, the truth and the content bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub estimate: u64,
    pub truth: u64,
    pub bytes: u64,
}

impl Span {
    fn ratio(&self) -> f64 {
        self.estimate as f64 / self.truth as f64
    }

    /// Whether the truth lies within `PLAUSIBLE_FACTOR` of the estimate (the sizer's guard).
    fn plausible(&self) -> bool {
        plausible(self.truth, self.estimate)
    }
}

/// The calibration of one session file.
#[derive(Clone, Debug, Default)]
pub(crate) struct FileReport {
    pub name: String,
    /// Spans with a positive truth, plausible or not.
    pub spans: Vec<Span>,
    pub skipped: BTreeMap<Skip, usize>,
    /// (heuristic, `output_tokens`) of assistant messages with a plausible output.
    pub outputs: Vec<(u64, u64)>,
    /// Assistant messages whose output is below a quarter of the heuristic.
    pub implausible_outputs: usize,
}

/// The calibration of a folder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Report {
    pub files: Vec<FileReport>,
}

/// Calibrates on every `*.jsonl` file of `dir`, in name order.
///
/// # Errors
/// When the folder or a file cannot be read, or a line is not a Contract 1 entry (the error
/// names the file and the line).
pub(crate) fn calibrate_dir(dir: &Path) -> Result<Report> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    let mut report = Report::default();
    for path in paths {
        let bytes =
            fs::read(&path).with_context(|| format!("could not read {}", path.display()))?;
        let entries: Vec<Entry> =
            read_entries(&bytes).with_context(|| format!("{}", path.display()))?;
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        report
            .files
            .push(calibrate_messages(name, &replay(entries).messages));
    }
    Ok(report)
}

/// Calibrates on the messages of one session.
pub(crate) fn calibrate_messages(name: String, messages: &[Message]) -> FileReport {
    let h = Heuristic;
    let mut report = FileReport {
        name,
        ..FileReport::default()
    };
    let assistants: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect();
    for &i in &assistants {
        if let Some(u) = &messages[i].usage {
            let estimate = h.message(&messages[i]);
            if u.output_tokens * PLAUSIBLE_FACTOR < estimate {
                report.implausible_outputs += 1;
            } else {
                report.outputs.push((estimate, u.output_tokens));
            }
        }
    }
    for pair in assistants.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        match span(messages, a, b) {
            Ok(s) => report.spans.push(s),
            Err(skip) => *report.skipped.entry(skip).or_default() += 1,
        }
    }
    report
}

fn span(messages: &[Message], a: usize, b: usize) -> Result<Span, Skip> {
    let h = Heuristic;
    let first = &messages[a];
    let output = first.usage.as_ref().map_or(0, |u| u.output_tokens);
    let inner = &messages[a + 1..b];
    if inner.is_empty() {
        return Err(Skip::Empty);
    }
    let truth = measure_span(messages, a, b, output).map_err(Skip::guard)?;
    if output.saturating_mul(PLAUSIBLE_FACTOR) < h.message(first) {
        return Err(Skip::ImplausibleOutput);
    }
    if truth == 0 {
        return Err(Skip::NotPositive);
    }
    Ok(Span {
        estimate: inner.iter().map(|m| h.message(m)).sum(),
        truth,
        bytes: inner.iter().map(content_bytes).sum(),
    })
}

/// The bytes of content a message carries: texts, tool names and arguments (as compact JSON),
/// tool results, summaries. Images and signatures are not counted.
pub(crate) fn content_bytes(message: &Message) -> u64 {
    message.content.iter().map(block_bytes).sum()
}

fn block_bytes(block: &ContentBlock) -> u64 {
    let n = match block {
        ContentBlock::Text(t) => t.text.len(),
        ContentBlock::Thinking(t) => t.thinking.len(),
        ContentBlock::ToolUse(u) => {
            u.name.len() + serde_json::to_string(&u.input).map_or(0, |s| s.len())
        }
        ContentBlock::ToolResult(r) => match &r.content {
            ToolResultContent::Text(s) => s.len(),
            ToolResultContent::Blocks(blocks) => {
                return blocks.iter().map(block_bytes).sum();
            }
        },
        ContentBlock::Compaction(c) => c.summary.len(),
        _ => 0,
    };
    n as u64
}

/// Summary statistics of a set of ratios.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stats {
    pub count: usize,
    /// Fraction of ratios strictly above 1 (the heuristic overestimates).
    pub over: f64,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Statistics of ratios (estimate / truth).
pub(crate) fn stats(ratios: impl IntoIterator<Item = f64>) -> Stats {
    let mut v: Vec<f64> = ratios.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let over = v.iter().filter(|&&r| r > 1.0).count();
    Stats {
        count: v.len(),
        over: if v.is_empty() {
            f64::NAN
        } else {
            over as f64 / v.len() as f64
        },
        median: percentile(&v, 0.5),
        p10: percentile(&v, 0.1),
        p90: percentile(&v, 0.9),
    }
}

impl FileReport {
    /// The spans that pass the sizer's plausibility guard.
    pub(crate) fn usable(&self) -> impl Iterator<Item = &Span> {
        self.spans.iter().filter(|s| s.plausible())
    }

    fn implausible_spans(&self) -> usize {
        self.spans.len() - self.usable().count()
    }
}

impl Report {
    fn usable(&self) -> impl Iterator<Item = &Span> {
        self.files.iter().flat_map(FileReport::usable)
    }

    /// Statistics over the usable spans of every file.
    pub(crate) fn overall(&self) -> Stats {
        stats(self.usable().map(Span::ratio))
    }

    /// Statistics over every span with a positive truth, implausible ones included.
    pub(crate) fn overall_with_implausible(&self) -> Stats {
        stats(self.files.iter().flat_map(|f| &f.spans).map(Span::ratio))
    }

    /// The Markdown tables for `docs/sizing.md`.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Spans: the messages between two consecutive requests, heuristic vs \
             `input_total(k+1) - input_total(k) - output_tokens(k)`.\n"
        );
        let mut spans = Table::new([
            "file",
            "spans",
            "skipped",
            "> truth",
            "median",
            "p10",
            "p90",
            "bytes/token p10",
            "p50",
            "p90",
        ])
        .right([1, 3, 4, 5, 6, 7, 8, 9]);
        let mut all_skipped: BTreeMap<Skip, usize> = BTreeMap::new();
        let mut all_implausible = 0;
        for f in &self.files {
            for (k, n) in &f.skipped {
                *all_skipped.entry(*k).or_default() += n;
            }
            all_implausible += f.implausible_spans();
            span_row(
                &mut spans,
                &f.name,
                f.usable(),
                &f.skipped,
                f.implausible_spans(),
            );
        }
        span_row(
            &mut spans,
            "**overall**",
            self.usable(),
            &all_skipped,
            all_implausible,
        );
        let _ = write!(out, "{spans}");
        let with = self.overall_with_implausible();
        let _ = writeln!(
            out,
            "\nCounting the {all_implausible} spans off by more than {PLAUSIBLE_FACTOR}x as well: \
             {} spans, {:.1}% > truth, median {:.2}.\n",
            with.count,
            100.0 * with.over,
            with.median
        );
        let _ = writeln!(
            out,
            "Assistant messages: heuristic vs `output_tokens` (outputs below a quarter of the \
             heuristic left out).\n"
        );
        let mut table = Table::new([
            "file",
            "messages",
            "implausible outputs",
            "> output",
            "median",
            "p10",
            "p90",
        ])
        .right(1..7);
        for f in &self.files {
            output_row(&mut table, &f.name, &f.outputs, f.implausible_outputs);
        }
        let outputs: Vec<(u64, u64)> = self
            .files
            .iter()
            .flat_map(|f| f.outputs.iter().copied())
            .collect();
        let implausible: usize = self.files.iter().map(|f| f.implausible_outputs).sum();
        output_row(&mut table, "**overall**", &outputs, implausible);
        let _ = write!(out, "{table}");
        out
    }
}

fn span_row<'a>(
    table: &mut Table,
    name: &str,
    spans: impl Iterator<Item = &'a Span>,
    skipped: &BTreeMap<Skip, usize>,
    implausible: usize,
) {
    let spans: Vec<&Span> = spans.collect();
    let s = stats(spans.iter().map(|s| s.ratio()));
    let mut bpt: Vec<f64> = spans
        .iter()
        .map(|s| s.bytes as f64 / s.truth as f64)
        .collect();
    bpt.sort_by(f64::total_cmp);
    let mut reasons: Vec<String> = skipped
        .iter()
        .map(|(k, n)| format!("{n} {}", k.label()))
        .collect();
    if implausible > 0 {
        reasons.push(format!("{implausible} off by >{PLAUSIBLE_FACTOR}x"));
    }
    let reasons = if reasons.is_empty() {
        "0".to_owned()
    } else {
        reasons.join(", ")
    };
    table.row([
        name.to_owned(),
        s.count.to_string(),
        reasons,
        percent(s.over),
        num(s.median),
        num(s.p10),
        num(s.p90),
        num(percentile(&bpt, 0.1)),
        num(percentile(&bpt, 0.5)),
        num(percentile(&bpt, 0.9)),
    ]);
}

fn output_row(table: &mut Table, name: &str, outputs: &[(u64, u64)], implausible: usize) {
    let s = stats(
        outputs
            .iter()
            .filter(|(_, o)| *o > 0)
            .map(|&(h, o)| h as f64 / o as f64),
    );
    table.row([
        name.to_owned(),
        s.count.to_string(),
        implausible.to_string(),
        percent(s.over),
        num(s.median),
        num(s.p10),
        num(s.p90),
    ]);
}

fn num(x: f64) -> String {
    if x.is_nan() {
        "-".to_owned()
    } else {
        format!("{x:.2}")
    }
}

fn percent(x: f64) -> String {
    if x.is_nan() {
        "-".to_owned()
    } else {
        format!("{:.1}%", 100.0 * x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("panto-calibrate-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn assistant(input: u64, output: u64, model: &str) -> String {
        format!(
            r#"{{"type":"message","role":"assistant","model":"{model}","usage":{{"input_tokens":{input},"output_tokens":{output}}},"content":[{{"type":"tool_use","id":"t","name":"read","input":{{"path":"a.rs"}}}}]}}"#
        )
    }

    const RESULT: &str = r#"{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"fn main() {}"}]}"#;

    #[test]
    fn spans_are_measured_and_unusable_ones_counted() {
        let dir = temp_dir("spans");
        let r = RESULT.to_owned();
        let lines = [
            r#"{"type":"message","role":"user","content":[{"type":"text","text":"go"}]}"#
                .to_owned(),
            assistant(1000, 50, "m"),
            r.clone(),
            // Truth 1080 - 1000 - 50 = 30.
            assistant(1080, 50, "m"),
            r.clone(),
            // Goes down: 1100 - 1080 - 50 < 0.
            assistant(1100, 50, "m"),
            r.clone(),
            // A different model, and back.
            assistant(1200, 50, "other"),
            r.clone(),
            assistant(1300, 50, "m"),
            // No message between; this output (1) is implausible.
            assistant(1400, 1, "m"),
            r.clone(),
            assistant(1500, 50, "m"),
            r,
            // 9000 tokens for a short result: off by more than 4x.
            assistant(10_550, 50, "m"),
        ];
        fs::write(dir.join("a.jsonl"), lines.join("\n")).unwrap();
        fs::write(dir.join("notes.md"), "not a session").unwrap();
        let report = calibrate_dir(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(report.files.len(), 1);
        let f = &report.files[0];
        assert_eq!(f.name, "a.jsonl");
        let skipped: Vec<(Skip, usize)> = f.skipped.iter().map(|(k, n)| (*k, *n)).collect();
        assert_eq!(
            skipped,
            vec![
                (Skip::ModelChange, 2),
                (Skip::Empty, 1),
                (Skip::ImplausibleOutput, 1),
                (Skip::NotPositive, 1),
            ]
        );
        let result =
            Heuristic.message(&panto_model::from_json::<Message>(RESULT.as_bytes()).unwrap());
        assert_eq!(
            f.spans,
            vec![
                Span {
                    estimate: result,
                    truth: 30,
                    bytes: 12
                },
                Span {
                    estimate: result,
                    truth: 9000,
                    bytes: 12
                },
            ]
        );
        assert_eq!(f.usable().count(), 1);
        assert_eq!(f.implausible_outputs, 1);
        let table = report.markdown();
        assert!(table.contains("| a.jsonl | 1 | 2 model change, 1 empty, 1 implausible output, 1 truth <= 0, 1 off by >4x |"), "{table}");
    }

    /// The checks are panto-size's: a span holding a compaction message is left out, as the
    /// sizer leaves it out (this calibration's own copy of the checks counted it), and a truth
    /// near `u64::MAX` is judged without overflowing (the copy multiplied without saturating).
    #[test]
    fn spans_are_judged_by_the_sizers_checks() {
        let lines = [
            assistant(1000, 50, "m"),
            r#"{"type":"message","role":"user","content":[{"type":"compaction","summary":"s"}]}"#
                .to_owned(),
            assistant(1200, 50, "m"),
            RESULT.to_owned(),
            assistant(u64::MAX / 2, 50, "m"),
        ];
        let messages: Vec<Message> = lines
            .iter()
            .map(|l| panto_model::from_json::<Message>(l.as_bytes()).unwrap())
            .collect();
        let f = calibrate_messages("c".to_owned(), &messages);
        let skipped: Vec<(Skip, usize)> = f.skipped.iter().map(|(k, n)| (*k, *n)).collect();
        assert_eq!(skipped, vec![(Skip::Compaction, 1)]);
        assert_eq!(f.spans.len(), 1);
        assert_eq!(f.spans[0].truth, u64::MAX / 2 - 1200 - 50);
        assert_eq!(f.usable().count(), 0, "{:?}", f.spans);
    }

    #[test]
    fn a_bad_line_names_the_file_and_line() {
        let dir = temp_dir("bad");
        fs::write(
            dir.join("b.jsonl"),
            format!("{RESULT}\n{{\"type\":\"message\"}}\n"),
        )
        .unwrap();
        let err = calibrate_dir(&dir).unwrap_err();
        fs::remove_dir_all(&dir).unwrap();
        let text = format!("{err:#}");
        assert!(
            text.contains("b.jsonl") && text.contains("line 2"),
            "{text}"
        );
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let s = stats((1..=10).map(f64::from));
        assert_eq!((s.p10, s.median, s.p90), (1.0, 5.0, 9.0));
        assert_eq!(s.over, 0.9);
    }

    /// The targets of the heuristic, checked on the real sessions when they are present.
    #[test]
    fn the_heuristic_meets_its_targets_on_real_sessions() {
        let dir = sessions_dir(&crate::project_root());
        if !dir.is_dir() {
            eprintln!(
                "SKIPPED: no real sessions at {} (set {SESSIONS_ENV}); the calibration targets \
                 were not checked",
                dir.display()
            );
            return;
        }
        let report = calibrate_dir(&dir).unwrap();
        let overall = report.overall();
        assert!(overall.count >= 100, "too few spans: {overall:?}");
        assert!(
            overall.over >= 0.9,
            "overestimates too few spans: {overall:?}"
        );
        assert!(overall.median < 1.5, "median ratio too high: {overall:?}");
    }
}

//! The offline summarizer: a deterministic, extractive `Provider` that writes a compaction
//! summary with no network and no model, so that `panto compact` works on a fresh machine.
//!
//! It goes through the same pipeline as a real model: the compactor builds the same request,
//! and, as a [`SourceSummarizer`], the summarizer reads the transcript items of the messages
//! the request was rendered from (it never parses back the text rendered a moment earlier;
//! only a request from elsewhere, through [`Provider::complete`], is read back with
//! `panto_transcript::parse_request`), and extracts:
//! - any earlier summary it finds: the previous summary by another model, a summary block in
//!   the transcript, or a summary the user pasted into a message, carried over whole (bounded),
//! - the user's goal (the first request that is not a bare slash command, or the goal of the
//!   previous summary),
//! - the identifiers that code spans name, the most recent first,
//! - the tools used with counts,
//! - where the work left off (the assistant's last text, quoted),
//! - lines matching the key terms of `/compact` instructions,
//!
//! merged with the previous summary when it has the same sections. The user's requests, the
//! files, the errors with their resolution, the commands, the todos and the answers are not
//! repeated here: the compactor appends the ledger (`panto_transcript::Ledger`) to every
//! summary, this one included. Every section is bounded, so the summary is too. It cannot chat:
//! any request that is not a compaction request is refused as unsupported.
//!
//! Why one file: one summarizer, written as the sections of its summary in the order it writes
//! them; each section's extraction is a short function beside the others it is merged with.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use panto_compact::{RequestSource, SourceSummarizer};
use panto_model::{Message, Role};
use panto_provider::{EventSink, Provider, ProviderError, Request, StreamEvent, async_trait};
use panto_transcript::cut::{self, Budget, Cut, ends};
use panto_transcript::{
    ItemView, TranscriptItem, clip, is_request, one_line, parse_request, strip_ledger,
};

/// The model name the offline summarizer reports.
pub(crate) const MODEL: &str = "offline-extractive";

/// The heading under which `/compact` instructions are appended to the system prompt.
const INSTRUCTIONS_HEADING: &str = panto_compact::ADDITIONAL_INSTRUCTIONS_HEADING;

/// Caps that keep the summary bounded (characters or items).
const GOAL_CHARS: usize = 700;
const MAX_REQUESTS: usize = 12;
const MAX_FILES: usize = 40;
const MAX_IDENTIFIERS: usize = 30;
const MAX_ERRORS: usize = 12;
const STATE_CHARS: usize = 1500;
const MAX_FOCUS: usize = 10;
const FOCUS_CHARS: usize = 240;
/// An earlier summary is carried whole up to this size (an agent's handoff can be long).
const EARLIER_CHARS: usize = 20_000;
/// A user message this long that reads like a summary is carried as one.
const PASTED_SUMMARY_CHARS: usize = 1_500;

/// A deterministic extractive summarizer.
#[derive(Debug, Default)]
pub(crate) struct OfflineSummarizer;

impl OfflineSummarizer {
    /// A new summarizer.
    pub(crate) fn new() -> OfflineSummarizer {
        OfflineSummarizer
    }
}

#[async_trait]
impl Provider for OfflineSummarizer {
    fn name(&self) -> &str {
        crate::config::ProviderKind::Offline.as_str()
    }

    /// A compaction request that comes without its source (from a caller other than the
    /// compactor, which uses [`SourceSummarizer::summarize_source`]): its transcript is read
    /// back from the text.
    async fn complete(
        &self,
        request: &Request,
        events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let summary = summarize_request(request)?;
        events(StreamEvent::Text(&summary));
        Ok(answer(summary))
    }
}

impl SourceSummarizer for OfflineSummarizer {
    /// The compactor's path: the summary is written from the items of the messages the request
    /// was rendered from, and the request's text is not read back.
    fn summarize_source(
        &self,
        request: &Request,
        source: RequestSource<'_>,
    ) -> Result<Message, ProviderError> {
        compaction_message(request)?;
        // The size of what the summary replaces: the prompt's, which need not be written.
        let chars = source.prompt_len;
        let summary = summarize_walk(
            |f| source.for_each_item(|item| f(&item)),
            source.previous_summary,
            instructions(request).as_deref(),
            chars,
        );
        Ok(answer(summary))
    }
}

/// The assistant message that carries `summary`.
fn answer(summary: String) -> Message {
    let mut message = Message::assistant_text(summary);
    message.model = Some(MODEL.into());
    message.stop_reason = Some("end_turn".into());
    message
}

/// The error for a request the offline summarizer cannot answer.
fn refuse(why: &str) -> ProviderError {
    ProviderError::Unsupported {
        message: format!(
            "the offline summarizer only writes compaction summaries ({why}); configure a provider to chat"
        ),
    }
}

/// The one user message of a compaction request.
fn compaction_message(request: &Request) -> Result<&Message, ProviderError> {
    match request.messages.as_slice() {
        [message] if message.role == Role::User => Ok(message),
        _ => Err(refuse("a compaction request has exactly one user message")),
    }
}

/// The `/compact` instructions appended to the system prompt, when there are any.
fn instructions(request: &Request) -> Option<String> {
    request
        .system
        .split_once(INSTRUCTIONS_HEADING)
        .map(|(_, rest)| rest.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Summarizes a compaction request from its text (read back with `parse_request`).
///
/// # Errors
/// [`ProviderError::Unsupported`] when the request is not a compaction request.
pub(crate) fn summarize_request(request: &Request) -> Result<String, ProviderError> {
    let text = compaction_message(request)?.text();
    let parsed = parse_request(&text).map_err(|e| refuse(&e.to_string()))?;
    Ok(summarize(
        &parsed.items,
        parsed.previous_summary.as_deref(),
        instructions(request).as_deref(),
        text.len(),
    ))
}

/// The sections of a summary, in the order they are written. `requests`, `files` and `errors`
/// are only carried from a summary written before the ledger took them over.
#[derive(Debug, Default)]
struct Summary {
    goal: Option<String>,
    requests: Vec<String>,
    files: Vec<String>,
    identifiers: Vec<String>,
    tools: BTreeMap<String, u64>,
    errors: Vec<String>,
    focus: Vec<String>,
    state: Option<String>,
    earlier: Option<String>,
}

const H_GOAL: &str = "## Goal";
const H_REQUESTS: &str = "## Later requests";
const H_FILES: &str = "## Files touched";
const H_IDENTIFIERS: &str = "## Identifiers";
const H_TOOLS: &str = "## Tools used";
const H_ERRORS: &str = "## Errors";
const H_FOCUS: &str = "## Asked to keep";
const H_STATE: &str = "## Where the work left off";
const H_STATE_BEFORE: &str = "## Last state";
const H_EARLIER: &str = "## Earlier summary";
const OWN_MARK: &str = "<!-- panto offline summary -->";

/// Builds the summary of transcript `items`, merged with `previous`. `replaced_chars` is the
/// size of what the summary replaces (the request's user prompt): earlier summaries are carried
/// whole when the summary stays shorter than that, else their beginning and their end (where
/// a handoff lists the pending work) within what is left, at most 20,000 characters.
pub(crate) fn summarize(
    items: &[TranscriptItem],
    previous: Option<&str>,
    instructions: Option<&str>,
    replaced_chars: usize,
) -> String {
    summarize_walk(
        |f| items.iter().for_each(|item| f(&item.view())),
        previous,
        instructions,
        replaced_chars,
    )
}

/// [`summarize`] of the items that `walk` passes to the function it is given, in order, one
/// at a time (so that the items of a long prefix need not be held at once).
fn summarize_walk(
    walk: impl FnOnce(&mut dyn FnMut(&ItemView<'_>)),
    previous: Option<&str>,
    instructions: Option<&str>,
    replaced_chars: usize,
) -> String {
    let previous = previous.map(strip_ledger);
    let mut s = match previous {
        Some(p) if p.starts_with(OWN_MARK) => parse_own(p),
        Some(p) => Summary {
            earlier: Some(carried_over(p)),
            ..Summary::default()
        },
        None => Summary::default(),
    };
    let mut carried = Carried::from(s.earlier.as_deref());
    // Code spans with where they were last seen, to list the most recent first.
    let mut spans = Spans::default();
    let terms = instructions.map(key_terms).unwrap_or_default();
    let mut at = 0;
    walk(&mut |item| {
        at += 1;
        match item {
            ItemView::Text {
                role: Role::User,
                text,
            } => {
                collect_code_spans(text, at, &mut spans);
                if looks_like_summary(text) {
                    carry(&mut s.earlier, &mut carried, text);
                } else if is_request(text) && s.goal.is_none() && s.earlier.is_none() {
                    s.goal = Some(clip(&one_line(text), GOAL_CHARS));
                }
                focus(&terms, "user", text, &mut s.focus);
            }
            ItemView::Text {
                role: Role::Assistant,
                text,
            } => {
                collect_code_spans(text, at, &mut spans);
                if !text.trim().is_empty() {
                    s.state = Some(clip_block(text.trim(), STATE_CHARS));
                }
                focus(&terms, "assistant", text, &mut s.focus);
            }
            ItemView::ToolCall { name, .. } => match s.tools.get_mut(*name) {
                Some(n) => *n += 1,
                None => {
                    s.tools.insert((*name).to_owned(), 1);
                }
            },
            ItemView::ToolResult { text, .. } => {
                focus(&terms, "tool result", text, &mut s.focus);
            }
            // A summary inside the transcript: carry it like a previous summary.
            ItemView::Summary { text } => carry(&mut s.earlier, &mut carried, text),
            _ => {}
        }
    });
    let mut recent = spans.most_recent_first();
    // Identifiers from the previous summary come after the new ones.
    for old in std::mem::take(&mut s.identifiers) {
        push_unique(&mut recent, &old);
    }
    s.identifiers = recent;
    if let Some(earlier) = s.earlier.take() {
        // The room left once the other sections are written, with a margin for the heading.
        let others = render(&s, instructions).len();
        let room = replaced_chars
            .saturating_sub(others + 300)
            .min(EARLIER_CHARS);
        s.earlier = Some(clip_middle(&earlier, room));
    }
    render(&s, instructions)
}

/// Whether a user message is a summary someone pasted in (an earlier agent's handoff): long,
/// and either calling itself a summary near its start or organised under several headings.
fn looks_like_summary(text: &str) -> bool {
    if text.len() < PASTED_SUMMARY_CHARS {
        return false;
    }
    let head = cut::head(text, Budget::chars(300), Cut::Char).to_lowercase();
    let headings = text.lines().filter(|l| l.starts_with('#')).count();
    head.contains("summary") || head.contains("handoff") || headings >= 3
}

/// What tells whether an earlier summary is carried over already, without searching all of
/// them: the summaries carried, whole, and the length of the first one (the previous summary,
/// when there is one) at the start of the carried text.
#[derive(Default)]
struct Carried {
    first: usize,
    seen: HashSet<String>,
}

impl Carried {
    /// Starts from `earlier` as carried before the walk (the previous summary).
    fn from(earlier: Option<&str>) -> Carried {
        let mut carried = Carried::default();
        if let Some(e) = earlier {
            carried.first = e.len();
            carried.seen.insert(e.to_owned());
        }
        carried
    }
}

/// Adds an earlier summary to what is carried over, unless it is carried already: the same
/// text as one carried, or a part of the first one (a summary block that the previous summary
/// carried). It is not searched for inside every other one: with hundreds of summaries pasted
/// into a long conversation, that made the walk quadratic.
fn carry(earlier: &mut Option<String>, carried: &mut Carried, text: &str) {
    let text = carried_over(text);
    match earlier {
        Some(e) => {
            if carried.seen.contains(&text) || e[..carried.first].contains(text.as_str()) {
                return;
            }
            e.push_str("\n\n");
            e.push_str(&text);
            carried.seen.insert(text);
        }
        None => {
            carried.first = text.len();
            carried.seen.insert(text.clone());
            *earlier = Some(text);
        }
    }
}

fn render(s: &Summary, instructions: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(OWN_MARK);
    out.push('\n');
    let _ = writeln!(
        out,
        "Extractive summary written by panto's offline summarizer (no model was used): facts quoted from the conversation, not an interpretation."
    );
    section_text(&mut out, H_EARLIER, s.earlier.as_deref());
    section_text(&mut out, H_GOAL, s.goal.as_deref());
    section_list(&mut out, H_REQUESTS, tail(&s.requests, MAX_REQUESTS));
    section_list(
        &mut out,
        H_FILES,
        head(&s.files, MAX_FILES)
            .iter()
            .map(|f| format!("`{f}`"))
            .collect(),
    );
    let identifiers: Vec<String> = s
        .identifiers
        .iter()
        .filter(|i| !s.files.contains(i))
        .cloned()
        .collect();
    section_list(
        &mut out,
        H_IDENTIFIERS,
        head(&identifiers, MAX_IDENTIFIERS)
            .iter()
            .map(|f| format!("`{f}`"))
            .collect(),
    );
    let mut tools: Vec<(&String, &u64)> = s.tools.iter().collect();
    tools.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    section_list(
        &mut out,
        H_TOOLS,
        tools.iter().map(|(n, c)| format!("`{n}` ×{c}")).collect(),
    );
    section_list(&mut out, H_ERRORS, tail(&s.errors, MAX_ERRORS));
    if let Some(i) = instructions {
        let _ = writeln!(
            out,
            "\n{H_FOCUS}\nInstructions for this run: {}",
            clip(&one_line(i), 300)
        );
        for f in head(&s.focus, MAX_FOCUS) {
            let _ = writeln!(out, "- {f}");
        }
    } else if !s.focus.is_empty() {
        section_list(&mut out, H_FOCUS, head(&s.focus, MAX_FOCUS));
    }
    section_quote(&mut out, H_STATE, s.state.as_deref());
    out
}

fn section_text(out: &mut String, heading: &str, text: Option<&str>) {
    if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
        let _ = writeln!(out, "\n{heading}\n{t}");
    }
}

/// A section whose text is quoted word for word: every line marked `> `, so that the next
/// model (and the summary checks) read it as a quote of the transcript, not as a summary.
fn section_quote(out: &mut String, heading: &str, text: Option<&str>) {
    // A section is written only with something in it.
    if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
        let _ = writeln!(out, "\n{heading}");
        for line in t.lines() {
            let _ = writeln!(out, "> {line}");
        }
    }
}

fn section_list(out: &mut String, heading: &str, items: Vec<String>) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}");
    for i in items {
        let _ = writeln!(out, "- {i}");
    }
}

/// The last `n` items, with a note of how many were left out.
fn tail(items: &[String], n: usize) -> Vec<String> {
    if items.len() <= n {
        return items.to_vec();
    }
    let mut out = vec![format!("({} earlier items left out)", items.len() - n)];
    out.extend_from_slice(&items[items.len() - n..]);
    out
}

/// The first `n` items, with a note of how many were left out.
fn head(items: &[String], n: usize) -> Vec<String> {
    if items.len() <= n {
        return items.to_vec();
    }
    let mut out = items[..n].to_vec();
    out.push(format!("({} more left out)", items.len() - n));
    out
}

/// Reads back a summary this module wrote, to merge it with new material.
fn parse_own(text: &str) -> Summary {
    let mut s = Summary::default();
    let mut heading = "";
    let mut body: Vec<&str> = Vec::new();
    let flush = |heading: &str, body: &mut Vec<&str>, s: &mut Summary| {
        let items: Vec<String> = body
            .iter()
            .filter_map(|l| l.strip_prefix("- "))
            .filter(|l| !l.starts_with('(') || !l.ends_with(" left out)"))
            .map(str::to_owned)
            .collect();
        let text = body.join("\n").trim().to_owned();
        match heading {
            H_GOAL if !text.is_empty() => s.goal = Some(text),
            H_REQUESTS => s.requests = items,
            H_FILES => s.files = items.iter().map(|i| unquote(i)).collect(),
            H_IDENTIFIERS => s.identifiers = items.iter().map(|i| unquote(i)).collect(),
            H_TOOLS => {
                for i in items {
                    if let Some((name, count)) = i.rsplit_once(" ×")
                        && let Ok(n) = count.parse::<u64>()
                    {
                        *s.tools.entry(unquote(name)).or_insert(0) += n;
                    }
                }
            }
            H_ERRORS => s.errors = items,
            H_EARLIER if !text.is_empty() => s.earlier = Some(text),
            _ => {}
        }
        body.clear();
    };
    for line in text.lines() {
        if line.starts_with("## ") {
            flush(heading, &mut body, &mut s);
            heading = match line {
                H_GOAL | H_REQUESTS | H_FILES | H_IDENTIFIERS | H_TOOLS | H_ERRORS | H_FOCUS
                | H_STATE | H_STATE_BEFORE | H_EARLIER => line,
                _ => "",
            };
        } else if !heading.is_empty() {
            body.push(line);
        }
    }
    flush(heading, &mut body, &mut s);
    s
}

fn unquote(s: &str) -> String {
    s.trim_matches('`').to_owned()
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !item.is_empty() && !list.iter().any(|x| x == item) {
        list.push(item.to_owned());
    }
}

/// A summary written by someone else, carried over whole (bounded), with its headings moved one
/// level down so they cannot be mistaken for this summary's own sections.
fn carried_over(text: &str) -> String {
    let demoted: Vec<String> = text
        .trim()
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("#{l}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    demoted.join("\n")
}

/// At most about `max` characters of `text`: whole, or its first two fifths and its last three
/// fifths cut at line ends (at words when a line end is far), with a line saying how much was
/// left out between them (the end of a handoff is where the pending work is).
fn clip_middle(text: &str, max: usize) -> String {
    if Budget::chars(max).fits(text) {
        return text.to_owned();
    }
    let head_chars = max * 2 / 5;
    let tail_chars = max.saturating_sub(head_chars + 60);
    let kept = ends(
        text,
        Budget::chars(head_chars),
        Budget::chars(tail_chars),
        Cut::Nearest,
    );
    let left_out = kept.middle.chars().count();
    kept.joined(&format!(
        "… ({left_out} characters of the earlier summary left out) …"
    ))
}

/// Like [`clip`], but cuts at the end of a line (or a word) when one is near.
fn clip_block(text: &str, max: usize) -> String {
    if Budget::chars(max).fits(text) {
        return text.to_owned();
    }
    let kept = cut::head(text, Budget::chars(max.saturating_sub(1)), Cut::Nearest);
    format!("{}…", kept.trim_end())
}

/// The distinct code spans of a walk, each with where it was last seen: the item's position
/// and, to order the spans of one item as they appear, the order of its first sighting there.
/// One entry per distinct span, however often it recurs (a long session names the same few
/// identifiers thousands of times).
#[derive(Default)]
pub(crate) struct Spans {
    seen: HashMap<String, (usize, usize)>,
    sightings: usize,
}

impl Spans {
    /// Records `span`, seen in item `at` (items come in order).
    pub(crate) fn push(&mut self, span: &str, at: usize) {
        self.sightings += 1;
        match self.seen.get_mut(span) {
            // A later item moves it; a repeat within the same item keeps the first sighting.
            Some(last) if last.0 < at => *last = (at, self.sightings),
            Some(_) => {}
            None => {
                self.seen.insert(span.to_owned(), (at, self.sightings));
            }
        }
    }

    /// The spans, the most recently seen first (within one item, in the order they appear).
    pub(crate) fn most_recent_first(self) -> Vec<String> {
        let mut spans: Vec<(String, (usize, usize))> = self.seen.into_iter().collect();
        spans.sort_unstable_by_key(|(_, (at, sighting))| (std::cmp::Reverse(*at), *sighting));
        spans.into_iter().map(|(span, _)| span).collect()
    }
}

/// Inline code spans (`like_this`) that look like identifiers, paths or commands.
fn collect_code_spans(text: &str, at: usize, out: &mut Spans) {
    let mut parts = text.split('`');
    parts.next();
    while let Some(span) = parts.next() {
        let span = span.trim();
        let word_like = span.len() >= 2
            && span.len() <= 60
            && !span.contains(char::is_whitespace)
            && span.chars().any(char::is_alphanumeric);
        if word_like {
            out.push(span, at);
        }
        // Skip the text between this span and the next.
        if parts.next().is_none() {
            break;
        }
    }
}

/// The words of the instructions worth searching for: longer words and anything with a digit
/// or a symbol (like `#3`), lowercase.
fn key_terms(instructions: &str) -> Vec<String> {
    const COMMON: &[&str] = &[
        "about",
        "after",
        "again",
        "all",
        "and",
        "are",
        "be",
        "before",
        "being",
        "careful",
        "carefully",
        "details",
        "every",
        "for",
        "from",
        "full",
        "have",
        "into",
        "keep",
        "make",
        "more",
        "most",
        "our",
        "please",
        "preserve",
        "should",
        "sure",
        "that",
        "the",
        "their",
        "them",
        "then",
        "this",
        "those",
        "understanding",
        "what",
        "when",
        "which",
        "with",
        "you",
        "your",
        "focus",
    ];
    let mut terms = Vec::new();
    for raw in instructions.split(|c: char| c.is_whitespace() || ",;:()\"'".contains(c)) {
        let w = raw
            .trim_matches(|c: char| c == '.' || c == '!' || c == '?')
            .to_lowercase();
        let special = w.chars().any(|c| c.is_ascii_digit() || "#_/.-".contains(c));
        if (w.chars().count() >= 4 || (special && w.len() >= 2)) && !COMMON.contains(&w.as_str()) {
            push_unique(&mut terms, &w);
        }
    }
    terms
}

/// Lines of `text` that mention one of `terms`, quoted with where they came from.
fn focus(terms: &[String], from: &str, text: &str, out: &mut Vec<String>) {
    if terms.is_empty() || out.len() >= MAX_FOCUS * 2 {
        return;
    }
    for line in text.lines() {
        let lower = line.to_lowercase();
        if terms.iter().any(|t| lower.contains(t.as_str())) {
            let quoted = format!("{from}: {}", clip(&one_line(line), FOCUS_CHARS));
            push_unique(out, &quoted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{clip_block, clip_middle};

    #[test]
    fn a_long_block_is_cut_at_a_line_end_with_an_ellipsis() {
        let text = format!("{}\n{}", "first line ".repeat(5).trim_end(), "x".repeat(80));
        assert_eq!(clip_block("short", 10), "short");
        assert_eq!(
            clip_block(&text, 70),
            format!("{}…", "first line ".repeat(5).trim_end())
        );
        // No line end near: a word end.
        assert_eq!(clip_block("one two three four", 12), "one two…");
    }

    #[test]
    fn a_long_summary_keeps_its_first_and_last_lines_and_counts_the_rest() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:03}")).collect();
        let text = lines.join("\n");
        let clipped = clip_middle(&text, 400);
        assert!(clipped.chars().count() <= 400, "{clipped}");
        assert!(clipped.starts_with("line 000\n"));
        assert!(clipped.ends_with("\nline 099"));
        let marker = clipped
            .lines()
            .find(|l| l.starts_with('…'))
            .expect("a marker line");
        let left_out: usize = marker[marker.find('(').unwrap() + 1..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let kept = clipped.len() - marker.len() - 1;
        assert_eq!(kept + left_out, text.len());
        assert_eq!(clip_middle("short", 400), "short");
    }
}

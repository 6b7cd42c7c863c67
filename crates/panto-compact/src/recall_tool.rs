//! The recall tool: what an agent offers its model so that the model can reach what a
//! compaction summarized. A thin adapter over [`Store::recall`] and [`Store::fetch`]: the same
//! ranking, the same ids, a bounded result.
//!
//! ```
//! let spec = panto_compact::recall_tool_spec();
//! assert_eq!(spec.name, panto_compact::RECALL_TOOL);
//! assert!(spec.input_schema["properties"]["query"].is_object());
//! ```

use std::fmt::Write as _;

use panto_model::{ContentBlock, Item, ItemKind, Role};
use panto_provider::ToolSpec;
use panto_store::{Fetched, Hit, RecallQuery, Recalled, Store, passage};
use panto_transcript::cut::{Budget, Cut, head};
use serde_json::{Value, json};

/// The recall tool's name.
pub const RECALL_TOOL: &str = "recall";

/// The most characters the tool's answer holds.
pub const RECALL_ANSWER_CHARS: usize = 6_000;

/// The hits a search gives when the model does not say.
const DEFAULT_HITS: usize = 5;

/// The most hits the model may ask for.
const MAX_HITS: u64 = 10;

/// The least characters a hit's passage gets, however many hits share the room.
const SNIPPET_FLOOR: usize = 240;

/// Neighbours on each side of a fetched item.
const NEIGHBOURS: usize = 1;

/// The most characters of the items shown beside one hit ([`beside`]).
const BESIDE_CHARS: usize = 400;

/// The recall tool's name, description and JSON schema, which every adapter turns into its
/// protocol's tool shape.
pub fn recall_tool_spec() -> ToolSpec {
    ToolSpec::new(
        RECALL_TOOL,
        "Search the earlier part of this conversation that was summarized to save room: exact \
         tool output, errors, commit ids, paths, numbers and what was said. Give `query` (a few \
         words, or an exact identifier such as a SHA, a path:line or quoted error text) to get \
         the best passages, each with an id; give `id` to read that item whole with its \
         neighbours.",
        json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words or exact identifiers to search for."
                },
                "id": {
                    "type": "string",
                    "description": "The id of a passage from an earlier recall, to read it whole."
                },
                "limit": {
                    "type": "integer",
                    "description": "How many passages to return (1 to 10, default 5)."
                }
            }
        }),
    )
}

/// The answer to one call of the recall tool: the tool result's text, whether it is an error,
/// and one line that says what was done, for a person watching.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecallAnswer {
    /// The tool result's text, at most [`RECALL_ANSWER_CHARS`] characters.
    pub text: String,
    /// Whether the call failed (bad arguments, a store that could not answer).
    pub is_error: bool,
    /// One line for a person: `recalled 3 passages for 'migration error'`.
    pub line: String,
}

impl RecallAnswer {
    pub(crate) fn error(text: String) -> RecallAnswer {
        RecallAnswer {
            line: format!("recall failed: {text}"),
            text,
            is_error: true,
        }
    }

    /// The tool result block answering the call `call_id`.
    pub fn to_block(&self, call_id: &str) -> ContentBlock {
        ContentBlock::tool_result(call_id, self.text.clone(), self.is_error)
    }
}

/// What one call of the recall tool asks, read from its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecallCall {
    /// Search: the query, as a recall asks it.
    Search(RecallQuery),
    /// Fetch the item with this id, with [`RecallCall::NEIGHBOURS`] entries each side.
    Fetch(String),
}

impl RecallCall {
    /// Entries each side of a fetched item.
    pub const NEIGHBOURS: usize = NEIGHBOURS;

    /// Reads a call's arguments.
    ///
    /// # Errors
    /// The error answer for the model when they ask for nothing.
    pub fn parse(input: &Value) -> Result<RecallCall, RecallAnswer> {
        let text = |key: &str| {
            input
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        if let Some(id) = text("id") {
            return Ok(RecallCall::Fetch(id.to_owned()));
        }
        let Some(query) = text("query") else {
            return Err(RecallAnswer::error(
                "give `query` (words to search for) or `id`".to_owned(),
            ));
        };
        let limit = input
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_HITS, |n| n.clamp(1, MAX_HITS) as usize);
        Ok(RecallCall::Search(
            RecallQuery::new(query).with_limit(limit),
        ))
    }
}

/// Answers a call of the recall tool whose arguments are `input`, from `session` of `store`
/// (the `Driver` answers from the index it keeps: [`crate::Driver::answer_recall`]).
pub async fn answer_recall<S: Store + ?Sized>(
    store: &S,
    session: &str,
    input: &Value,
) -> RecallAnswer {
    match RecallCall::parse(input) {
        Err(answer) => answer,
        Ok(RecallCall::Fetch(id)) => match store.fetch(session, &id, NEIGHBOURS).await {
            Ok(fetched) => fetch_answer(&id, &fetched),
            Err(e) => RecallAnswer::error(e.to_string()),
        },
        Ok(RecallCall::Search(query)) => match store.recall(session, &query).await {
            Ok(found) => {
                let mut around = Vec::with_capacity(found.hits.len());
                for hit in &found.hits {
                    let (id, context) = around_of(hit);
                    // What is beside a hit only helps: a fetch that fails shows none.
                    around.push(store.fetch(session, &id, context).await.unwrap_or_default());
                }
                search_answer(&query.text, &found, &around)
            }
            Err(e) => RecallAnswer::error(e.to_string()),
        },
    }
}

/// What to fetch for the items [`beside`] a hit, and with how many entries each side: a tool
/// call's result by the call id (it may come several entries later, after the results of the
/// calls made with it), else the hit with one entry each side.
pub fn around_of(hit: &Hit) -> (String, usize) {
    match (&hit.kind, &hit.call) {
        (ItemKind::ToolCall, Some(call)) => (call.clone(), 0),
        _ => (hit.id.clone(), NEIGHBOURS),
    }
}

/// The items of `around` (what [`around_of`] fetched) that say what `hit` was about: for a
/// tool result, the call that asked for it (the command); for a tool call, its result; for
/// the assistant's text, the calls made in its message (or the next one's, when each of an
/// assistant's blocks is an entry of its own).
pub fn beside<'a>(hit: &Hit, around: &'a Fetched) -> Vec<&'a Item> {
    let items = around
        .items
        .iter()
        .filter(|i| i.id != hit.id || i.kind != hit.kind);
    match hit.kind {
        ItemKind::ToolResult | ItemKind::ToolCall => {
            let wanted = if hit.kind == ItemKind::ToolResult {
                ItemKind::ToolCall
            } else {
                ItemKind::ToolResult
            };
            items
                .filter(|i| i.kind == wanted && i.call.is_some() && i.call == hit.call)
                .take(1)
                .collect()
        }
        ItemKind::Text | ItemKind::Thinking if hit.role == Some(Role::Assistant) => {
            let calls = |position: u64| -> Vec<&'a Item> {
                around
                    .items
                    .iter()
                    .filter(|i| i.kind == ItemKind::ToolCall && i.position == position)
                    .collect()
            };
            let same = calls(hit.position);
            if same.is_empty() {
                let next = around
                    .items
                    .iter()
                    .find(|i| i.position > hit.position)
                    .filter(|i| i.role == Some(Role::Assistant));
                next.map(|i| calls(i.position)).unwrap_or_default()
            } else {
                same
            }
        }
        _ => Vec::new(),
    }
}

/// An item's text as the tool shows it: a tool call's arguments one to a line (`command: git
/// log -3`), strings unquoted, rather than the call's JSON, where a command's quotes and line
/// breaks are escaped; any other item's text as it is.
pub fn shown_text(kind: ItemKind, text: &str) -> String {
    if kind != ItemKind::ToolCall {
        return text.to_owned();
    }
    let Some((name, args)) = text.split_once(' ') else {
        return text.to_owned();
    };
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(args) else {
        return text.to_owned();
    };
    let mut out = name.to_owned();
    for (key, value) in &args {
        let _ = match value {
            Value::String(s) => write!(out, "\n{key}: {s}"),
            other => write!(out, "\n{key}: {other}"),
        };
    }
    out
}

/// The answer listing `found`'s hits, each with the items `around` it (`around[i]` is what
/// [`around_of`] fetched for hit `i`; missing or empty when nothing was) that [`beside`]
/// chooses.
///
/// The room of [`RECALL_ANSWER_CHARS`] is shared so that no hit gets more than it can use: a
/// hit whose text (and what is beside it) is short takes only that, and what it leaves goes to
/// the others, whose passages ([`passage`]) grow with it.
pub fn search_answer(query: &str, found: &Recalled, around: &[Fetched]) -> RecallAnswer {
    let n = found.hits.len();
    let line = format!("recalled {n} {} for '{query}'", passages(n));
    if n == 0 {
        return RecallAnswer {
            text: format!("No earlier passage matches {query:?}."),
            is_error: false,
            line,
        };
    }
    let mut text = format!(
        "{n} {} for {query:?}, best first. Call {RECALL_TOOL} with an `id` to read one whole.\n",
        passages(n)
    );
    let none = Fetched::default();
    let shown: Vec<Shown> = found
        .hits
        .iter()
        .enumerate()
        .map(|(i, hit)| Shown::of(hit, around.get(i).unwrap_or(&none)))
        .collect();
    // What each hit needs, and the room each gets: the least needs first, each at most an
    // equal share of what is left.
    let needs: Vec<usize> = shown.iter().map(Shown::needs).collect();
    let mut rooms = vec![0; n];
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| needs[i]);
    let mut left = RECALL_ANSWER_CHARS.saturating_sub(text.len());
    for (k, &i) in order.iter().enumerate() {
        rooms[i] = needs[i].min(left / (n - k));
        left -= rooms[i];
    }
    for (shown, room) in shown.iter().zip(rooms) {
        let _ = writeln!(text, "\n{}", shown.render(query, room));
    }
    RecallAnswer {
        text: cut(&text, RECALL_ANSWER_CHARS),
        is_error: false,
        line,
    }
}

/// One hit as the answer shows it: its heading, its text, the short items beside it (calls),
/// and, for a tool call, its result.
struct Shown {
    head: String,
    body: String,
    beside: Vec<String>,
    /// A call's result: its heading and text, shown as a passage of its own.
    result: Option<(String, String)>,
}

impl Shown {
    fn of(hit: &Hit, around: &Fetched) -> Shown {
        let mut beside_items = Vec::new();
        let mut result = None;
        for item in beside(hit, around) {
            let what = describe(item.kind, item.role, item.tool.as_deref(), item.error);
            let head = format!("[{}] {what}:", item.id);
            if item.kind == ItemKind::ToolResult && hit.kind == ItemKind::ToolCall {
                result = Some((head, item.text.trim().to_owned()));
            } else {
                let text = shown_text(item.kind, &item.text);
                beside_items.push(format!("{head} {}", text.trim()));
            }
        }
        Shown {
            head: hit_heading(hit),
            body: shown_text(hit.kind, &hit.text),
            beside: beside_items,
            result,
        }
    }

    fn beside_needs(&self) -> usize {
        self.beside.iter().map(|b| b.chars().count() + 1).sum()
    }

    fn result_needs(&self) -> usize {
        self.result
            .as_ref()
            .map_or(0, |(head, text)| head.len() + 2 + text.chars().count())
    }

    /// The characters it takes to show whole (what is beside it at most [`BESIDE_CHARS`]).
    fn needs(&self) -> usize {
        self.head.len()
            + 4
            + self.body.chars().count()
            + self.beside_needs().min(BESIDE_CHARS)
            + self.result_needs()
    }

    /// The hit in about `room` characters: its heading; the passage of its text around the
    /// match as large as the room allows (a hit's 240-character snippet misses a third of the
    /// answers its text holds in the needle exam, docs/compaction.md, and the model should
    /// not need a fetch for them); a call's result as a passage of its own, which shares the
    /// room with the call; what is beside it, each item an equal share of what it needs up to
    /// [`BESIDE_CHARS`] (a third of the room when the hit's own text needs the rest).
    fn render(&self, query: &str, room: usize) -> String {
        let fixed = self.head.len() + 4;
        let spare = room.saturating_sub(fixed + self.body.chars().count() + self.result_needs());
        let share = self
            .beside_needs()
            .min(BESIDE_CHARS)
            .min(spare.max(room / 3))
            / self.beside.len().max(1);
        let beside: String = self
            .beside
            .iter()
            .map(|b| format!("\n{}", cut(b, share.saturating_sub(1))))
            .collect();
        let left = room.saturating_sub(fixed + beside.chars().count());
        let (body_room, result) = match &self.result {
            None => (left, String::new()),
            Some((head, text)) => {
                let body = self.body.chars().count();
                let body_room = body.min((left / 2).max(left.saturating_sub(self.result_needs())));
                let room = left.saturating_sub(body_room + head.len() + 2);
                let shown = passage(text, query, room.max(SNIPPET_FLOOR));
                (body_room, format!("\n{head}\n{}", cut(&shown, room + 2)))
            }
        };
        let shown = passage(&self.body, query, body_room.max(SNIPPET_FLOOR));
        format!(
            "{}\n{}{result}{beside}",
            self.head,
            cut(&shown, body_room + 2)
        )
    }
}

fn passages(n: usize) -> &'static str {
    if n == 1 { "passage" } else { "passages" }
}

/// `[id] what it is; where it is`.
fn hit_heading(hit: &Hit) -> String {
    let mut out = format!(
        "[{}] {}",
        hit.id,
        describe(hit.kind, hit.role, hit.tool.as_deref(), hit.error)
    );
    let _ = write!(out, "; entry {} at position {}", hit.entry, hit.position);
    if let Some(by) = &hit.summarized_by {
        let _ = write!(out, ", summarized by {by}");
    }
    out
}

/// What an item is, in a few words: `tool result of bash, failed`.
pub fn describe(kind: ItemKind, role: Option<Role>, tool: Option<&str>, error: bool) -> String {
    let who = role.map_or("", Role::as_str);
    let tool = tool.map(|t| format!(" of {t}")).unwrap_or_default();
    match kind {
        ItemKind::ToolCall => format!("tool call{tool}"),
        ItemKind::ToolResult if error => format!("tool result{tool}, failed"),
        ItemKind::ToolResult => format!("tool result{tool}"),
        ItemKind::Thinking => format!("{who} thinking"),
        ItemKind::Summary => "summary of a compaction".to_owned(),
        ItemKind::Ledger => "ledger of a compaction".to_owned(),
        _ => who.to_owned(),
    }
}

/// The answer giving the fetched items, the asked ones with most of the room.
pub fn fetch_answer(id: &str, fetched: &Fetched) -> RecallAnswer {
    let asked = |i: &Item| fetched.asked.contains(&i.id);
    let shares: usize = fetched
        .items
        .iter()
        .map(|i| if asked(i) { 4 } else { 1 })
        .sum();
    let mut text = String::new();
    for item in &fetched.items {
        let share = if asked(item) { 4 } else { 1 };
        let room = RECALL_ANSWER_CHARS * share / shares.max(1);
        let mark = if asked(item) { " (asked)" } else { "" };
        let head = format!(
            "[{}] {}{mark}",
            item.id,
            describe(item.kind, item.role, item.tool.as_deref(), item.error)
        );
        let _ = writeln!(
            text,
            "{head}\n{}\n",
            cut(
                &shown_text(item.kind, &item.text),
                room.saturating_sub(head.len() + 2)
            )
        );
    }
    let n = fetched.items.len().saturating_sub(fetched.asked.len());
    RecallAnswer {
        text: cut(text.trim_end(), RECALL_ANSWER_CHARS),
        is_error: false,
        line: format!("fetched {id} with {n} neighbouring items"),
    }
}

/// `text` cut to at most `max` characters, saying how many were left out.
fn cut(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    // The note counts what it leaves out, its own room included: its length depends on that
    // count's digits, so it is settled in a step or two.
    let mut left = total - max;
    let note = loop {
        let note = format!(" … ({left} more characters)");
        let keep = max.saturating_sub(note.chars().count());
        if total - keep <= left {
            break note;
        }
        left = total - keep;
    };
    let keep = max.saturating_sub(note.chars().count());
    let mut out = head(text, Budget::chars(keep), Cut::Char).to_owned();
    out.push_str(&note);
    out
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn a_cut_answer_says_how_many_characters_it_left_out() {
        assert_eq!(cut("short", 10), "short");
        let text = "é".repeat(1_000);
        let out = cut(&text, 100);
        assert!(out.chars().count() <= 100, "{out}");
        let kept = out.chars().take_while(|&c| c == 'é').count();
        assert!(
            out.ends_with(&format!(" … ({} more characters)", 1_000 - kept)),
            "{out}"
        );
    }
}

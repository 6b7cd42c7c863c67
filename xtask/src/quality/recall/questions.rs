//! The questions of `cargo xtask quality --recall`, made mechanically from the summarized part
//! of a session: the needles of every text block ([`needles`]), each an exact string with a
//! query of the words around it, and the rule that says whether a text answers one.
//!
//! The blocks are a user's or assistant's text, each string argument of a tool call, and each
//! tool result, successful or failed ([`Source`]); thinking is left out. A needle becomes a
//! question when its answer is not in the kept suffix (a question the kept turns answer tests
//! nothing) and at least [`MIN_QUERY_WORDS`] words can be taken from around it, none of them
//! part of the answer ([`query_words`]). Per category at most `cap` questions are kept, spread
//! evenly over the answers in the order they first appear ([`questions`]), so the exam is the
//! same for the same session and keep budget.
//!
//! A text answers a question when it holds the answer ([`Question::found_in`]): whitespace
//! runs count as one space on both sides, the answer must not continue a word at either end,
//! and a key with its value (numbers, configuration values) may be written with any quotes and
//! `:` or `=` between them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use panto_model::{ContentBlock, Message, Role};
use serde_json::Value;

use super::needles::{Category, Found, Source, WORD, needles, word_char};

/// One question of the exam.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Question {
    pub(crate) category: Category,
    /// The exact string that answers it (for a key and value, as first written).
    pub(crate) answer: String,
    /// For numbers and configuration values: the key and the value, matched with any quotes
    /// and `:` or `=` between them.
    pub(crate) pair: Option<(String, String)>,
    /// Words from around the answer, nearest first, none of them part of the answer.
    pub(crate) query: Vec<String>,
    /// Every kind of block the answer was found in.
    pub(crate) sources: BTreeSet<Source>,
    /// The id of the message it was first found in, when the message has one.
    pub(crate) message: Option<String>,
}

impl Question {
    /// Whether `text` holds the answer.
    pub(crate) fn found_in(&self, text: &Haystack) -> bool {
        match &self.pair {
            Some((key, value)) => text.holds_pair(key, value),
            None => text.holds(&self.answer),
        }
    }

    /// Whether the answer was found only in the output of tool calls that succeeded.
    pub(crate) fn only_in_output(&self) -> bool {
        self.sources.len() == 1 && self.sources.contains(&Source::Output)
    }
}

/// The least number of query words a question needs.
pub(crate) const MIN_QUERY_WORDS: usize = 3;
/// The most query words a question keeps.
const MAX_QUERY_WORDS: usize = 6;
/// How far around a needle (in bytes) its query words are looked for.
const NEAR: usize = 300;

/// A text searched for answers, with its whitespace runs made single spaces.
pub(crate) struct Haystack {
    text: String,
}

impl Haystack {
    pub(crate) fn new(text: &str) -> Haystack {
        Haystack {
            text: squeeze(text),
        }
    }

    /// Whether the text holds `needle` (squeezed), not continuing a word at either end.
    pub(crate) fn holds(&self, needle: &str) -> bool {
        let needle = squeeze(needle);
        self.bounded(&needle).next().is_some()
    }

    /// Whether the text holds `key`, then at most two quotes, a `:` or `=` with spaces and
    /// quotes around it, then `value`.
    pub(crate) fn holds_pair(&self, key: &str, value: &str) -> bool {
        let value = squeeze(value);
        self.bounded(key).any(|end| {
            let rest = self.text[end..].trim_start_matches(['"', '\'']);
            let Some(rest) = rest.trim_start().strip_prefix([':', '=']) else {
                return false;
            };
            let rest = rest.trim_start().trim_start_matches(['"', '\'']);
            rest.starts_with(&value) && !continues(rest[value.len()..].chars().next(), &value)
        })
    }

    /// The ends of the occurrences of `needle` that do not continue a word.
    fn bounded<'a>(&'a self, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.text
            .match_indices(needle)
            .filter(move |(at, _)| {
                let before = self.text[..*at].chars().next_back();
                let after = self.text[at + needle.len()..].chars().next();
                !continues_back(before, needle) && !continues(after, needle)
            })
            .map(move |(at, _)| at + needle.len())
    }
}

/// Whether `next` continues a word that `needle` ends in.
fn continues(next: Option<char>, needle: &str) -> bool {
    needle.chars().next_back().is_some_and(word_char) && next.is_some_and(word_char)
}

/// Whether `before` continues a word that `needle` starts with.
fn continues_back(before: Option<char>, needle: &str) -> bool {
    needle.chars().next().is_some_and(word_char) && before.is_some_and(word_char)
}

/// `text` with every run of whitespace made one space.
fn squeeze(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = true;
        } else {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
    }
    out
}

/// Words too common to say where an answer is.
const STOP: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "from", "are", "was", "were", "not", "but", "you",
    "your", "have", "has", "had", "can", "will", "would", "should", "could", "its", "it's", "into",
    "then", "than", "there", "their", "they", "them", "what", "when", "which", "where", "who",
    "how", "all", "any", "each", "some", "one", "also", "just", "now", "out", "use", "using",
    "let", "see", "need", "like", "only", "our", "more", "most", "other", "true", "false", "null",
    "const", "return", "function", "import", "export", "new", "var",
];

/// Up to [`MAX_QUERY_WORDS`] words near `start..end` in `text`, nearest first, with `first`
/// (a key) before them and words of `more` after them; none holds or is held by `hidden` (the
/// answer, or a key's value), and none is a common word.
pub(crate) fn query_words(
    text: &str,
    start: usize,
    end: usize,
    hidden: &str,
    first: &[&str],
    more: &[&str],
) -> Vec<String> {
    let answer = hidden.to_lowercase();
    let from = floor(text, start.saturating_sub(NEAR));
    let to = ceil(text, (end + NEAR).min(text.len()));
    let mut near: Vec<(usize, String)> = WORD
        .find_iter(&text[from..to])
        .filter(|m| from + m.end() <= start || from + m.start() >= end)
        .map(|m| {
            let (at, to) = (from + m.start(), from + m.end());
            let distance = if to <= start { start - to } else { at - end };
            (distance, m.as_str().to_lowercase())
        })
        .collect();
    near.sort_by_key(|(d, _)| *d);
    let mut words: Vec<String> = Vec::new();
    let candidates = first
        .iter()
        .map(|w| w.to_lowercase())
        .chain(near.into_iter().map(|(_, w)| w))
        .chain(
            more.iter()
                .flat_map(|t| WORD.find_iter(t))
                .map(|m| m.as_str().to_lowercase()),
        );
    for w in candidates {
        if words.len() == MAX_QUERY_WORDS {
            break;
        }
        let fine = !STOP.contains(&w.as_str())
            && !answer.contains(&w)
            && !w.contains(&answer)
            && !words.contains(&w);
        if fine {
            words.push(w);
        }
    }
    words
}

fn floor(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// One text block of the summarized part: where it came from, its text, its message id, and
/// more text to take query words from (for a tool result, the string arguments of its call;
/// for a call's argument, its message's text).
pub(crate) struct Block {
    pub(crate) source: Source,
    pub(crate) text: String,
    pub(crate) message: Option<String>,
    pub(crate) call: Vec<String>,
    /// Whether it is a call's shell command (its `command` or `cmd` argument).
    pub(crate) command: bool,
}

/// The text blocks of `messages`, oldest first: a tool call's string arguments are a block
/// each; thinking, images and compaction blocks are left out.
pub(crate) fn blocks(messages: &[Message]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut calls: HashMap<String, Vec<String>> = HashMap::new();
    for m in messages {
        let id = m.id.as_ref().map(ToString::to_string);
        let block = |source, text: String, call: Vec<String>| Block {
            source,
            text,
            message: id.clone(),
            call,
            command: false,
        };
        for b in &m.content {
            match b {
                ContentBlock::Text(t) => {
                    let source = match m.role {
                        Role::User => Source::User,
                        Role::Assistant => Source::Assistant,
                    };
                    out.push(block(source, t.text.clone(), Vec::new()));
                }
                ContentBlock::ToolUse(u) => {
                    let input = u.input.to_value();
                    let strings = string_leaves(&input);
                    let command = ["command", "cmd"]
                        .iter()
                        .find_map(|k| input.get(*k).and_then(Value::as_str));
                    // A call's words are its message's text ("Let me run the tests").
                    let said: Vec<String> = m
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.clone()),
                            _ => None,
                        })
                        .collect();
                    for s in &strings {
                        let mut b = block(Source::Call, s.clone(), said.clone());
                        b.command = command == Some(s.as_str());
                        out.push(b);
                    }
                    calls.insert(u.id.clone(), strings);
                }
                ContentBlock::ToolResult(r) => {
                    let source = if r.failed() {
                        Source::Failure
                    } else {
                        Source::Output
                    };
                    let call = calls.get(&r.tool_use_id).cloned().unwrap_or_default();
                    out.push(block(source, r.content.text(), call));
                }
                _ => {}
            }
        }
    }
    out
}

/// The strings inside a JSON value, in order.
fn string_leaves(value: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut out);
    out
}

/// What tells two needles apart: the category and the answer, or the key and value.
type Key = (Category, String, Option<(String, String)>);

/// How the questions of a category are chosen among its needles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Draw {
    /// Evenly spaced over the needles' occurrences (one per block), in the order of the
    /// conversation: an answer that blocks mention k times is k times as likely to be asked.
    Occurrences,
    /// Evenly spaced over the distinct answers, in the order they first appear.
    Answers,
}

/// One occurrence of a needle: which needle, and where.
struct Occurrence {
    needle: usize,
    block: usize,
    found: Found,
}

/// The questions of the summarized `messages`, none answered by `kept` (the kept suffix), at
/// most `cap` per category, drawn as `draw` says, in the order of the conversation.
pub(crate) fn questions(
    messages: &[Message],
    kept: &Haystack,
    cap: usize,
    draw: Draw,
) -> Vec<Question> {
    let blocks = blocks(messages);
    let mut keys: HashMap<Key, usize> = HashMap::new();
    let mut seen: Vec<Seen> = Vec::new();
    let mut occurrences: BTreeMap<Category, Vec<Occurrence>> = BTreeMap::new();
    for (b, block) in blocks.iter().enumerate() {
        let mut in_block: BTreeSet<usize> = BTreeSet::new();
        for f in needles(&block.text, block.source, block.command) {
            let key: Key = match &f.pair {
                Some(pair) => (f.category, String::new(), Some(pair.clone())),
                None => (f.category, f.answer.clone(), None),
            };
            let needle = *keys.entry(key).or_insert_with(|| {
                seen.push(Seen {
                    sources: BTreeSet::new(),
                    message: block.message.clone(),
                    kept: probe(&f).found_in(kept),
                    listed: false,
                });
                seen.len() - 1
            });
            let s = &mut seen[needle];
            s.sources.insert(block.source);
            if s.kept || !in_block.insert(needle) || (draw == Draw::Answers && s.listed) {
                continue;
            }
            s.listed = true;
            occurrences.entry(f.category).or_default().push(Occurrence {
                needle,
                block: b,
                found: f,
            });
        }
    }
    let mut chosen: Vec<(usize, usize, Question)> = Vec::new();
    for list in occurrences.values() {
        for (at, o) in pick(list, cap, &blocks) {
            let s = &seen[o.needle];
            let question = Question {
                category: o.found.category,
                answer: o.found.answer.clone(),
                pair: o.found.pair.clone(),
                query: at,
                sources: s.sources.clone(),
                message: s.message.clone(),
            };
            chosen.push((o.block, o.found.start, question));
        }
    }
    chosen.sort_by_key(|(b, start, q)| (*b, *start, q.category));
    chosen.into_iter().map(|(_, _, q)| q).collect()
}

/// What is known of one needle over the whole summarized part.
struct Seen {
    /// Every kind of block it is in.
    sources: BTreeSet<Source>,
    /// The message it first appears in.
    message: Option<String>,
    /// Whether the kept suffix holds its answer.
    kept: bool,
    /// Whether an occurrence of it is listed.
    listed: bool,
}

/// A question with `f`'s answer, to ask a text whether it holds it.
fn probe(f: &Found) -> Question {
    Question {
        category: f.category,
        answer: f.answer.clone(),
        pair: f.pair.clone(),
        query: Vec::new(),
        sources: BTreeSet::new(),
        message: None,
    }
}

/// At most `cap` occurrences of distinct needles with enough query words, with their query:
/// for each of `cap` evenly spaced places in `list`, the first such occurrence from there on.
fn pick<'a>(
    list: &'a [Occurrence],
    cap: usize,
    blocks: &[Block],
) -> Vec<(Vec<String>, &'a Occurrence)> {
    let n = list.len();
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut out = Vec::new();
    let mut from = 0;
    for i in 0..cap.min(n) {
        from = from.max(i * n / cap.min(n).max(1));
        while from < n {
            let o = &list[from];
            from += 1;
            if taken.contains(&o.needle) {
                continue;
            }
            let block = &blocks[o.block];
            let first: Vec<&str> = o.found.pair.iter().map(|(k, _)| k.as_str()).collect();
            let call: Vec<&str> = block.call.iter().map(String::as_str).collect();
            let f = &o.found;
            // A key and value's query may name the key: it is the question.
            let hidden = f.pair.as_ref().map_or(&f.answer, |(_, value)| value);
            let query = query_words(&block.text, f.start, f.end, hidden, &first, &call);
            if query.len() >= MIN_QUERY_WORDS {
                taken.insert(o.needle);
                out.push((query, o));
                break;
            }
        }
    }
    out
}

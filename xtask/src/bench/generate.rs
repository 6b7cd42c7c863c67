//! The seeded session generator of `cargo xtask bench`: realistic agent sessions written as JSONL
//! directly, fast enough to make a million messages in seconds.
//!
//! A session is a run of *rounds*: a user prompt, then a tool loop (assistant messages with
//! optional thinking and text, one tool call or several in parallel, usage on every assistant
//! message; their results in one user message, or spread over several), then a final answer.
//! Tool results are mostly small, often a few KB of code or logs, and sometimes tens of KB.
//! Between rounds the generator can write a compaction: the entry (`kept_messages: n`) followed
//! by copies of the last round marked `kept_by`, as `panto_model::replay` requires. Usage follows
//! an estimate of the context size, which a compaction resets.
//!
//! Text is assembled from fragments that are already JSON-escaped (quotes, backslashes, `\n`,
//! tabs, non-ASCII, `[INFO]`-style brackets and `<tags>` that the transcript escaper must look
//! at), so nothing is escaped at run time. The same seed gives the same bytes.
//!
//! Why one file: the fragments and the writer that assembles them are one generator, read
//! together to see what a generated session holds.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// Words of prose, JSON-escaped.
const WORDS: &[&str] = &[
    "the",
    "test",
    "fails",
    "because",
    "fixture",
    "is",
    "stale",
    "when",
    "build",
    "script",
    "runs",
    "after",
    "binary",
    "a",
    "of",
    "to",
    "in",
    "and",
    "that",
    "it",
    "we",
    "should",
    "check",
    "module",
    "function",
    "returns",
    "error",
    "value",
    "config",
    "path",
    "file",
    "compile",
    "crate",
    "trait",
    "struct",
    "field",
    "parser",
    "token",
    "session",
    "context",
    "summary",
    "compaction",
    "retry",
    "request",
    "provider",
    "limit",
    "budget",
    "turn",
    "message",
    "tool",
    "result",
    "call",
    "output",
    "input",
    "cache",
    "thread",
    "lock",
    "write",
    "read",
    "append",
    "line",
    "offset",
    "byte",
    "buffer",
    "index",
    "range",
    "iterator",
    "clone",
    "borrow",
    "lifetime",
    "async",
    "await",
    "future",
    "closure",
    "`Option<T>`",
    "`Result`",
    "`src/lib.rs`",
    "`Cargo.toml`",
    "\\\"quoted\\\"",
    "café",
    "naïve",
    "日本語",
    "—",
    "résumé",
    "überprüfen",
    "(see",
    "above)",
    "e.g.",
    "i.e.",
    "first,",
    "then",
    "finally",
    "however,",
    "so",
    "but",
    "not",
    "all",
    "some",
    "every",
    "none",
    "both",
    "either",
    "new",
    "old",
    "next",
    "previous",
    "latest",
    "whole",
    "half",
    "twice",
    "once",
    "never",
    "always",
    "maybe",
    "likely",
];

/// Lines of source code, JSON-escaped (each ends with an escaped newline).
const CODE: &[&str] = &[
    "use std::collections::HashMap;\\n",
    "pub fn load(path: &Path) -> Result<Session, Error> {\\n",
    "    let text = std::fs::read_to_string(path).with_context(|| format!(\\\"read {}\\\", path.display()))?;\\n",
    "    for (i, line) in text.lines().enumerate() {\\n",
    "        if line.trim().is_empty() { continue; }\\n",
    "        let entry: Entry = serde_json::from_str(line)?;\\n",
    "\\tmatch entry.kind.as_str() {\\n",
    "            \\\"message\\\" => messages.push(entry),\\n",
    "            other => warn!(\\\"unknown kind {other}\\\"),\\n",
    "        }\\n",
    "    }\\n",
    "    Ok(Session { messages, path: path.to_path_buf() })\\n",
    "}\\n",
    "\\n",
    "#[test]\\n",
    "fn loads_the_example() {\\n",
    "    let s = load(Path::new(\\\"tests/fixtures/a.jsonl\\\")).unwrap();\\n",
    "    assert_eq!(s.messages.len(), 12, \\\"{:?}\\\", s);\\n",
    "    let re = Regex::new(r\\\"^\\\\d+\\\\s*$\\\").unwrap(); // a regex with backslashes\\n",
    "    if a < b && b > c { return Vec::<u8>::new(); }\\n",
    "// TODO: handle the <transcript> tag and [User]: markers in pasted text\\n",
];

/// Lines of tool output (test runs, logs), JSON-escaped, each ending with an escaped newline.
const LOG: &[&str] = &[
    "[INFO] worker finished <ok> in 12ms\\n",
    "[WARN] retrying request after 429 (attempt 2)\\n",
    "running 42 tests\\n",
    "test model::tests::roundtrip ... ok\\n",
    "test session::tests::crash_cut ... FAILED\\n",
    "error[E0502]: cannot borrow `x` as mutable because it is also borrowed as immutable\\n",
    "  --> src/main.rs:14:5\\n",
    "   |\\n",
    "14 |     v.push(1);\\n",
    "   |     ^^^^^^^^^ mutable borrow occurs here\\n",
    "<div class=\\\"result\\\">3 passed; 1 failed</div>\\n",
    "    Finished `release` profile [optimized] target(s) in 4.52s\\n",
    "drwxr-xr-x  5 user user 4096 Jan  1 12:00 crates\\n",
    "-rw-r--r--  1 user user 1832 Jan  1 12:00 Cargo.toml\\n",
    "thread 'main' panicked at src/lib.rs:88:9: called `Option::unwrap()` on a `None` value\\n",
    "\\u001b[32m✓\\u001b[0m all checks passed\\n",
];

const TOOLS: &[&str] = &["read", "bash", "edit", "grep", "write", "list"];
const MODEL: &str = "claude-sonnet-4-5";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// What a generated session holds, as the generator counted it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Facts {
    /// Message entries, kept copies included.
    pub messages: u64,
    /// Compaction entries.
    pub compactions: u64,
    /// Message entries that are kept copies.
    pub kept_copies: u64,
    /// Tool calls (`tool_use` blocks) and as many results.
    pub tool_calls: u64,
    /// Thinking blocks.
    pub thinking_blocks: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Byte offset of the latest compaction entry (0 when there is none).
    pub latest_compaction_offset: u64,
    /// Messages of the effective context: the compaction message, its copies and what follows.
    pub effective_messages: u64,
    /// The id of the latest compaction.
    pub latest_compaction: Option<String>,
}

/// One message line under construction: the `id` and the rest of the object, so that a kept copy
/// can be written with another id and a `kept_by` field.
struct Line {
    id: String,
    /// The object after `"id":"...",` without the closing brace.
    body: Vec<u8>,
}

/// Writes sessions; see the module docs.
pub(super) struct Generator {
    rng: fastrand::Rng,
    prefix: &'static str,
    next_message: u64,
    next_tool: u64,
    next_compaction: u64,
    /// Estimated tokens of the effective context, for plausible usage records.
    context_tokens: u64,
    /// The messages of the last whole round, for the copies of the next compaction.
    last_round: Vec<Line>,
    round: Vec<Line>,
    scratch: Vec<u8>,
    facts: Facts,
    out: BufWriter<File>,
}

impl Generator {
    /// A generator writing to a new file at `path`, seeded with `seed`; ids start with `prefix`.
    pub(super) fn create(path: &Path, seed: u64, prefix: &'static str) -> Result<Generator> {
        let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
        Ok(Generator {
            rng: fastrand::Rng::with_seed(seed),
            prefix,
            next_message: 0,
            next_tool: 0,
            next_compaction: 0,
            context_tokens: 3_000,
            last_round: Vec::new(),
            round: Vec::new(),
            scratch: Vec::with_capacity(1 << 16),
            facts: Facts::default(),
            out: BufWriter::with_capacity(8 << 20, file),
        })
    }

    /// Goes on with another seed and id prefix (the same file): what follows is then
    /// independent of what came before.
    pub(super) fn reseed(&mut self, seed: u64, prefix: &'static str) {
        self.rng = fastrand::Rng::with_seed(seed);
        self.prefix = prefix;
        self.next_message = 0;
        self.next_tool = 0;
        self.next_compaction = 0;
        self.context_tokens = 3_000;
    }

    /// Message entries written so far (copies included).
    pub(super) fn messages(&self) -> u64 {
        self.facts.messages
    }

    /// Writes whole rounds until at least `total` message entries are in the file.
    pub(super) fn rounds_until(&mut self, total: u64) -> Result<()> {
        while self.facts.messages < total {
            self.round()?;
        }
        Ok(())
    }

    /// Writes a compaction keeping the last round: the entry, then a copy of each of its
    /// messages marked `kept_by`. Does nothing before the first round.
    pub(super) fn compaction(&mut self) -> Result<()> {
        if self.last_round.is_empty() {
            return Ok(());
        }
        let id = format!("{}c{}", self.prefix, self.next_compaction);
        self.next_compaction += 1;
        let offset = self.facts.bytes;
        let kept = std::mem::take(&mut self.last_round);
        let mut summary_len = 0;
        let mut line = Vec::with_capacity(8192);
        line.extend_from_slice(br#"{"type":"compaction","id":""#);
        line.extend_from_slice(id.as_bytes());
        line.extend_from_slice(br###"","summary":"## Goal\n"###);
        let start = line.len();
        let n = self.rng.usize(1500..4000);
        self.prose(&mut line, n);
        summary_len += line.len() - start;
        let kept_bytes: usize = kept.iter().map(|l| l.body.len()).sum();
        let after = (summary_len + kept_bytes) as u64 / 3;
        let trigger = if self.rng.u8(..) < 200 {
            "overflow"
        } else {
            "manual"
        };
        let _ = write!(
            line,
            r#"","trigger":"{trigger}","model":"{MODEL}","tokens_before":{},"tokens_after":{after},"kept_messages":{}}}"#,
            self.context_tokens,
            kept.len()
        );
        line.push(b'\n');
        self.emit(&line)?;
        for (i, m) in kept.iter().enumerate() {
            line.clear();
            line.extend_from_slice(br#"{"type":"message","id":""#);
            line.extend_from_slice(m.id.as_bytes());
            let _ = write!(line, "-k{i}\",");
            line.extend_from_slice(&m.body);
            line.extend_from_slice(br#","kept_by":""#);
            line.extend_from_slice(id.as_bytes());
            line.extend_from_slice(b"\"}\n");
            self.emit(&line)?;
            self.facts.messages += 1;
        }
        self.facts.compactions += 1;
        self.facts.kept_copies += kept.len() as u64;
        self.facts.latest_compaction_offset = offset;
        self.facts.latest_compaction = Some(id);
        self.facts.effective_messages = 1 + kept.len() as u64;
        self.context_tokens = after;
        self.last_round = kept;
        Ok(())
    }

    /// Flushes the file and returns what was written.
    pub(super) fn finish(mut self) -> Result<Facts> {
        self.out.flush()?;
        Ok(self.facts)
    }

    fn emit(&mut self, line: &[u8]) -> Result<()> {
        self.out.write_all(line)?;
        self.facts.bytes += line.len() as u64;
        Ok(())
    }

    /// Writes one message line from `self.scratch` (the body) and remembers it for copies.
    fn message(&mut self) -> Result<()> {
        let id = format!("{}{}", self.prefix, self.next_message);
        self.next_message += 1;
        let mut line = Vec::with_capacity(self.scratch.len() + 48);
        line.extend_from_slice(br#"{"type":"message","id":""#);
        line.extend_from_slice(id.as_bytes());
        line.extend_from_slice(b"\",");
        line.extend_from_slice(&self.scratch);
        line.extend_from_slice(b"}\n");
        self.emit(&line)?;
        self.facts.messages += 1;
        self.facts.effective_messages += 1;
        self.context_tokens += self.scratch.len() as u64 / 3;
        let body = std::mem::take(&mut self.scratch);
        self.scratch = Vec::with_capacity(body.capacity());
        self.round.push(Line { id, body });
        Ok(())
    }

    /// One round: a prompt, a tool loop, a final answer.
    fn round(&mut self) -> Result<()> {
        self.round.clear();
        // The prompt: usually a sentence or a paragraph, sometimes a pasted file or log.
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        s.extend_from_slice(br#""role":"user","content":[{"type":"text","text":""#);
        let n = self.rng.usize(40..600);
        self.prose(&mut s, n);
        if self.rng.u8(..) < 13 {
            s.extend_from_slice(b"\\n\\n");
            let n = self.rng.usize(2000..8000);
            self.code(&mut s, n);
        }
        s.extend_from_slice(b"\"}]");
        self.scratch = s;
        self.message()?;

        let iterations = match self.rng.u8(..) {
            0..=50 => 0,
            51..=178 => self.rng.usize(1..=3),
            _ => self.rng.usize(4..=10),
        };
        for _ in 0..iterations {
            let calls = if self.rng.u8(..) < 64 {
                self.rng.usize(2..=4)
            } else {
                1
            };
            let ids = self.assistant_calls(calls)?;
            self.results(&ids)?;
        }
        self.answer()?;
        self.last_round = std::mem::take(&mut self.round);
        Ok(())
    }

    /// Appends `"usage":{...}` for an assistant message of `bytes` bytes of content.
    fn usage(&mut self, s: &mut Vec<u8>, bytes: usize) {
        let total = self.context_tokens;
        let uncached = self.rng.u64(50..3000).min(total);
        let creation = self.rng.u64(0..2000).min(total - uncached);
        let read = total - uncached - creation;
        let output = (bytes as u64 / 4).max(1) + self.rng.u64(0..20);
        let _ = write!(
            s,
            r#""usage":{{"input_tokens":{uncached},"output_tokens":{output},"cache_read_input_tokens":{read},"cache_creation_input_tokens":{creation}}}"#
        );
    }

    /// An assistant message with optional thinking and text and `calls` tool calls.
    fn assistant_calls(&mut self, calls: usize) -> Result<Vec<(String, &'static str)>> {
        let mut content = Vec::with_capacity(4096);
        content.push(b'[');
        self.thinking(&mut content, 77);
        if self.rng.bool() {
            if content.len() > 1 {
                content.push(b',');
            }
            content.extend_from_slice(br#"{"type":"text","text":""#);
            let n = self.rng.usize(30..300);
            self.prose(&mut content, n);
            content.extend_from_slice(b"\"}");
        }
        let mut ids = Vec::with_capacity(calls);
        for _ in 0..calls {
            if content.len() > 1 {
                content.push(b',');
            }
            let id = format!("toolu_{}{:08x}", self.prefix, self.next_tool);
            self.next_tool += 1;
            let tool = TOOLS[self.rng.usize(..TOOLS.len())];
            let module = self.rng.u32(..500);
            let _ = write!(
                content,
                r#"{{"type":"tool_use","id":"{id}","name":"{tool}","input":"#
            );
            match tool {
                "bash" => {
                    let _ = write!(
                        content,
                        r#"{{"command":"cargo test -p panto-model module_{module} -- --nocapture","timeout_ms":120000}}}}"#
                    );
                }
                "edit" | "write" => {
                    let _ = write!(
                        content,
                        r#"{{"path":"crates/panto-model/src/module_{module}.rs","old":""#
                    );
                    let n = self.rng.usize(40..400);
                    self.code(&mut content, n);
                    content.extend_from_slice(br#"","new":""#);
                    let n = self.rng.usize(40..400);
                    self.code(&mut content, n);
                    content.extend_from_slice(b"\"}}");
                }
                _ => {
                    let _ = write!(
                        content,
                        r#"{{"path":"crates/panto-model/src/module_{module}.rs","limit":2000}}}}"#
                    );
                }
            }
            ids.push((id, tool));
        }
        content.push(b']');
        self.facts.tool_calls += calls as u64;
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        let _ = write!(
            s,
            r#""role":"assistant","model":"{MODEL}","stop_reason":"tool_use","#
        );
        self.usage(&mut s, content.len());
        s.extend_from_slice(br#","content":"#);
        s.extend_from_slice(&content);
        self.scratch = s;
        self.message()?;
        Ok(ids)
    }

    /// A thinking block (with the given chance out of 256), with a comma before it when needed.
    fn thinking(&mut self, content: &mut Vec<u8>, chance: u8) {
        if self.rng.u8(..) >= chance {
            return;
        }
        if content.len() > 1 {
            content.push(b',');
        }
        content.extend_from_slice(br#"{"type":"thinking","thinking":""#);
        let n = self.rng.usize(200..1600);
        self.prose(content, n);
        content.extend_from_slice(br#"","signature":""#);
        for _ in 0..96 {
            content.push(BASE64[self.rng.usize(..BASE64.len())]);
        }
        content.extend_from_slice(b"\"}");
        self.facts.thinking_blocks += 1;
    }

    /// The results of `ids`: one user message, or (sometimes, for parallel calls) one each.
    fn results(&mut self, ids: &[(String, &'static str)]) -> Result<()> {
        let spread = ids.len() > 1 && self.rng.u8(..) < 51;
        let groups: Vec<&[(String, &'static str)]> = if spread {
            ids.chunks(1).collect()
        } else {
            vec![ids]
        };
        for group in groups {
            let mut s = std::mem::take(&mut self.scratch);
            s.clear();
            s.extend_from_slice(br#""role":"user","content":["#);
            for (i, (id, tool)) in group.iter().enumerate() {
                if i > 0 {
                    s.push(b',');
                }
                let _ = write!(
                    s,
                    r#"{{"type":"tool_result","tool_use_id":"{id}","content":"#
                );
                let n = match self.rng.u8(..) {
                    0..=153 => self.rng.usize(100..800),
                    154..=250 => self.rng.usize(800..3000),
                    _ => self.rng.usize(8_000..32_000),
                };
                let blocks = self.rng.u8(..) < 38;
                if blocks {
                    s.extend_from_slice(br#"[{"type":"text","text":""#);
                } else {
                    s.push(b'"');
                }
                if *tool == "bash" || *tool == "grep" {
                    self.log(&mut s, n);
                } else {
                    self.code(&mut s, n);
                }
                s.extend_from_slice(if blocks { b"\"}]" } else { b"\"" });
                let error = self.rng.u8(..) < 20;
                let _ = write!(s, r#","is_error":{error}}}"#);
            }
            s.push(b']');
            self.scratch = s;
            self.message()?;
        }
        Ok(())
    }

    /// The final answer of a round.
    fn answer(&mut self) -> Result<()> {
        let mut content = Vec::with_capacity(2048);
        content.push(b'[');
        self.thinking(&mut content, 51);
        if content.len() > 1 {
            content.push(b',');
        }
        content.extend_from_slice(br#"{"type":"text","text":""#);
        let n = self.rng.usize(100..1500);
        self.prose(&mut content, n);
        content.extend_from_slice(b"\"}]");
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        let _ = write!(
            s,
            r#""role":"assistant","model":"{MODEL}","stop_reason":"end_turn","#
        );
        self.usage(&mut s, content.len());
        s.extend_from_slice(br#","content":"#);
        s.extend_from_slice(&content);
        self.scratch = s;
        self.message()
    }

    /// About `len` bytes of escaped prose.
    fn prose(&mut self, out: &mut Vec<u8>, len: usize) {
        let end = out.len() + len;
        let mut words = 0;
        while out.len() < end {
            out.extend_from_slice(WORDS[self.rng.usize(..WORDS.len())].as_bytes());
            words += 1;
            if words % 14 == 0 {
                out.extend_from_slice(if self.rng.u8(..) < 40 {
                    b".\\n\\n"
                } else {
                    b". "
                });
            } else {
                out.push(b' ');
            }
        }
    }

    /// About `len` bytes of escaped source code.
    fn code(&mut self, out: &mut Vec<u8>, len: usize) {
        let end = out.len() + len;
        let mut i = self.rng.usize(..CODE.len());
        while out.len() < end {
            out.extend_from_slice(CODE[i].as_bytes());
            i = if self.rng.u8(..) < 200 {
                (i + 1) % CODE.len()
            } else {
                self.rng.usize(..CODE.len())
            };
        }
    }

    /// About `len` bytes of escaped tool output.
    fn log(&mut self, out: &mut Vec<u8>, len: usize) {
        let end = out.len() + len;
        while out.len() < end {
            out.extend_from_slice(LOG[self.rng.usize(..LOG.len())].as_bytes());
        }
    }
}

/// The scale layout: `messages` message entries with two earlier compactions, after a quarter
/// and after half of them, so the effective context is the second half (led by the latest
/// compaction and its copies).
pub(super) fn scale_session(path: &Path, messages: u64, seed: u64) -> Result<Facts> {
    let mut g = Generator::create(path, seed, "m")?;
    g.rounds_until(messages / 4)?;
    g.compaction()?;
    g.rounds_until(messages / 2)?;
    g.compaction()?;
    g.rounds_until(messages)?;
    g.finish()
}

/// A history of about `history` message entries (with a compaction every `every`), then a tail
/// that is byte-identical whatever the history: one round, the latest compaction keeping it, and
/// rounds up to `tail` more message entries.
pub(super) fn history_then_tail(path: &Path, history: u64, every: u64, tail: u64) -> Result<Facts> {
    let mut g = Generator::create(path, 11, "h")?;
    while g.messages() < history {
        let next = (g.messages() + every).min(history);
        g.rounds_until(next)?;
        if g.messages() < history {
            g.compaction()?;
        }
    }
    g.reseed(12, "t");
    let start = g.messages();
    g.rounds_until(start + 1)?;
    g.compaction()?;
    let start = g.messages();
    g.rounds_until(start + tail)?;
    g.finish()
}

//! Unit tests of recall: the tokenizer, the query parser, the ranking and the snippets.

use std::collections::HashSet;

use panto_model::{CompactionEntry, ContentBlock, Entry, Message, Role};

use super::query::Query;
use super::*;

fn index(entries: &[Entry]) -> RecallIndex {
    let mut index = RecallIndex::new();
    for e in entries {
        index.push(e);
    }
    index
}

fn user(id: &str, text: &str) -> Entry {
    Entry::Message(Message::user_text(text).with_id(id))
}

fn ids(recalled: &Recalled) -> Vec<&str> {
    recalled.hits.iter().map(|h| h.id.as_str()).collect()
}

#[test]
fn terms_split_code_and_keep_identifiers_whole() {
    let t = terms("see src/panto_store/lib.rs:42 for HashMap (commit a1b2c3d4e5) #123 v1.2.3");
    for want in [
        "src",
        "panto_store",
        "panto",
        "store",
        "lib",
        "rs",
        "42",
        "src/panto_store/lib.rs:42",
        "src/panto_store/lib.rs",
        "lib.rs:42",
        "lib.rs",
        "hashmap",
        "hash",
        "map",
        "a1b2c3d4e5",
        "\u{1}a1b2c3d",
        "#123",
        "123",
        "v1.2.3",
    ] {
        assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
    }
}

#[test]
fn camel_case_parts() {
    let t = terms("HTTPServer parseJSON2Value");
    for want in [
        "httpserver",
        "http",
        "server",
        "parsejson2value",
        "parse",
        "json2",
        "value",
    ] {
        assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
    }
}

#[test]
fn queries_find_their_exact_strings() {
    let q = Query::parse(r#"which SHA a1b2c3d for "connection refused" in src/lib.rs:42"#);
    let needles: Vec<&str> = q.exact.iter().map(|e| e.needle.as_str()).collect();
    assert_eq!(needles, ["connection refused", "a1b2c3d", "src/lib.rs:42"]);
    assert!(!q.terms.iter().any(|t| t == "which" || t == "for"));
    assert!(q.terms.iter().any(|t| t == "sha"));
}

#[test]
fn an_identifier_ranks_its_exact_occurrences_first() {
    let entries = vec![
        user(
            "m1",
            "the migration failed again with an error, error, error in the migration",
        ),
        user("m2", "merged as a1b2c3d4e5f6 after the migration review"),
        user("m3", "migration migration migration"),
    ];
    let found = recall_in(
        &index(&entries),
        &RecallQuery::new("migration a1b2c3d"),
        &HashSet::new(),
    );
    assert_eq!(ids(&found)[0], "m2#0");
    assert_eq!(found.hits[0].exact, 1);
    assert!(found.hits[0].snippet.contains("a1b2c3d4e5f6"));
}

#[test]
fn words_rank_by_bm25() {
    let entries = vec![
        user("m1", "the build is green"),
        user("m2", "the database migration failed with a lock timeout"),
        user("m3", "lunch"),
    ];
    let found = recall_in(
        &index(&entries),
        &RecallQuery::new("why did the migration fail"),
        &HashSet::new(),
    );
    assert_eq!(ids(&found), ["m2#0"]);
}

#[test]
fn tool_items_carry_their_call_and_tool() {
    let entries = vec![
        Entry::Message(
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "toolu_1",
                    "bash",
                    serde_json::json!({"cmd": "git log -1"}),
                )],
            )
            .with_id("m1"),
        ),
        Entry::Message(
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(
                    "toolu_1",
                    "commit 9f8e7d6c5b4a",
                    false,
                )],
            )
            .with_id("m2"),
        ),
    ];
    let found = recall_in(
        &index(&entries),
        &RecallQuery::new("9f8e7d6"),
        &HashSet::new(),
    );
    let hit = &found.hits[0];
    assert_eq!(hit.id, "toolu_1");
    assert_eq!(hit.tool.as_deref(), Some("bash"));
    assert_eq!(hit.call.as_deref(), Some("toolu_1"));
    assert_eq!(hit.entry, "m2");
}

#[test]
fn the_effective_context_is_left_out_and_copies_count_once() {
    let entries = vec![
        user("m1", "the port is 5432"),
        user("m2", "the port was changed"),
        Entry::Compaction(CompactionEntry::new("ports were discussed").with_id("c1")),
        user("m3", "the port was changed"),
    ];
    let idx = index(&entries);
    let context = panto_model::replay(entries.clone());
    let found = recall_in(
        &idx,
        &RecallQuery::new("port"),
        &context_fingerprints(&context),
    );
    assert_eq!(ids(&found), ["m1#0"]);
    assert_eq!(found.hits[0].summarized_by.as_deref(), Some("c1"));
    let all = recall_in(
        &idx,
        &RecallQuery::new("port").with_context(true),
        &context_fingerprints(&context),
    );
    assert_eq!(ids(&all), ["m1#0", "m2#0"]);
}

#[test]
fn fetch_gives_the_item_and_its_neighbours() {
    let entries = vec![
        user("m1", "one"),
        user("m2", "two"),
        user("m3", "three"),
        user("m4", "four"),
    ];
    let idx = index(&entries);
    let f = fetch_in(idx.items(), "m3#0", 1).unwrap();
    let texts: Vec<&str> = f.items.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, ["two", "three", "four"]);
    assert_eq!(f.asked, ["m3#0"]);
    let f = fetch_in(idx.items(), "m1", 0).unwrap();
    assert_eq!(f.asked, ["m1#0"]);
    assert!(fetch_in(idx.items(), "m9", 0).is_none());
}

#[test]
fn words_near_each_other_rank_above_words_scattered() {
    // BM25 prefers the shorter item that has "timeout" twice; the long one holds the four
    // words on one line, as a config dump holds a key and the words around its value.
    let filler = "lorem ipsum dolor sit amet ".repeat(60);
    let entries = vec![
        user(
            "m1",
            &format!(
                "retry timeout timeout {} pool {} size",
                "x ".repeat(30),
                "y ".repeat(30)
            ),
        ),
        user(
            "m2",
            &format!("{filler} pool size retry timeout: 30 {filler} pool {filler} size"),
        ),
    ];
    let found = recall_in(
        &index(&entries),
        &RecallQuery::new("pool size retry timeout"),
        &HashSet::new(),
    );
    assert_eq!(found.hits[0].id, "m2#0", "{:?}", found.hits);
    assert_eq!(found.hits[0].near, 4);
    assert!(
        found.hits[0].snippet.contains("timeout: 30"),
        "{}",
        found.hits[0].snippet
    );
    assert!(found.hits[1].near < 4);
}

#[test]
fn snippets_centre_on_the_match() {
    let text = format!("{} needle {}", "word ".repeat(200), "tail ".repeat(200));
    let s = snippet(&text, &["needle"]);
    assert!(s.contains("needle"));
    assert!(s.starts_with('…') && s.ends_with('…'));
    assert!(s.chars().count() <= SNIPPET_CHARS + 2);
}

mod properties {
    use std::collections::HashSet;

    use panto_model::{Entry, replay};
    use proptest::prelude::*;

    use super::super::*;
    use crate::conformance::{unit_entries, units};

    /// Whether `snippet` is a window of `flat` marked `…` exactly where it leaves text out:
    /// some place of its text in `flat` has text before it if and only if it starts with `…`,
    /// and after it if and only if it ends with one. (A window's text alone does not say where
    /// it is: in a run of one letter a window cut at its end also ends the text.)
    fn marked_window(flat: &str, snippet: &str) -> bool {
        let inner = snippet.strip_prefix('…').unwrap_or(snippet);
        let inner = inner.strip_suffix('…').unwrap_or(inner);
        let (lead, tail) = (snippet.starts_with('…'), snippet.ends_with('…'));
        flat.char_indices()
            .map(|(i, _)| i)
            .chain([flat.len()])
            .any(|i| {
                flat[i..].starts_with(inner)
                    && (i > 0) == lead
                    && (i + inner.len() < flat.len()) == tail
            })
    }

    /// proptest's shrunk case: one word of 22 letters `a`, a needle it does not hold, a room of
    /// 12. The snippet is the text's start cut at its end; that its 12 letters also end the
    /// text made the property's old check (`ends_with` of the text alone) fail a right snippet.
    #[test]
    fn a_snippet_of_one_long_word_of_one_letter_is_its_start_marked_where_it_cuts() {
        let text = "a".repeat(22);
        let s = snippet::snippet_near(&text, &["beta"], None, 12);
        assert_eq!(s, format!("{}…", "a".repeat(12)));
        assert!(marked_window(&text, &s));
        assert!(!marked_window(&text, &"a".repeat(12)));
        assert!(marked_window(&text, &format!("…{}…", "a".repeat(20))));
        assert!(!marked_window(&text, &format!("…{}", "a".repeat(22))));
    }

    /// The first words of `text`, as a quoted phrase, when they make one.
    fn phrase(text: &str) -> Option<String> {
        let words: Vec<&str> = text.split_whitespace().take(6).collect();
        let p = words.join(" ");
        (p.chars().any(char::is_alphanumeric) && !p.contains(['"', '`'])).then_some(p)
    }

    proptest! {
        /// Every item outside the effective context is found by a phrase it holds (or the
        /// hits are full of items that hold it), and no hit is in the effective context.
        #[test]
        fn summarized_items_are_findable_and_the_context_is_left_out(units in units()) {
            let entries: Vec<Entry> = unit_entries(&units).into_iter().flatten().collect();
            let mut index = RecallIndex::new();
            for e in &entries {
                index.push(e);
            }
            let exclude = context_fingerprints(&replay(entries));
            for item in index.items() {
                let Some(p) = phrase(&item.text) else { continue };
                let query = RecallQuery::new(format!("\"{p}\"")).with_limit(MAX_LIMIT);
                let found = recall_in(&index, &query, &exclude);
                for hit in &found.hits {
                    let f = index.items().iter().find(|i| i.id == hit.id && i.position == hit.position);
                    prop_assert!(!exclude.contains(&f.unwrap().fingerprint()), "{} is in the context", hit.id);
                }
                if exclude.contains(&item.fingerprint()) {
                    continue;
                }
                let holds = found.hits.iter().any(|h| {
                    index.items().iter().any(|i| {
                        i.id == h.id && i.position == h.position && i.fingerprint() == item.fingerprint()
                    })
                });
                let full = found.hits.len() == MAX_LIMIT && found.hits.iter().all(|h| h.exact > 0);
                prop_assert!(holds || full, "{:?} not found by {:?}: {:?}", item.id, p, found.hits);
            }
        }

        /// A snippet keeps to its room (its `…` marks aside), is one window of the text's
        /// words, marked where it leaves text out, and shows a word it was asked for whole.
        #[test]
        fn a_snippet_is_one_window_of_the_text_holding_the_match(
            words in proptest::collection::vec("(alpha|Beta|x|y|zz|é|longer-word-here|a{1,60})", 0..200),
            needle in "(beta|alpha|gamma)",
            size in 12usize..400,
        ) {
            let text = words.join(if words.len() % 3 == 0 { "\n " } else { " " });
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let s = snippet::snippet_near(&text, &[needle.as_str()], None, size);
            let inner = s.strip_prefix('…').unwrap_or(&s);
            let inner = inner.strip_suffix('…').unwrap_or(inner);
            prop_assert!(inner.chars().count() <= size, "{} > {size}: {s:?}", inner.chars().count());
            prop_assert!(flat.contains(inner), "{inner:?} is no window of the text");
            prop_assert!(marked_window(&flat, &s), "{:?} marks no window of {:?}", s, flat);
            if flat.to_lowercase().contains(needle.as_str()) && needle.len() * 2 <= size {
                prop_assert!(s.to_lowercase().contains(needle.as_str()), "{needle} not in {s:?}");
            }
        }

        /// An index built in one go equals one built entry by entry between queries.
        #[test]
        fn an_index_built_at_once_equals_one_kept_current(units in units()) {
            let entries: Vec<Entry> = unit_entries(&units).into_iter().flatten().collect();
            let mut whole = RecallIndex::new();
            entries.iter().for_each(|e| whole.push(e));
            let mut current = RecallIndex::new();
            let query = RecallQuery::new("a e i o u 1 2 3").with_limit(MAX_LIMIT).with_context(true);
            for e in &entries {
                current.push(e);
                let _ = recall_in(&current, &query, &HashSet::new());
            }
            prop_assert_eq!(
                recall_in(&whole, &query, &HashSet::new()),
                recall_in(&current, &query, &HashSet::new())
            );
        }
    }
}

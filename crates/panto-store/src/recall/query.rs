//! A recall query, parsed: the terms it ranks by and the exact strings it looks for first.

use std::collections::BTreeSet;

use super::terms::{chunks, for_each_term, hex_term, is_hex, is_identifier, is_stopword, terms};

/// What a query looks for exactly: a quoted text, an identifier or a hex id prefix. An item that
/// holds it (case aside) ranks above every item that does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exact {
    /// The text to find, lowercased, runs of whitespace as one space.
    pub(crate) needle: String,
    /// The index terms an item must have to be a candidate for it.
    pub(crate) lookup: Vec<String>,
}

/// A parsed query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Query {
    /// The terms BM25 ranks by, each once.
    pub(crate) terms: Vec<String>,
    /// The exact strings, most specific first.
    pub(crate) exact: Vec<Exact>,
}

impl Query {
    /// Parses `text`: quoted parts (`"..."` or `` `...` ``) are exact phrases, identifiers and
    /// hex ids in the rest are exact strings, and every word that is not a stopword ranks (all
    /// of them when the query has nothing else).
    pub(crate) fn parse(text: &str) -> Query {
        let mut exact = Vec::new();
        let mut rest = String::new();
        for (i, part) in text.split(['"', '`']).enumerate() {
            if i % 2 == 1 && !part.trim().is_empty() {
                exact.push(Exact {
                    needle: normalize(part),
                    lookup: content_words(part),
                });
            } else {
                rest.push_str(part);
                rest.push(' ');
            }
        }
        for chunk in chunks(&rest) {
            let needle = normalize(chunk);
            if is_hex(chunk) {
                exact.push(Exact {
                    lookup: vec![hex_term(chunk)],
                    needle,
                });
            } else if is_identifier(chunk) {
                exact.push(Exact {
                    lookup: vec![needle.clone()],
                    needle,
                });
            }
        }
        let mut seen = BTreeSet::new();
        exact.retain(|e| !e.lookup.is_empty() && seen.insert(e.needle.clone()));
        let mut ranked: Vec<String> = Vec::new();
        let mut all: Vec<String> = Vec::new();
        for_each_term(text, |t| {
            if !all.iter().any(|a| a == t) {
                all.push(t.to_owned());
                if !is_stopword(t) {
                    ranked.push(t.to_owned());
                }
            }
        });
        Query {
            terms: if ranked.is_empty() { all } else { ranked },
            exact,
        }
    }

    /// Whether the query asks for nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty() && self.exact.is_empty()
    }
}

/// The words of a phrase that are not stopwords (all of them when every one is), each once.
fn content_words(phrase: &str) -> Vec<String> {
    let all = terms(phrase);
    let mut out: Vec<String> = Vec::new();
    for t in all.iter().filter(|t| !is_stopword(t)) {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    if out.is_empty() {
        for t in all {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// `text` lowercased with each run of whitespace as one space, trimmed.
pub(crate) fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

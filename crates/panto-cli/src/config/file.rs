//! Reading a layer file: parsing its TOML and telling a file's mistakes in panto's words.

use std::path::Path;

use anyhow::Result;
use panto_compact::{LayerFile, read_layer_file};

use super::{FileConfig, KEYS, ProviderKind};

/// Reads and parses one layer file; `None` when it does not exist. The file is read with
/// `read_layer_file`, so a project's file that links out of the project is refused before it
/// is read, and a parse error can only quote a file inside the project (or the user's own).
pub(super) fn read_file(file: &LayerFile) -> Result<Option<FileConfig>> {
    let path = &file.path;
    let Some(text) = read_layer_file(file).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot read the configuration file: {}",
            path.display(),
            e.reason
        )
    })?
    else {
        return Ok(None);
    };
    parse_toml(path, &text).map(Some)
}

/// Parses a TOML file, naming the file, line and column of an error, in panto's words for the
/// mistakes people make in a configuration file (an unknown or misspelt key, a value of the
/// wrong kind), with the parser's own words as the cause.
pub(super) fn parse_toml<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    toml::from_str::<T>(text).map_err(|e| {
        let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
        let what = e.message().trim_end_matches('\n');
        let key = e
            .span()
            .and_then(|s| text[..s.start.min(text.len())].lines().last())
            .and_then(|l| l.split_once('='))
            .map(|(k, _)| k.trim().trim_matches('"').to_owned());
        let what = match explain_value_error(what, key.as_deref()) {
            // The parser's list of keys adds nothing to the suggestion.
            Some(plain) if what.starts_with("unknown field") => plain,
            Some(plain) => format!("{plain} (the parser said: {what})"),
            None => what.to_owned(),
        };
        if line > 0 {
            anyhow::anyhow!("{}: line {line}, column {col}: {what}", path.display())
        } else {
            anyhow::anyhow!("{}: {what}", path.display())
        }
    })
}

/// A configuration file's mistake in panto's words, from the parser's message: an unknown key
/// (with the nearest known one), a number or a text where the other was due, a provider that
/// does not exist. `key` is the key of the line the error points at, when there is one.
pub(crate) fn explain_value_error(message: &str, key: Option<&str>) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let unknown = rest.split('`').next().unwrap_or(rest);
        return Some(match nearest_key(unknown) {
            Some(known) => format!("unknown key `{unknown}`; did you mean `{known}`?"),
            None => format!(
                "unknown key `{unknown}`; the keys are {}",
                KEYS.iter()
                    .map(|(k, _)| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let key = key?;
    // The value as the file wrote it: `string "abc"` is "abc", ``integer `-5` `` is -5.
    let found = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|r| r.split(", expected").next())
        .map(|f| {
            f.split_once(' ')
                .filter(|(_, v)| v.starts_with(['"', '`']))
                .map_or(f, |(_, v)| v)
                .trim_matches('`')
        });
    if message.ends_with("expected u64") || message.ends_with("expected u32") {
        let example = match key {
            "keep_tokens" => "20000",
            k if k.ends_with("_secs") => "60",
            "max_response_mib" => "64",
            "retries" => "3",
            _ => "8192",
        };
        return Some(format!(
            "`{key}` must be a whole number, like {key} = {example}{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if message.ends_with("expected f64") {
        return Some(format!(
            "`{key}` must be a number, like {key} = 0.8{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if message.ends_with("expected a string") {
        return Some(format!(
            "`{key}` must be text in quotes, like {key} = \"...\"{}",
            found.map_or(String::new(), |f| format!("; it is {f}"))
        ));
    }
    if key == "provider" && message.starts_with("unknown variant `") {
        return Some(format!(
            "`provider` must be one of {}",
            ProviderKind::names(", ")
        ));
    }
    None
}

/// The known key nearest to `unknown` by edit distance, when it is near enough to be a typo.
fn nearest_key(unknown: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|(k, _)| (*k, edit_distance(unknown, k)))
        .filter(|(k, d)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| k)
}

/// The Levenshtein distance of two short strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

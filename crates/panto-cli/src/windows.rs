//! The context windows panto learned (the limit an overflow stated, or the bound a request
//! that did not fit taught) or discovered (what a local server said), kept per provider,
//! server and model in the user's data folder (`windows.toml`), so that the next command, and
//! the next conversation with the same model, start knowing them. `panto window --forget`
//! forgets them.
//!
//! The file is written whole: a new file (0600) renamed over the old one, so a crash leaves
//! one or the other. A file that cannot be read is reported once and treated as empty; it is
//! not overwritten then.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use panto_compact::{Window, WindowSource};
use serde::{Deserialize, Serialize};

use crate::config::{Config, create_private_dir, data_dir, write_private};

/// The file's name in the data folder.
pub(crate) const WINDOWS_FILE: &str = "windows.toml";

/// Where the windows are kept: `$PANTO_DATA_DIR/windows.toml`, else
/// `<platform data dir>/panto/windows.toml`.
pub(crate) fn path() -> Option<PathBuf> {
    data_dir().map(|d| d.join(WINDOWS_FILE))
}

/// Which provider, server and model a window belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    /// The provider's name (`openai`, `anthropic`, ...).
    pub provider: String,
    /// The base URL without credentials, or empty for the provider's official API.
    pub base_url: String,
    /// The model.
    pub model: String,
}

impl Key {
    /// The key of `model` on the configured provider and server.
    pub(crate) fn of(config: &Config, model: &str) -> Key {
        Key {
            provider: config.provider.value.as_str().to_owned(),
            base_url: config
                .base_url
                .value
                .as_deref()
                .map(without_credentials)
                .unwrap_or_default(),
            model: model.to_owned(),
        }
    }

    fn matches(&self, r: &Record) -> bool {
        r.provider == self.provider && r.base_url == self.base_url && r.model == self.model
    }
}

/// A URL without the user and password it may carry (`http://user:pw@host/v1` gives
/// `http://host/v1`): the file records where a window was met, never a credential.
pub(crate) fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// One window kept in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The provider.
    pub provider: String,
    /// The server (empty for the official API).
    #[serde(default)]
    pub base_url: String,
    /// The model.
    pub model: String,
    /// The window in tokens; 0 for a server that was asked and said nothing (so it is not
    /// asked again until the record is forgotten).
    pub tokens: u64,
    /// `overflow`, `bound` or `discovered` ([`WindowSource::as_str`]).
    pub source: String,
    /// Where it came from, for a person: the endpoint a server said it at, or the request
    /// that taught it.
    #[serde(default)]
    pub detail: String,
    /// When it was recorded, in seconds since 1970.
    #[serde(default)]
    pub at: u64,
    /// On a learned record, whether the server counts a request's output budget against its
    /// window (`KnownWindows::counts_output`, learned from the same overflow), so that the
    /// next conversation keeps room for the whole reply from its first request. Absent when
    /// nothing showed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts_output: Option<bool>,
}

impl Record {
    /// The record's window, when it holds one.
    pub(crate) fn window(&self) -> Option<Window> {
        let source = WindowSource::parse(&self.source)?;
        (self.tokens > 0).then(|| Window::new(self.tokens, source))
    }
}

/// The whole file.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WindowFile {
    /// The windows, one per key and kind (learned or discovered).
    #[serde(default, rename = "window")]
    pub windows: Vec<Record>,
}

impl WindowFile {
    /// Reads the file; an empty record when it does not exist.
    ///
    /// # Errors
    /// A file that cannot be read or parsed.
    pub(crate) fn read(path: &Path) -> Result<WindowFile> {
        let text = match panto_compact::read_layer_file(&panto_compact::LayerFile::new(path)) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(WindowFile::default()),
            Err(e) => bail!(
                "{}: cannot read the windows file: {}",
                path.display(),
                e.reason
            ),
        };
        toml::from_str(&text).with_context(|| format!("{}: not a windows file", path.display()))
    }

    /// The records of `key`.
    pub(crate) fn of<'a>(&'a self, key: &'a Key) -> impl Iterator<Item = &'a Record> + 'a {
        self.windows.iter().filter(move |r| key.matches(r))
    }

    /// Records `record`, replacing the one of its key and kind (learned, or discovered).
    /// Returns whether anything changed.
    pub(crate) fn put(&mut self, record: Record) -> bool {
        let learned = |r: &Record| r.source != WindowSource::Discovered.as_str();
        let same = |r: &Record| {
            r.provider == record.provider
                && r.base_url == record.base_url
                && r.model == record.model
                && learned(r) == learned(&record)
        };
        if let Some(old) = self.windows.iter_mut().find(|r| same(r)) {
            if old.tokens == record.tokens
                && old.source == record.source
                && old.counts_output == record.counts_output
            {
                return false;
            }
            *old = record;
        } else {
            self.windows.push(record);
        }
        true
    }

    /// Forgets the records of `key` (every record with `None`). Returns how many.
    pub(crate) fn forget(&mut self, key: Option<&Key>) -> usize {
        let before = self.windows.len();
        self.windows.retain(|r| key.is_some_and(|k| !k.matches(r)));
        before - self.windows.len()
    }

    /// Writes the file: a new file (0600, in a folder made 0700 when missing) renamed over
    /// the old one.
    ///
    /// # Errors
    /// When the folder or the file cannot be written.
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        let mut text = String::from(
            "# Context windows panto learned from overflows or discovered from local servers, per\n\
             # provider, server and model. `panto window --forget` forgets the current model's,\n\
             # `panto window --forget --all` every one. Written by panto; see docs/compaction.md.\n",
        );
        text.push_str(&toml::to_string(self).context("cannot write the windows file")?);
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let tmp = dir.join(format!(".{WINDOWS_FILE}.{}.tmp", std::process::id()));
        let written =
            write_private(&tmp, text.as_bytes()).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            bail!("{}: cannot write the windows file: {e}", path.display());
        }
        Ok(())
    }
}

/// Seconds since 1970, now.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

//! The compaction system prompt: `COMPACTION.md` layering, the short built-in form for small
//! windows and the `/compact` instructions; and the careful reading of layered files (prompts
//! and configurations) that it shares with the CLI.

use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::error::CompactError;
use crate::fold::TINY_PROMPT_BELOW;

/// The built-in `COMPACTION.md`, shipped inside this crate (`prompts/COMPACTION.md`).
pub const BUILTIN_PROMPT: &str = include_str!("../prompts/COMPACTION.md");

/// The short form of the built-in prompt (`prompts/COMPACTION-SHORT.md`): the same task,
/// sections and ledger note in brief, about 500 tokens by panto's estimate where the long one
/// takes about 2,000. Used for small windows ([`SHORT_PROMPT_BELOW`]).
pub const BUILTIN_SHORT_PROMPT: &str = include_str!("../prompts/COMPACTION-SHORT.md");

/// The tiniest form of the built-in prompt (`prompts/COMPACTION-TINY.md`): the task and the
/// ledger note in two short paragraphs, about 130 tokens by panto's estimate. Used for windows
/// under 2,000 tokens ([`TINY_PROMPT_BELOW`]).
pub const BUILTIN_TINY_PROMPT: &str = include_str!("../prompts/COMPACTION-TINY.md");

/// The limit that decides the form of a compaction's requests (the built-in prompt,
/// [`CompactionPrompt::text_for`], and the output floor, [`crate::output_floor`]): `limit`,
/// panto's estimate of what the requests must fit, when the smallest window stated for the
/// model, `stated` (in the provider's own tokens: an overflow's limit, the configured window,
/// the server's; [`crate::KnownWindows::stated_window`]), is below [`TINY_PROMPT_BELOW`]; else
/// `limit` raised to [`TINY_PROMPT_BELOW`]. A window is tiny only as stated or as a refusal
/// bounds it: a stated 2,048 that panto's estimate scales to 1,960 is not; a fold passes the
/// size of a compaction request refused without a limit as `stated` (panto's tokens: under
/// 2,000 for the prompt, under 1,700 for the output floor), never a guess after one (a window
/// of 2,048 of the provider's tokens is guessed under 2,000 by a fold that halves its way
/// down). Nothing at or above [`TINY_PROMPT_BELOW`] moves, so the short form's threshold
/// ([`SHORT_PROMPT_BELOW`]) is decided as before.
pub(crate) fn form_limit(limit: Option<u64>, stated: Option<u64>) -> Option<u64> {
    match stated {
        Some(w) if w < TINY_PROMPT_BELOW => limit,
        _ => limit.map(|l| l.max(TINY_PROMPT_BELOW)),
    }
}

/// The request limit, in panto's estimated tokens, below which a compaction uses
/// [`BUILTIN_SHORT_PROMPT`] instead of [`BUILTIN_PROMPT`] (when no `COMPACTION.md` was layered):
/// 8,192.
///
/// Below it the long prompt, about 2,000 tokens, takes a quarter of the window or more, and what
/// it takes is what the transcript and the carried summary lack: at a 4,096-token window (the
/// default context of llama.cpp's server) the first fold request keeps about 1,800 tokens for
/// the transcript with the long prompt and 3,200 with the short one (about 1,500 and 2,650 for
/// each later request); at Ollama's default of 2,048 the long prompt alone fills the window,
/// the short one (367 tokens) leaves about 1,300 (970 for each later request). Above it the
/// long prompt's guidance costs less than a quarter of the window, and the windows of today's
/// hosted models are far above.
pub const SHORT_PROMPT_BELOW: u64 = 8_192;

/// The heading under which `/compact ARGS` instructions are appended to the system prompt.
pub const ADDITIONAL_INSTRUCTIONS_HEADING: &str =
    "## Additional instructions for this compaction run";

/// The base compaction system prompt, where it came from, and whether the user layered it.
///
/// Invariant: the text is never empty or whitespace only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionPrompt {
    text: String,
    source: Option<PathBuf>,
    /// Whether the text is the user's (a layered file or text given by the program), not the
    /// built-in prompt.
    layered: bool,
}

impl Default for CompactionPrompt {
    fn default() -> CompactionPrompt {
        CompactionPrompt::builtin()
    }
}

impl CompactionPrompt {
    /// The built-in prompt.
    pub fn builtin() -> CompactionPrompt {
        CompactionPrompt {
            text: BUILTIN_PROMPT.to_owned(),
            source: None,
            layered: false,
        }
    }

    /// Layers the overrides over the built-in prompt: `candidates` are paths in increasing
    /// priority (typically the user-level then the project-level `COMPACTION.md`), and the last
    /// one that exists wins. A path that does not exist is skipped.
    ///
    /// Every candidate that exists is read, the ones that lose included, so a broken file is
    /// reported instead of silently shadowed.
    ///
    /// # Errors
    /// [`CompactError::PromptUnreadable`] when a candidate exists but cannot be read (permission,
    /// a directory, a dangling symlink, not UTF-8), and [`CompactError::PromptEmpty`] when it is
    /// empty or whitespace only. Both name the file.
    pub fn load<P: AsRef<Path>>(candidates: &[P]) -> Result<CompactionPrompt, CompactError> {
        let layers: Vec<LayerFile> = candidates
            .iter()
            .map(|p| LayerFile::new(p.as_ref()))
            .collect();
        CompactionPrompt::load_layers(&layers)
    }

    /// As [`CompactionPrompt::load`], with each file read by [`read_layer_file`]: a project's
    /// `COMPACTION.md` given [`LayerFile::within`] its project is refused when it is a link
    /// that leaves the project.
    ///
    /// # Errors
    /// As [`CompactionPrompt::load`]; a refused file is [`CompactError::PromptUnreadable`].
    pub fn load_layers(layers: &[LayerFile]) -> Result<CompactionPrompt, CompactError> {
        let mut chosen = CompactionPrompt::builtin();
        for layer in layers {
            if let Some(text) = read_override(layer)? {
                chosen = CompactionPrompt {
                    text,
                    source: Some(layer.path.clone()),
                    layered: true,
                };
            }
        }
        Ok(chosen)
    }

    /// A prompt given as text, for embedding agents.
    ///
    /// # Errors
    /// [`CompactError::PromptEmpty`] (with an empty path) when `text` is empty or whitespace.
    pub fn from_text(text: impl Into<String>) -> Result<CompactionPrompt, CompactError> {
        let text = text.into();
        if text.trim().is_empty() {
            return Err(CompactError::PromptEmpty {
                path: PathBuf::new(),
            });
        }
        Ok(CompactionPrompt {
            text,
            source: None,
            layered: true,
        })
    }

    /// The prompt text (the long form, for the built-in prompt).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the prompt is the user's own: a layered `COMPACTION.md` or text given with
    /// [`CompactionPrompt::from_text`]. A user's prompt is always used as it is.
    pub fn is_layered(&self) -> bool {
        self.layered
    }

    /// Whether a run whose requests must fit `limit` tokens (`None`: no limit known) uses the
    /// short built-in form: the prompt is the built-in one, the limit is known or bounded, and
    /// it is below [`SHORT_PROMPT_BELOW`].
    pub fn uses_short_form(&self, limit: Option<u64>) -> bool {
        !self.layered && limit.is_some_and(|l| l < SHORT_PROMPT_BELOW)
    }

    /// The prompt text for a run whose requests must fit `limit` tokens:
    /// [`BUILTIN_TINY_PROMPT`] when [`CompactionPrompt::uses_short_form`] and `limit` is below
    /// [`TINY_PROMPT_BELOW`], else [`BUILTIN_SHORT_PROMPT`] when it uses the short form, else
    /// [`CompactionPrompt::text`]. (A compaction passes the limit that decides the form: a
    /// stated window is judged as stated.)
    pub fn text_for(&self, limit: Option<u64>) -> &str {
        if self.uses_short_form(limit) && limit.is_some_and(|l| l < TINY_PROMPT_BELOW) {
            BUILTIN_TINY_PROMPT
        } else if self.uses_short_form(limit) {
            BUILTIN_SHORT_PROMPT
        } else {
            &self.text
        }
    }

    /// The file it was read from; `None` for the built-in prompt or a prompt given as text.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The system prompt of one compaction run with no known limit: the prompt, then, when
    /// `instructions` has any non-blank text, a section headed
    /// [`ADDITIONAL_INSTRUCTIONS_HEADING`] holding it.
    pub fn system_prompt(&self, instructions: Option<&str>) -> String {
        self.system_prompt_for(instructions, None)
    }

    /// The system prompt of one compaction run whose requests must fit `limit` tokens: as
    /// [`CompactionPrompt::system_prompt`], from [`CompactionPrompt::text_for`] `limit` (the
    /// short built-in form below [`SHORT_PROMPT_BELOW`]).
    pub fn system_prompt_for(&self, instructions: Option<&str>, limit: Option<u64>) -> String {
        let text = self.text_for(limit);
        match instructions.map(str::trim).filter(|i| !i.is_empty()) {
            Some(extra) => format!(
                "{}\n\n{ADDITIONAL_INSTRUCTIONS_HEADING}\n\n{extra}\n",
                text.trim_end()
            ),
            None => text.to_owned(),
        }
    }
}

/// Reads one override: `None` when nothing is at the path.
fn read_override(file: &LayerFile) -> Result<Option<String>, CompactError> {
    let text = read_layer_file(file).map_err(|e| CompactError::PromptUnreadable {
        path: e.path,
        reason: e.reason,
        cause: e.cause,
    })?;
    match text {
        Some(text) if text.trim().is_empty() => Err(CompactError::PromptEmpty {
            path: file.path.clone(),
        }),
        other => Ok(other),
    }
}

/// The largest layer file that is read: 1 MiB. A prompt or a configuration is far smaller.
pub const MAX_LAYER_FILE_BYTES: u64 = 1024 * 1024;

/// One layered file, a `COMPACTION.md` or a `config.toml`: its path and, for a project's
/// files, the folder it must stay inside.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerFile {
    /// Where the file is looked for.
    pub path: PathBuf,
    /// The folder the file must resolve inside, symbolic links followed; `None` for files
    /// the user keeps (a dotfile manager may link them from anywhere).
    pub within: Option<PathBuf>,
}

impl LayerFile {
    /// A file read wherever its links lead (the user's own files).
    pub fn new(path: impl Into<PathBuf>) -> LayerFile {
        LayerFile {
            path: path.into(),
            within: None,
        }
    }

    /// The same file, refused unless it resolves inside `folder` (a project's files: a
    /// repository may hold links to the user's secrets).
    pub fn within(mut self, folder: impl Into<PathBuf>) -> LayerFile {
        self.within = Some(folder.into());
        self
    }
}

/// A layer file that exists but is refused or cannot be read. The reason never quotes the
/// file's content.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
#[non_exhaustive]
pub struct LayerFileError {
    /// The file, as it was asked for.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
    /// The operating-system error behind `reason`, when there is one.
    #[source]
    pub cause: Option<std::io::Error>,
}

/// Reads a layer file as UTF-8 text: `Ok(None)` when nothing is at its path.
///
/// Only a regular file of at most [`MAX_LAYER_FILE_BYTES`] is read. With
/// [`LayerFile::within`], its real path (every symbolic link followed) must lie inside that
/// folder, so a link in a repository to `~/.aws/credentials` is refused before a byte of it is
/// read, and no later parse error can quote it.
///
/// # Errors
/// [`LayerFileError`] naming the file: a link that leaves its folder or leads nowhere, a
/// directory, a FIFO or device, a file too large, a read error, text that is not UTF-8.
pub fn read_layer_file(file: &LayerFile) -> Result<Option<String>, LayerFileError> {
    let path = &file.path;
    let refuse = |reason: String| LayerFileError {
        path: path.clone(),
        reason,
        cause: None,
    };
    let failed = |e: std::io::Error| LayerFileError {
        path: path.clone(),
        reason: e.to_string(),
        cause: Some(e),
    };
    // `symlink_metadata` so that a dangling link counts as present (and is then refused).
    let link = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(failed(e)),
        Ok(meta) => meta.file_type().is_symlink(),
    };
    let real = fs::canonicalize(path).map_err(|e| match (link, e.kind()) {
        (true, ErrorKind::NotFound) => refuse("it is a symbolic link to nothing".to_owned()),
        _ => failed(e),
    })?;
    if let Some(folder) = &file.within {
        let folder = fs::canonicalize(folder).map_err(failed)?;
        if !real.starts_with(&folder) {
            return Err(refuse(format!(
                "it is a symbolic link that leads outside {}; panto reads a project's files only inside the project",
                folder.display()
            )));
        }
    }
    let check = |meta: &fs::Metadata| {
        if meta.is_dir() {
            Err(refuse("it is a directory".to_owned()))
        } else if !meta.is_file() {
            Err(refuse("it is not a regular file".to_owned()))
        } else if meta.len() > MAX_LAYER_FILE_BYTES {
            Err(refuse(format!(
                "it is larger than {} KiB",
                MAX_LAYER_FILE_BYTES / 1024
            )))
        } else {
            Ok(())
        }
    };
    // Checked before opening (a FIFO would block the open) and again on the open file.
    check(&fs::metadata(&real).map_err(failed)?)?;
    let opened = fs::File::open(&real).map_err(failed)?;
    check(&opened.metadata().map_err(failed)?)?;
    let mut bytes = Vec::new();
    opened
        .take(MAX_LAYER_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > MAX_LAYER_FILE_BYTES {
        return Err(refuse("it grew while it was read".to_owned()));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| {
        refuse(format!(
            "not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

//! The compaction system prompt: `COMPACTION.md` layering and the `/compact` instructions.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::CompactError;

/// The built-in `prompts/COMPACTION.md`.
pub const BUILTIN_PROMPT: &str = include_str!("../../../prompts/COMPACTION.md");

/// The heading under which `/compact ARGS` instructions are appended to the system prompt.
pub const ADDITIONAL_INSTRUCTIONS_HEADING: &str =
    "## Additional instructions for this compaction run";

/// The base compaction system prompt, and where it came from.
///
/// Invariant: the text is never empty or whitespace only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionPrompt {
    text: String,
    source: Option<PathBuf>,
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
        let mut chosen = CompactionPrompt::builtin();
        for path in candidates {
            let path = path.as_ref();
            if let Some(text) = read_override(path)? {
                chosen = CompactionPrompt {
                    text,
                    source: Some(path.to_path_buf()),
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
        Ok(CompactionPrompt { text, source: None })
    }

    /// The prompt text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The file it was read from; `None` for the built-in prompt or a prompt given as text.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The system prompt of one compaction run: the prompt, then, when `instructions` has any
    /// non-blank text, a section headed [`ADDITIONAL_INSTRUCTIONS_HEADING`] holding it.
    pub fn system_prompt(&self, instructions: Option<&str>) -> String {
        match instructions.map(str::trim).filter(|i| !i.is_empty()) {
            Some(extra) => format!(
                "{}\n\n{ADDITIONAL_INSTRUCTIONS_HEADING}\n\n{extra}\n",
                self.text.trim_end()
            ),
            None => self.text.clone(),
        }
    }
}

/// Reads one override: `None` when nothing is at `path`.
fn read_override(path: &Path) -> Result<Option<String>, CompactError> {
    let unreadable = |reason: String| CompactError::PromptUnreadable {
        path: path.to_path_buf(),
        reason,
    };
    // `symlink_metadata` so that a dangling link counts as present (and then fails to read).
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e.to_string())),
        Ok(_) => {}
    }
    let meta = fs::metadata(path).map_err(|e| unreadable(e.to_string()))?;
    if meta.is_dir() {
        return Err(unreadable("it is a directory".to_owned()));
    }
    let bytes = fs::read(path).map_err(|e| unreadable(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        unreadable(format!(
            "not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(CompactError::PromptEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(Some(text))
}

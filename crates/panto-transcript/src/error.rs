//! The error of this crate: why a compaction request's text could not be read back.

/// Why [`crate::parse_request`] could not find the sections of a request.
///
/// Lines are 1-based. Rendering never fails; only reading text back can.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptError {
    /// There is no opening tag line of a section that must be present.
    #[error("no {tag} line: a compaction request holds exactly one transcript section")]
    MissingTag {
        /// The missing tag.
        tag: &'static str,
    },
    /// A tag line appears a second time.
    #[error("line {line}: second {tag} line: a compaction request holds at most one")]
    RepeatedTag {
        /// The repeated tag.
        tag: &'static str,
        /// Where it appears the second time.
        line: usize,
    },
    /// An opening tag line has no closing tag line after it.
    #[error("line {line}: {tag} is never closed")]
    UnclosedTag {
        /// The opening tag.
        tag: &'static str,
        /// Where it is.
        line: usize,
    },
    /// A closing tag line with no opening tag line before it, or a section inside the other.
    #[error("line {line}: {tag} is out of place")]
    MisplacedTag {
        /// The tag.
        tag: &'static str,
        /// Where it is.
        line: usize,
    },
}

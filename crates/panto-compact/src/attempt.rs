//! `AttemptFailure`: why one attempt at a summary, with one model, failed.

use std::fmt;

use panto_provider::ProviderError;

/// Why one attempt at a summary (with one model) failed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AttemptFailure {
    /// The provider failed, for any reason (context overflow included).
    Provider(ProviderError),
    /// The model answered with no text, or only whitespace.
    EmptySummary,
    /// The answer repeats one phrase: few of its word 4-grams are distinct.
    RepetitiveSummary {
        /// The share of distinct 4-grams, in percent.
        distinct_percent: u32,
    },
    /// The answer is mostly a copy of the compaction prompt.
    EchoedPrompt,
    /// The answer is mostly a copy of the transcript's last message.
    EchoedLastMessage,
    /// The answer is longer than the transcript and previous summary it would replace.
    LongerThanReplaced {
        /// The answer's length in characters.
        summary_chars: usize,
        /// What it would replace, in characters.
        replaced_chars: usize,
    },
    /// The answer stopped at the output limit (`stop_reason` `max_tokens`), so it may be cut
    /// anywhere.
    TruncatedSummary {
        /// The output limit of the request.
        max_output_tokens: u32,
    },
    /// The answer mostly repeats the `<previous-summary>` it was given and says next to nothing
    /// of the new turns it replaces (see `docs/compaction.md`, "Checked summaries").
    RepeatedPreviousSummary {
        /// The share of the answer's substantial lines, by characters, found in the previous
        /// summary, in percent.
        repeated_percent: u32,
        /// The characters of the answer not found in the previous summary.
        new_chars: usize,
        /// The characters of the transcript of the turns it replaces.
        transcript_chars: usize,
    },
}

impl AttemptFailure {
    /// Whether the model answered, but with a summary that failed the checks (as opposed to a
    /// provider error).
    pub fn is_rejected_summary(&self) -> bool {
        !matches!(self, AttemptFailure::Provider(_))
    }
}

impl fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptFailure::Provider(e) => e.fmt(f),
            AttemptFailure::EmptySummary => f.write_str("the model returned an empty summary"),
            AttemptFailure::RepetitiveSummary { distinct_percent } => write!(
                f,
                "the model's summary repeats one phrase (only {distinct_percent}% of its word sequences are distinct)"
            ),
            AttemptFailure::EchoedPrompt => {
                f.write_str("the model's summary is a copy of the compaction prompt")
            }
            AttemptFailure::EchoedLastMessage => {
                f.write_str("the model's summary is a copy of the last message of the transcript")
            }
            AttemptFailure::LongerThanReplaced {
                summary_chars,
                replaced_chars,
            } => write!(
                f,
                "the model's summary ({summary_chars} characters) is longer than what it replaces ({replaced_chars} characters)"
            ),
            AttemptFailure::TruncatedSummary { max_output_tokens } => write!(
                f,
                "the model's summary stopped at the output limit of {max_output_tokens} tokens, so it may be cut short"
            ),
            AttemptFailure::RepeatedPreviousSummary {
                repeated_percent,
                new_chars,
                transcript_chars,
            } => write!(
                f,
                "the model's summary repeats the previous summary ({repeated_percent}% of it) and adds only {new_chars} characters about {transcript_chars} characters of new conversation"
            ),
        }
    }
}

impl std::error::Error for AttemptFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AttemptFailure::Provider(e) => Some(e),
            _ => None,
        }
    }
}

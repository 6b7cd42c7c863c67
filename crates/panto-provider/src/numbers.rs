//! The token numbers a provider stated when it refused a request as too large
//! ([`TokenNumbers`]), how they read in a message, and what they tell of which part did not fit.

use std::fmt;

/// The token numbers a provider stated when it refused a request as too large: the input it
/// counted and its context window, each when it said. The one type for them in errors:
/// [`ProviderError::ContextOverflow`](crate::ProviderError::ContextOverflow) shows them through it, and so does every error of
/// panto-compact that reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TokenNumbers {
    /// The input size the provider counted, when it said.
    pub input_tokens: Option<u64>,
    /// The context limit the provider stated, when it did.
    pub limit: Option<u64>,
    /// The output budget the provider counted against that limit, when it said (vLLM's and
    /// `OpenAI`'s "6,048 in the completion", Anthropic's "143,653 + 64,000 > 200,000"): a
    /// server that states it counts a request's output against its window.
    pub output_tokens: Option<u64>,
}

impl TokenNumbers {
    /// The numbers a provider stated, each when it did.
    pub const fn new(input_tokens: Option<u64>, limit: Option<u64>) -> TokenNumbers {
        TokenNumbers {
            input_tokens,
            limit,
            output_tokens: None,
        }
    }

    /// The same, with the output budget the provider counted against the limit (when it
    /// stated one).
    #[must_use]
    pub const fn with_output(mut self, output_tokens: Option<u64>) -> TokenNumbers {
        self.output_tokens = output_tokens;
        self
    }

    /// Whether the provider stated neither number.
    pub const fn is_empty(&self) -> bool {
        self.input_tokens.is_none() && self.limit.is_none()
    }

    /// Whether the numbers say the input alone is over the limit (at it or above).
    pub const fn input_over_limit(&self) -> bool {
        match (self.input_tokens, self.limit) {
            (Some(n), Some(l)) => n >= l,
            _ => false,
        }
    }

    /// Whether the numbers say it is the output that does not fit: the input counted is within
    /// the limit, the input with the output counted against it is not ("1093 tokens (843 in the
    /// messages, 250 in the completion)" for a limit of 1,001). A smaller reply budget would
    /// have fitted.
    pub const fn output_overflows(&self) -> bool {
        match (self.input_tokens, self.output_tokens, self.limit) {
            (Some(n), Some(o), Some(l)) => n < l && n.saturating_add(o) > l,
            _ => false,
        }
    }
}

/// `2000 tokens, limit 1600`, `843 tokens and 250 of output, limit 1001`, `2000 tokens` or
/// `limit 1600`; nothing when neither is known.
impl fmt::Display for TokenNumbers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.input_tokens, self.limit) {
            (Some(n), Some(l)) => match self.output_tokens {
                Some(o) => write!(f, "{n} tokens and {o} of output, limit {l}"),
                None => write!(f, "{n} tokens, limit {l}"),
            },
            (Some(n), None) => write!(f, "{n} tokens"),
            (None, Some(l)) => write!(f, "limit {l}"),
            (None, None) => Ok(()),
        }
    }
}

/// Token numbers as a note after a sentence: ` (2000 tokens, limit 1600)`, or nothing.
pub(crate) struct Note(pub(crate) TokenNumbers);

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " ({})", self.0)
        }
    }
}

//! The model's context window as one value with a source ([`Window`]), the windows known for a
//! model from every source ([`KnownWindows`]), and the rule that picks the one that counts.

use std::fmt;

/// Where a context window came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WindowSource {
    /// A context-overflow error stated it: the provider's own word.
    Reported,
    /// The configuration ([`CompactorConfig::context_window`](crate::CompactorConfig::context_window)).
    Configured,
    /// The server said it when asked (llama-server's `/props`, Ollama's `/api/ps` and
    /// `/api/show`, vLLM's and LM Studio's model listings).
    Discovered,
    /// Learned from a request that did not fit without a stated limit (an overflow that gave
    /// no numbers, or a request the server truncated silently): the window is below panto's
    /// estimate of that request.
    Bound,
}

impl WindowSource {
    /// The word for it in files and documents: `overflow`, `configured`, `discovered` or
    /// `bound`.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Reported => "overflow",
            WindowSource::Configured => "configured",
            WindowSource::Discovered => "discovered",
            WindowSource::Bound => "bound",
        }
    }

    /// The source named `word` ([`WindowSource::as_str`]), if any.
    pub fn parse(word: &str) -> Option<WindowSource> {
        Some(match word {
            "overflow" => WindowSource::Reported,
            "configured" => WindowSource::Configured,
            "discovered" => WindowSource::Discovered,
            "bound" => WindowSource::Bound,
            _ => return None,
        })
    }

    /// Where the window came from, in a few words for a person: "the limit an overflow error
    /// stated", "configured", "said by the server", "below a request that did not fit".
    pub fn describe(self) -> &'static str {
        match self {
            WindowSource::Reported => "the limit an overflow error stated",
            WindowSource::Configured => "configured",
            WindowSource::Discovered => "said by the server",
            WindowSource::Bound => "below a request that did not fit",
        }
    }

    /// Whether panto learned it from a request (a stated limit or a bound), rather than being
    /// told: what an agent persists so that the next conversation starts knowing it.
    pub fn is_learned(self) -> bool {
        matches!(self, WindowSource::Reported | WindowSource::Bound)
    }
}

impl fmt::Display for WindowSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model's context window in tokens, and where that number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Window {
    /// The window, in tokens.
    pub tokens: u64,
    /// Where it came from.
    pub source: WindowSource,
}

impl Window {
    /// A window of `tokens` from `source`.
    pub fn new(tokens: u64, source: WindowSource) -> Window {
        Window { tokens, source }
    }
}

/// The windows known for one model, one per source, and the one that counts
/// ([`KnownWindows::window`]): the smallest. Every source is a claim about how much the model
/// takes, and the smallest claim is the one under which no request is refused; a value that
/// went stale (a server restarted with a larger context) is forgotten by whoever stored it.
///
/// ```
/// use panto_compact::{KnownWindows, Window, WindowSource};
///
/// let mut known = KnownWindows::new().with(Window::new(131_072, WindowSource::Discovered));
/// assert_eq!(known.window(), Some(Window::new(131_072, WindowSource::Discovered)));
/// // An overflow said 4,096: that is the window now, and what to persist.
/// known.learn(Window::new(4_096, WindowSource::Reported));
/// assert_eq!(known.window(), Some(Window::new(4_096, WindowSource::Reported)));
/// assert_eq!(known.learned(), Some(Window::new(4_096, WindowSource::Reported)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KnownWindows {
    /// The limit an overflow error stated (the latest one).
    pub reported: Option<u64>,
    /// The configured window.
    pub configured: Option<u64>,
    /// The window the server said.
    pub discovered: Option<u64>,
    /// The tightest bound requests that did not fit taught.
    pub bound: Option<u64>,
}

impl KnownWindows {
    /// Nothing known.
    pub fn new() -> KnownWindows {
        KnownWindows::default()
    }

    /// The same, knowing `window` too ([`KnownWindows::learn`]).
    #[must_use]
    pub fn with(mut self, window: Window) -> KnownWindows {
        self.learn(window);
        self
    }

    /// Records `window` under its source: a stated limit, a configured or a discovered window
    /// replaces the earlier one of its source (the latest word counts); a bound replaces the
    /// earlier bound only when it is tighter (every bound holds). A window of 0 tokens says
    /// nothing and is ignored.
    pub fn learn(&mut self, window: Window) {
        if window.tokens == 0 {
            return;
        }
        let slot = match window.source {
            WindowSource::Reported => &mut self.reported,
            WindowSource::Configured => &mut self.configured,
            WindowSource::Discovered => &mut self.discovered,
            WindowSource::Bound => {
                self.bound = Some(self.bound.map_or(window.tokens, |b| b.min(window.tokens)));
                return;
            }
        };
        *slot = Some(window.tokens);
    }

    /// The window that counts: the smallest known, with its source (on a tie, the first of
    /// reported, configured, discovered, bound). `None` when nothing is known.
    pub fn window(&self) -> Option<Window> {
        [
            (self.reported, WindowSource::Reported),
            (self.configured, WindowSource::Configured),
            (self.discovered, WindowSource::Discovered),
            (self.bound, WindowSource::Bound),
        ]
        .into_iter()
        .filter_map(|(tokens, source)| tokens.map(|t| Window::new(t, source)))
        .reduce(|best, w| if w.tokens < best.tokens { w } else { best })
    }

    /// What was learned from requests, to persist: the smaller of the stated limit and the
    /// bound (the stated limit on a tie).
    pub fn learned(&self) -> Option<Window> {
        KnownWindows {
            reported: self.reported,
            bound: self.bound,
            ..KnownWindows::default()
        }
        .window()
    }
}

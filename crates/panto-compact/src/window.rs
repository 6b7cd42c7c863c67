//! The model's context window as one value ([`KnownWindows`]: every source, and what requests
//! taught), with the rules that combine it: the window that counts for a person
//! ([`KnownWindows::window`]), the limit a compaction plans in, in panto's estimated tokens
//! ([`KnownWindows::limit`], [`KnownWindows::known_limit`]), and what to persist
//! ([`KnownWindows::learned`]). Every rule is a pure function of the value.
//!
//! The [`Driver`](crate::Driver) owns one; a compaction run takes it and gives it back updated
//! ([`Compactor::compact`](crate::Compactor::compact)): the overflow that started the run, a
//! limit a compaction request was refused with, the largest request a model took.

use std::fmt;

use panto_provider::ProviderError;

use crate::catalogue;

/// Where a context window came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WindowSource {
    /// A context-overflow error stated it: the provider's own word.
    Reported,
    /// The configuration (`context_window` in the CLI; [`Window`] given to the
    /// [`Driver`](crate::Driver) with this source).
    Configured,
    /// The server said it when asked (llama-server's `/props`, Ollama's `/api/ps` and
    /// `/api/show`, vLLM's and LM Studio's model listings).
    Discovered,
    /// Learned from a request that did not fit without a stated limit (an overflow that gave
    /// no numbers, or a request the server truncated silently): the window is below panto's
    /// estimate of that request.
    Bound,
    /// panto's catalogue of the windows of well-known models (`catalogue.txt`, with the date it
    /// was checked against the providers' documentation): the lowest priority, used only when
    /// nothing else is known.
    Catalogue,
}

impl WindowSource {
    /// Every source, in the order a tie between equal windows is decided.
    pub const ALL: [WindowSource; 5] = [
        WindowSource::Reported,
        WindowSource::Configured,
        WindowSource::Discovered,
        WindowSource::Bound,
        WindowSource::Catalogue,
    ];

    /// The word for it in files and documents: `overflow`, `configured`, `discovered`, `bound`
    /// or `catalogue`.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Reported => "overflow",
            WindowSource::Configured => "configured",
            WindowSource::Discovered => "discovered",
            WindowSource::Bound => "bound",
            WindowSource::Catalogue => "catalogue",
        }
    }

    /// The source named `word` ([`WindowSource::as_str`]), if any.
    pub fn parse(word: &str) -> Option<WindowSource> {
        WindowSource::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// Where the window came from, in a few words for a person: "the limit an overflow error
    /// stated", "configured", "said by the server", "below a request that did not fit", "panto's
    /// catalogue of well-known models".
    pub fn describe(self) -> &'static str {
        match self {
            WindowSource::Reported => "the limit an overflow error stated",
            WindowSource::Configured => "configured",
            WindowSource::Discovered => "said by the server",
            WindowSource::Bound => "below a request that did not fit",
            WindowSource::Catalogue => "panto's catalogue of well-known models",
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

/// A limit a context-overflow error stated, with the counts that turn it into panto's estimate:
/// when the provider counted the refused request above panto's estimate of it, panto's
/// estimates run low against this provider, so the limit is scaled down in proportion
/// ([`Stated::in_estimate`]); never up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stated {
    /// The limit, in the provider's tokens.
    pub tokens: u64,
    /// The provider's count of the refused request, when it said one.
    pub counted: Option<u64>,
    /// panto's estimate of the refused request, when known.
    pub estimated: Option<u64>,
    /// The output budget the provider said it counted against the limit, when it said
    /// ([`TokenNumbers::output_tokens`](panto_provider::TokenNumbers)).
    pub output: Option<u64>,
}

impl Stated {
    /// A limit of `tokens`, without the counts of the request it refused.
    pub fn new(tokens: u64) -> Stated {
        Stated {
            tokens,
            counted: None,
            estimated: None,
            output: None,
        }
    }

    /// The same, with the output budget the provider said it counted against the limit.
    #[must_use]
    pub fn with_output(mut self, output: Option<u64>) -> Stated {
        self.output = output;
        self
    }

    /// The same, stated for a request the provider counted at `counted` tokens (when it said)
    /// and panto estimated at `estimated`.
    #[must_use]
    pub fn with_counts(mut self, counted: Option<u64>, estimated: u64) -> Stated {
        self.counted = counted;
        self.estimated = Some(estimated);
        self
    }

    /// Whether its numbers show that the server counts the output budget against its window:
    /// it said which output it counted (vLLM's "maximum context length is 8,000 tokens.
    /// However, you requested 9,000 tokens (7,000 in the messages, 2,000 in the completion)",
    /// Anthropic's "143,653 + 64,000 > 200,000"), or the input it counted lies within the
    /// limit it stated, so the request was refused for what it asked beyond its input. An input
    /// counted above the limit, without the output, shows nothing: the input alone was too
    /// much.
    pub fn shows_output_counted(&self) -> bool {
        self.output.is_some_and(|o| o > 0)
            || matches!(self.counted, Some(counted) if counted > 0 && counted <= self.tokens)
    }

    /// The limit in panto's estimated tokens: scaled by `estimated / counted` when the provider
    /// counted the refused request higher than panto did, else as stated.
    pub fn in_estimate(&self) -> u64 {
        match (self.counted, self.estimated) {
            (Some(counted), Some(estimated)) if counted > estimated => {
                scale(self.tokens, estimated, counted)
            }
            _ => self.tokens,
        }
    }
}

/// A request the provider refused as too large: panto's estimate of it, and the numbers the
/// provider gave (its count, the limit it stated). What an overflow teaches the window
/// ([`KnownWindows::overflowed`]), and what bounds the requests of the compaction after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overflow {
    /// panto's estimate of the refused request, when known.
    pub estimated: Option<u64>,
    /// The provider's count of it, when the error stated one.
    pub counted: Option<u64>,
    /// The limit the error stated, when it did.
    pub stated: Option<u64>,
    /// The output budget the error said it counted against that limit, when it did.
    pub output: Option<u64>,
    /// The output budget the refused request asked for (its `max_tokens`), when the caller
    /// knows it ([`Overflow::with_budget`]): what a server that counts the output counted
    /// besides the input when the error did not say.
    pub budget: Option<u64>,
}

impl Overflow {
    /// The overflow `error` (a [`ProviderError::ContextOverflow`]; any other error states no
    /// numbers) answered to a request panto estimated at `estimated` tokens.
    pub fn new(error: &ProviderError, estimated: u64) -> Overflow {
        let numbers = error.token_numbers().unwrap_or_default();
        Overflow {
            estimated: Some(estimated),
            counted: numbers.input_tokens,
            stated: numbers.limit,
            output: numbers.output_tokens,
            budget: None,
        }
    }

    /// The same, for a request that asked for up to `budget` output tokens.
    #[must_use]
    pub fn with_budget(mut self, budget: u64) -> Overflow {
        self.budget = Some(budget);
        self
    }

    /// The limit it stated, unless its own numbers contradict it: the input the provider
    /// counted, with the output counted (the one the error stated, else the request's budget),
    /// lies within that limit, so the limit does not explain the refusal ("maximum context
    /// length is 1,501 tokens. However, you requested 1,093 tokens (843 in the messages, 250
    /// in the completion)", from a server whose window is 1,001). A contradicted limit says
    /// nothing of the window, and the overflow teaches what one that states none does
    /// ([`KnownWindows::overflowed`]), as a fold's refusal does (`believed_limit`). Believed
    /// when the provider did not say what it counted (panto's estimate may be far below its
    /// count), or when the output counted is not known (a server that counts it may refuse an
    /// input within its limit).
    pub fn believed(&self) -> Option<u64> {
        let limit = self.stated?;
        let (Some(counted), Some(output)) = (self.counted, self.output.or(self.budget)) else {
            return Some(limit);
        };
        (counted.saturating_add(output) > limit).then_some(limit)
    }

    /// An overflow that stated `limit` (when `Some`), of a request whose size is not known.
    pub fn stating(limit: Option<u64>) -> Overflow {
        Overflow {
            stated: limit,
            ..Overflow::default()
        }
    }
}

/// Everything known about one model's context window: the windows known from every source,
/// one per source, and what requests taught (the largest request known to fit). The
/// [`Driver`](crate::Driver) owns one for its model; a compaction run takes it and gives it back
/// updated. Every rule that combines it is a method here.
///
/// The window that counts ([`KnownWindows::window`]) is the smallest known: every source is a
/// claim about how much the model takes, and the smallest claim is the one under which no
/// request is refused; a value that went stale (a server restarted with a larger context) is
/// forgotten by whoever stored it. The catalogue counts only when nothing else is known.
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
    /// The limit an overflow error stated (the latest one), with the counts that scale it.
    pub reported: Option<Stated>,
    /// The configured window.
    pub configured: Option<u64>,
    /// The window the server said.
    pub discovered: Option<u64>,
    /// The catalogue's window for the model's name.
    pub catalogue: Option<u64>,
    /// The tightest bound requests that did not fit taught: the window is below it.
    pub bound: Option<u64>,
    /// The largest request the provider is known to have taken, in panto's estimated tokens
    /// (the conversation's request before an overflow, or a compaction request a model
    /// answered): the window holds at least this much.
    pub accepted: Option<u64>,
    /// Whether the server counts a request's output budget (its `max_tokens`) against the
    /// window, as `OpenAI` and vLLM do ("you requested 6,616 tokens (568 in the messages,
    /// 6,048 in the completion)"), rather than the input only, as llama.cpp does (`n_prompt_tokens`
    /// against `n_ctx`): learned from a refusal whose numbers show it
    /// ([`KnownWindows::overflowed`]); `None` while nothing has. It decides the room a request
    /// keeps for its reply ([`KnownWindows::reply_room`]).
    pub counts_output: Option<bool>,
}

impl KnownWindows {
    /// Nothing known.
    pub fn new() -> KnownWindows {
        KnownWindows::default()
    }

    /// What panto's catalogue says of `model` ([`KnownWindows::with_catalogue`]), and nothing
    /// else.
    pub fn for_model(model: &str) -> KnownWindows {
        KnownWindows::new().with_catalogue(model)
    }

    /// The same, knowing `window` too ([`KnownWindows::learn`]).
    #[must_use]
    pub fn with(mut self, window: Window) -> KnownWindows {
        self.learn(window);
        self
    }

    /// The same, with the catalogue's window for `model` (none when the catalogue does not know
    /// the name).
    #[must_use]
    pub fn with_catalogue(mut self, model: &str) -> KnownWindows {
        self.catalogue = catalogue::window(model);
        self
    }

    /// Records `window` under its source: a stated limit, a configured, a discovered or a
    /// catalogue window replaces the earlier one of its source (the latest word counts); a bound
    /// replaces the earlier bound only when it is tighter (every bound holds). A window of 0
    /// tokens says nothing and is ignored.
    pub fn learn(&mut self, window: Window) {
        if window.tokens == 0 {
            return;
        }
        let slot = match window.source {
            WindowSource::Reported => {
                self.reported = Some(Stated::new(window.tokens));
                return;
            }
            WindowSource::Bound => {
                self.bound = Some(self.bound.map_or(window.tokens, |b| b.min(window.tokens)));
                return;
            }
            WindowSource::Configured => &mut self.configured,
            WindowSource::Discovered => &mut self.discovered,
            WindowSource::Catalogue => &mut self.catalogue,
        };
        *slot = Some(window.tokens);
    }

    /// Records a limit an overflow stated, with its counts: it replaces the earlier one (the
    /// provider's latest word); and when the input it counted lies within that limit, that the
    /// server counts the output too ([`Stated::shows_output_counted`]). A limit of 0 says
    /// nothing.
    pub fn learn_stated(&mut self, stated: Stated) {
        if stated.shows_output_counted() {
            self.counts_output = Some(true);
        }
        if stated.tokens > 0 {
            self.reported = Some(stated);
        }
    }

    /// Records what `overflow` taught: the limit it stated (with its counts,
    /// [`KnownWindows::learn_stated`]) when its own numbers do not contradict it
    /// ([`Overflow::believed`]), else a bound just below panto's estimate of the refused
    /// request (and, when the error said which output it counted, that the server counts the
    /// output). Learning it twice changes nothing.
    pub fn overflowed(&mut self, overflow: &Overflow) {
        match (overflow.believed(), overflow.estimated) {
            (Some(limit), estimated) => self.learn_stated(Stated {
                tokens: limit,
                counted: overflow.counted,
                estimated,
                output: overflow.output,
            }),
            (None, Some(estimated)) => {
                if overflow.output.is_some_and(|o| o > 0) {
                    self.counts_output = Some(true);
                }
                self.learn(Window::new(
                    estimated.saturating_sub(1),
                    WindowSource::Bound,
                ));
            }
            (None, None) => {}
        }
    }

    /// The room a request within a window of `limit` tokens keeps for a reply of up to `reply`
    /// tokens (its output limit): the whole reply when the server counts the output against the
    /// window ([`KnownWindows::counts_output`]), since a request whose input and output budget
    /// exceed the window is refused; else at most an eighth of the window, which a server that
    /// counts the input only does not require (it takes any input within its window) but which
    /// leaves the reply room to be written. A reply above half the window is never kept whole:
    /// a server that counted it would have left the conversation less room than the reply (and
    /// refused every request long before), so the numbers that said so were a limit stated
    /// too high, not an output counted.
    pub fn reply_room(&self, reply: u64, limit: u64) -> u64 {
        if self.counts_output == Some(true) && reply <= limit / 2 {
            reply
        } else {
            reply.min(limit / 8)
        }
    }

    /// Records that a request of `tokens` (panto's estimate) was taken: the largest counts.
    pub fn learn_accepted(&mut self, tokens: u64) {
        self.accepted = Some(self.accepted.map_or(tokens, |a| a.max(tokens)));
    }

    /// The windows stated for the model, as their source said them, in the order of a tie.
    fn stated(&self) -> [(Option<u64>, WindowSource); 4] {
        [
            (self.reported.map(|r| r.tokens), WindowSource::Reported),
            (self.configured, WindowSource::Configured),
            (self.discovered, WindowSource::Discovered),
            (self.bound, WindowSource::Bound),
        ]
    }

    /// The window that counts: the smallest known, with its source (on a tie, the first of
    /// reported, configured, discovered, bound); the catalogue's when nothing else is known.
    /// `None` when nothing is known.
    pub fn window(&self) -> Option<Window> {
        smallest(self.stated().into_iter()).or(self
            .catalogue
            .map(|t| Window::new(t, WindowSource::Catalogue)))
    }

    /// What was learned from requests, to persist: the smaller of the stated limit and the
    /// bound (the stated limit on a tie).
    pub fn learned(&self) -> Option<Window> {
        smallest(
            [
                (self.reported.map(|r| r.tokens), WindowSource::Reported),
                (self.bound, WindowSource::Bound),
            ]
            .into_iter(),
        )
    }

    /// The window in panto's estimated tokens, what every request must fit: the smallest known
    /// (a stated limit scaled by its counts, [`Stated::in_estimate`]; the bound included); the
    /// catalogue's when nothing else is known.
    pub fn limit(&self) -> Option<u64> {
        let estimated = [
            self.reported.map(|r| r.in_estimate()),
            self.configured,
            self.discovered,
            self.bound,
        ];
        estimated.into_iter().flatten().min().or(self.catalogue)
    }

    /// The smallest window someone stated (an overflow's limit, scaled; the configured one; the
    /// server's), in panto's estimated tokens, when it lies below the bound: a stated window at
    /// or above a request that did not fit is stale (or a model's longest context that the
    /// server does not serve). The catalogue's when nothing at all is known.
    pub fn stated_limit(&self) -> Option<u64> {
        let stated = [
            self.reported.map(|r| r.in_estimate()),
            self.configured,
            self.discovered,
        ];
        let below = stated
            .into_iter()
            .flatten()
            .filter(|&w| self.bound.is_none_or(|b| w <= b))
            .min();
        match (below, self.bound) {
            (Some(w), _) => Some(w),
            (None, Some(_)) => None,
            (None, None) => self.catalogue,
        }
    }

    /// The same as the provider said it: the smallest window stated below the bound, in the
    /// provider's tokens (what bounds an overflow's requests, counted in the provider's
    /// tokens too).
    pub fn stated_window(&self) -> Option<u64> {
        [
            self.reported.map(|r| r.tokens),
            self.configured,
            self.discovered,
        ]
        .into_iter()
        .flatten()
        .filter(|&w| self.bound.is_none_or(|b| w <= b))
        .min()
    }

    /// The smallest window that decides the form of a compaction's requests ([`crate::prompt`]'s
    /// `form_limit`): stated ([`KnownWindows::stated_window`]), or bounded below `bounded` by a
    /// request that did not fit (in panto's tokens, as a fold's own refusals bound it). A window
    /// learned only by refusals (an earlier overflow's) is small to every later compaction as
    /// it was to the fold that learned it: the short prompt with its floor of 256 and the
    /// summary carried leave no transcript in a bound of about 800 tokens.
    pub(crate) fn form_window(&self, bounded: u64) -> Option<u64> {
        let found = self.bound.filter(|&b| b < bounded);
        [self.stated_window(), found].into_iter().flatten().min()
    }

    /// The limit a compaction run knows, in panto's estimated tokens. After an overflow that
    /// stated no limit (`unstated_overflow`), only a window stated below the request that
    /// overflowed ([`KnownWindows::stated_limit`]): the bound that request taught says only
    /// that the window is smaller, maybe far smaller. Otherwise [`KnownWindows::limit`], the
    /// bound included.
    pub fn known_limit(&self, unstated_overflow: bool) -> Option<u64> {
        if unstated_overflow {
            self.stated_limit()
        } else {
            self.limit()
        }
    }
}

/// The smallest of the windows known, with its source; on a tie, the first.
fn smallest(windows: impl Iterator<Item = (Option<u64>, WindowSource)>) -> Option<Window> {
    windows
        .filter_map(|(tokens, source)| tokens.map(|t| Window::new(t, source)))
        .reduce(|best, w| if w.tokens < best.tokens { w } else { best })
}

/// `value * numerator / denominator`, rounded down, without overflow.
pub(crate) fn scale(value: u64, numerator: u64, denominator: u64) -> u64 {
    let scaled = u128::from(value) * u128::from(numerator) / u128::from(denominator.max(1));
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

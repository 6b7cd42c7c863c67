//! Where a fold stands (`FoldState`): the summary so far (`SoFar`), what it knows and guesses
//! of the window (`Limits`), the outputs it allows (`Outputs`), what the models were asked and
//! refused (`Asked`); what it produced (`Folded`); and what the run learned (`Taught`). What it
//! walks is in `parts.rs`; the walk itself in `walk.rs`.

use std::collections::HashSet;

use panto_model::{EffectiveContext, Usage};
use panto_provider::ProviderError;
use panto_transcript::Ledger;

use super::limits::{believed_limit, halfway};
use super::{MAX_SHRINKS, Prepared};
use crate::attempt::AttemptFailure;
use crate::bound::RequestBound;
use crate::config::{ModelRef, min_known};
use crate::fold::{FoldBudget, FoldPlan, MIN_OUTPUT_TOKENS, output_floor};
use crate::ledger::{ledger_budget, previous_ledger, rendered_len};
use crate::prompt::form_limit;
use crate::report::{ElidedItem, FoldStep};
use crate::window::{KnownWindows, Stated};

/// The request (input and output together, in panto's estimate) below which a refusal
/// without a limit the fold believes gives the fold the tiny output floor: 1,700 tokens. A
/// window of 2,048 of a provider's tokens (Ollama's default) that counts up to a fifth above
/// panto's estimate (llama.cpp's about 1.05 times it; the pressure tests' servers 0.8 to 1.19)
/// refuses nothing under about 1,707 of panto's, and keeps the floor of 256. (At 1,500, three
/// quarters of [`crate::TINY_PROMPT_BELOW`], which would allow a third, the small-window probe
/// had 7 cases over the bound in three seeds of 2,000 instead of 2.)
pub(super) const FLOOR_TINY_BELOW: u64 = 1_700;

/// Where a fold stands: everything it needs to go on from where it is.
pub(super) struct FoldState {
    /// The summary and the record so far, and what was sent.
    pub(super) so_far: SoFar,
    /// What the fold knows and guesses of the window.
    pub(super) limits: Limits,
    /// The output limits of its requests.
    pub(super) output: Outputs,
    /// What the models were asked, and what they refused.
    pub(super) asked: Asked,
    /// Steps planned for the material after the one being folded (the turns after the
    /// carried summary's pieces), so that the count shown is the whole fold's.
    pub(super) later_steps: usize,
    /// The run's extra instructions, for a system prompt chosen again for a smaller window.
    pub(super) instructions: Option<String>,
}

/// The summary and the record so far.
pub(super) struct SoFar {
    /// The summary so far (the model's text, no ledger): `<previous-summary>` of the next
    /// request.
    pub(super) running: Option<String>,
    /// The whole record so far: the previous entry's, merged with every chunk summarized.
    pub(super) ledger: Ledger,
    /// The steps, requests, elisions and models so far.
    pub(super) folded: Folded,
    /// The natural size of the ledger's rendering ([`ledger_budget`] of what was there and
    /// what is summarized).
    pub(super) natural_ledger_chars: usize,
    /// How far the summary covers the prefix's turns, after the latest step of them: kept
    /// when the fold fails later, so that panto's record is written only of the turns after.
    pub(super) covered: Option<Covered>,
}

/// What the summary so far covers after a step of the prefix's turns (a model's summary or
/// panto's record of that step): the turns whose messages end at `until`, in `summary`, made
/// by the first `steps` steps. (A pass that condenses the summary later changes none of it.)
#[derive(Clone)]
pub(super) struct Covered {
    /// The end of the messages covered, in the context's messages.
    pub(super) until: usize,
    /// The summary so far then (the text, no ledger).
    pub(super) summary: String,
    /// The steps that made it.
    pub(super) steps: usize,
}

/// What a fold knows and guesses of the window, in panto's estimated tokens.
pub(super) struct Limits {
    /// The limit every request must fit (smaller after a shrink, higher while it probes).
    pub(super) limit: Option<u64>,
    /// The smallest input the provider rejected as too large without stating its limit: the
    /// window is below it (and above `proven`).
    pub(super) upper: Option<u64>,
    /// The largest input of a request the provider accepted: once a rejection has shown the
    /// window below the planned limit, only this much is known to fit.
    pub(super) proven: u64,
    /// The largest request the provider accepted, its input and the output it allowed
    /// together: what is known to fit however the server counts.
    pub(super) proven_total: u64,
    /// The latest limit the provider stated when it refused a request of the fold, with its
    /// counts.
    pub(super) stated: Option<Stated>,
    /// The smallest window stated for the model when the fold started, in the provider's
    /// tokens ([`KnownWindows::stated_window`]): with `stated`, what decides whether the
    /// window is tiny ([`Limits::form`]).
    pub(super) stated_window: Option<u64>,
    /// The smallest compaction request (input and output together, in panto's estimate) the
    /// provider refused without a limit the fold believes: the window lies below it. Under
    /// [`crate::TINY_PROMPT_BELOW`] it gives the fold the tiny prompt ([`Limits::prompt_form`]),
    /// under [`FLOOR_TINY_BELOW`] the tiny output floor too ([`Limits::form`]).
    pub(super) refused_below: Option<u64>,
    /// How often the limit was shrunk after a rejection.
    pub(super) shrinks: usize,
    /// Whether the fall back after the fold's last shrink carried more input than was taken,
    /// beside a floor its refusal made smaller ([`Limits::fall_back`]).
    pub(super) wide: bool,
    /// Whether the limit after the fold's last shrink was guessed above the least a fold can
    /// work in, nothing taken yet ([`Limits::bracket`]): its refusal falls back to that least.
    pub(super) above_least: bool,
    /// Whether the limit is a try above the largest request taken ([`Limits::try_higher`]),
    /// which no request may have filled: the request after the compaction is sized to what
    /// was taken instead ([`Run::retry_target`](super::run::Run::retry_target)).
    pub(super) tried: bool,
    /// What bounds an overflow's requests: a summary cut at its output limit is asked again
    /// only while the fold stays within it.
    pub(super) request_bound: Option<RequestBound>,
}

/// The output limits of a fold's requests.
pub(super) struct Outputs {
    /// The most ([`Run::max_output`](super::run::Run::max_output)).
    pub(super) max: u64,
    /// The least: 0 for the floor of the window ([`Limits::floor`]), doubled (up to the
    /// configured output limit) from a request's output each time a model's summary stopped
    /// at it.
    pub(super) min: u64,
}

/// What the models of a fold were asked, and what they refused.
#[derive(Default)]
pub(super) struct Asked {
    /// Inputs rejected as too large, by model: never sent to that model again.
    pub(super) rejected: HashSet<(String, u64)>,
    /// The last rejection, which a repeated input would get again.
    pub(super) last_overflow: Option<ProviderError>,
    /// Why the compaction model failed, once it has: it is not asked again in this fold.
    pub(super) compaction_model_failed: Option<AttemptFailure>,
    /// Every failed attempt so far, as `model: cause`.
    pub(super) failures: Vec<String>,
    /// Whether the latest request asked the compaction model (it is not asked once it failed),
    /// so that a step's warning names only the models that step asked.
    pub(super) compaction_model_asked: bool,
}

impl FoldState {
    /// The start of a fold of `prepared`, within the window the run knows (`windows`): the
    /// previous summary and record, nothing sent.
    pub(super) fn new(
        context: &EffectiveContext,
        prepared: &Prepared,
        max_output_tokens: u32,
        windows: &KnownWindows,
    ) -> FoldState {
        FoldState {
            so_far: SoFar {
                running: prepared.previous_summary.clone(),
                ledger: previous_ledger(context),
                folded: Folded::default(),
                natural_ledger_chars: ledger_budget(
                    max_output_tokens,
                    rendered_len(context),
                    prepared.transcript_len(),
                    None,
                ),
                covered: None,
            },
            limits: Limits {
                limit: prepared.limit,
                upper: None,
                proven: 0,
                proven_total: 0,
                stated: None,
                stated_window: windows.stated_window(),
                // A bound an earlier overflow taught bounds this fold's requests too.
                refused_below: windows.bound.filter(|&b| b < FLOOR_TINY_BELOW),
                shrinks: 0,
                wide: false,
                above_least: false,
                tried: false,
                request_bound: None,
            },
            output: Outputs {
                max: u64::from(max_output_tokens.max(MIN_OUTPUT_TOKENS)),
                min: 0,
            },
            asked: Asked::default(),
            later_steps: 0,
            instructions: None,
        }
    }

    /// What the fold's requests must fit now: the limit, `fixed`, the summary the first request
    /// carries (`previous` tokens), and the output limit and floor (the window's, never the
    /// tiny one of a limit estimated below a window stated larger: [`Limits::floor`]).
    pub(super) fn budget(&self, fixed: u64, previous: u64) -> FoldBudget {
        FoldBudget::new(self.limits.limit, fixed, previous, self.output.max)
            .with_min_output(self.output.min.max(self.limits.floor()))
    }

    /// Whether a plan of `requests` more requests from here keeps the fold within the
    /// overflow's bound on requests (always, when there is none).
    pub(super) fn within_bound(&self, requests: usize) -> bool {
        self.limits.request_bound.is_none_or(|bound| {
            self.requests_in_all(requests) <= bound.compaction_requests(self.limits.upper)
        })
    }

    /// The fold's compaction requests in all with `more` requests from here: those sent, the
    /// `more`, and the steps planned for the material after this one.
    fn requests_in_all(&self, more: usize) -> usize {
        self.so_far.folded.requests + more + self.later_steps
    }

    /// Whether the fold stays below the try `at` for the overflow's bound on requests
    /// ([`RequestBound`]), when it would send `steps` more requests staying at its limit:
    /// staying keeps within the bound for every window the refusals leave possible (the
    /// largest of them, just under the smallest request refused, allows the fewest
    /// requests), and the try, refused by a window just under it, would cost one more request
    /// than that window allows. At 1,982 tokens stated nowhere the fold's last try
    /// (1,809 + 256, after 1,649 + 256 was taken and 2,071 + 256 refused) was refused by 83
    /// tokens: 12 requests for the 11, where staying takes 11, within the bound for
    /// every window up to 2,336 tokens (the issue allows 11 from 1,962 tokens). Only the
    /// fold's own estimate of the steps left counts, and only where staying holds everywhere:
    /// weighing the windows each choice takes over the bound (as though every window of the
    /// bracket were as likely) took 36 cases of the sweep's probe over it against 4.
    pub(super) fn stays_within_bound(&self, at: &Try, steps: u64) -> bool {
        let limits = &self.limits;
        let (Some(bound), Some(below)) = (limits.request_bound, limits.refused_below) else {
            return false;
        };
        let requests = self.requests_in_all(0) as u64 + steps;
        limits.proven < at.probe
            && at.probe < below
            && bound.allows(requests, below - 1)
            && !bound.allows(requests + 1, at.probe - 1)
    }

    /// The output limit of a request of `input_tokens` in `plan` (the `last` of the fold, or
    /// not). The plan leaves every request at least the floor (`FoldPlan`'s invariants).
    pub(super) fn output_for(&self, plan: &FoldPlan, last: bool, input_tokens: u64) -> u32 {
        let least = self.output.min.max(self.limits.floor());
        let most = self.output.max.max(least);
        let output = match self.limits.limit {
            None => most,
            // The last request may take more output, up to the limit; where the window was
            // found only below a refusal (the limit a guess, maybe a try higher), no further
            // than a request the provider took: a larger output would risk a refusal (a
            // request) for a longer summary, not for fewer requests.
            Some(l) if last && self.limits.upper.is_some() && self.limits.proven_total > 0 => {
                let taken = self.limits.proven_total.saturating_sub(input_tokens);
                most.min(l.saturating_sub(input_tokens))
                    .min(taken.max(plan.output))
            }
            Some(l) if last => most.min(l.saturating_sub(input_tokens)),
            Some(l) => plan.output.min(l.saturating_sub(input_tokens)),
        }
        .max(least);
        u32::try_from(output).unwrap_or(u32::MAX)
    }
}

impl Limits {
    /// The limit that decides the form of the fold's requests within `limit` (the output
    /// floor, [`Limits::floor`]; [`form_limit`]): a window stated (when the fold started, or by
    /// a refusal of the fold, the smaller) is tiny only as stated, and one that states no limit
    /// once a compaction request under [`FLOOR_TINY_BELOW`] was refused.
    pub(super) fn form(&self, limit: Option<u64>) -> Option<u64> {
        self.form_under(limit, FLOOR_TINY_BELOW)
    }

    /// The limit that decides the built-in prompt's form within `limit`: as [`Limits::form`],
    /// and tiny once a compaction request under [`crate::TINY_PROMPT_BELOW`] was refused
    /// without a limit the fold believes (issue 26 point 6: a window known *or bounded* below
    /// the threshold). The bound is in panto's tokens, so a window of 2,048 of a provider that
    /// counts above panto's estimate may get the tiny prompt; its output floor stays 256 unless
    /// a request under [`FLOOR_TINY_BELOW`] was refused.
    pub(super) fn prompt_form(&self, limit: Option<u64>) -> Option<u64> {
        self.form_under(limit, crate::TINY_PROMPT_BELOW)
    }

    /// [`form_limit`] of `limit` with the smallest window known: stated when the fold started,
    /// stated by a refusal it believes, or bounded by a refusal of a request under `bounded`.
    fn form_under(&self, limit: Option<u64>, bounded: u64) -> Option<u64> {
        let stated = min_known(self.stated_window, self.stated.map(|s| s.tokens));
        let found = self.refused_below.filter(|&b| b < bounded);
        form_limit(limit, min_known(stated, found))
    }

    /// The output floor of the fold's requests now: [`output_floor`] of the limit's form
    /// ([`Limits::form`]).
    pub(super) fn floor(&self) -> u64 {
        output_floor(self.form(self.limit))
    }

    /// The limit the fold falls back to after a refusal, a request having been taken: the
    /// largest input taken (`proven`) with the output floor of the limit refused
    /// ([`Limits::floor`]), also once after the fold's last shrink; after that one's refusal,
    /// [`Limits::known_to_fit`]. The two differ when a refusal under [`FLOOR_TINY_BELOW`]
    /// made the floor a tenth of the limit: the first then leaves more input than was taken
    /// beside the smaller floor, which a server counting the output too takes (973 + 108
    /// after 825 + 256 at 1,126 tokens, 754 + 84 after 742 + 91 at 1,056: fewer requests, as
    /// issue 39's bound needs) and one counting the input only refuses (1,230 + 136 after
    /// 1,209 + 256): panto cannot tell which it is, so after the last shrink such a refusal
    /// is allowed one more, falling back to no more input than was taken
    /// ([`Limits::may_fall_back`]).
    pub(super) fn fall_back(&mut self) -> u64 {
        let taken = self.known_to_fit();
        let floor_before = self.proven + self.floor();
        if self.shrinks <= MAX_SHRINKS {
            floor_before
        } else if !self.wide && floor_before > taken {
            self.wide = true;
            floor_before
        } else {
            taken
        }
    }

    /// The limit that is known to fit however the server counts: the largest input a request
    /// of the fold had taken (`proven`), with the output floor of that limit's own form
    /// ([`Limits::floor`] at it). The floor at the limit before the refusal may be larger: a
    /// refusal under [`FLOOR_TINY_BELOW`] makes the floor a tenth of the limit, so `proven`
    /// with the old floor of 256 left an input above `proven` beside the tiny floor (a request
    /// of 1,238 tokens, over the 1,209 taken, refused as the fold's fourth).
    fn known_to_fit(&self) -> u64 {
        let room = |limit: u64| limit.saturating_sub(output_floor(self.form(Some(limit))));
        let mut limit = self.proven + self.floor();
        // The floor shrinks by a tenth of the limit at most: a few steps settle it.
        while room(limit) > self.proven {
            limit -= room(limit) - self.proven;
        }
        limit
    }

    /// Whether a request of `input_tokens` rejected after the fold's last shrink may still
    /// fall back to what is known to fit: when it tried higher than a request the provider
    /// took, after a rejection that stated no limit, or, nothing taken, when it was the guess
    /// above the least limit ([`Limits::bracket`]). The fold then goes on at that size (or that
    /// least) and tries no higher: the third rejection of the fold is its last, unless its
    /// fall back carried more input than was taken beside a floor the refusal made smaller
    /// ([`Limits::fall_back`]): its refusal falls back once more, to no more input than that.
    pub(super) fn may_fall_back(&self, input_tokens: u64) -> bool {
        let last = self.shrinks == MAX_SHRINKS
            && self.upper.is_some()
            && if self.proven > 0 {
                self.proven < input_tokens
            } else {
                self.above_least
            };
        let wide = self.shrinks == MAX_SHRINKS + 1 && self.wide && self.proven < input_tokens;
        last || wide
    }

    /// The limit after a refusal of a request of `input` estimated tokens allowing `output`
    /// more, from the shrink's `guess`: never below `least`, the least limit a fold can work in
    /// (a guess may undershoot), when that least is below the refused input; and when the
    /// refusal stated no limit the fold believes (`believed`, [`believed_limit`]), bracketed
    /// ([`Limits::bracket`]).
    pub(super) fn settle(
        &mut self,
        guess: u64,
        least: u64,
        (input, output): (u64, u64),
        believed: Option<u64>,
    ) -> u64 {
        let smaller = if guess < least && least < input {
            least
        } else {
            guess
        };
        match believed {
            Some(_) => smaller,
            None => self.bracket(smaller, least, input + output),
        }
    }

    /// The limit after a shrink, `smaller` (at least `least`, the least limit a
    /// fold can work in), when the refusal of a request of `sent` tokens (input and output)
    /// stated no limit the fold believes and no request was taken: half way in proportion from
    /// `least` to `sent`. The shrink's guess (a quarter of the refused input) falls below the
    /// least limit there, and a fold climbing from its least request carries a fraction of the
    /// window a step (two refused requests, then 340 of the 1,044 tokens of a window that counts
    /// the output, climbing over four steps to 710). So too after the first refusal when `sent`
    /// is under [`FLOOR_TINY_BELOW`] and the guess fell to `least`: the window lies between the
    /// two, less than four times apart (a window of 1,001 climbed from 216 + 64 over three
    /// steps). A refusal of the guess after the last shrink falls back to `least`
    /// ([`Limits::may_fall_back`]); after the first, the last shrink guesses half way again.
    fn bracket(&mut self, smaller: u64, least: u64, sent: u64) -> u64 {
        let guess = halfway(least, sent);
        let first = self.shrinks < MAX_SHRINKS && smaller == least && sent < FLOOR_TINY_BELOW;
        if (self.shrinks == MAX_SHRINKS || first)
            && self.proven == 0
            && self.upper.is_some()
            && self.stated.is_none()
            && guess > smaller
            && guess < sent
        {
            self.above_least = true;
            return guess;
        }
        smaller
    }

    /// After an answer: a limit guessed after a rejection that stated none is likely below the
    /// window, so while rejections are left the next requests may try higher, half way (in
    /// proportion: the geometric mean) from the largest input taken to the most input the
    /// refusals allow at the floor ([`Limits::refused_input`]), and at most half again the
    /// input the limit allows; a failed try costs a request and sends the limit back to what is
    /// known to fit, never to an input sent before. After the shrinks a fold allows, one more
    /// try is left when something was taken: its failure falls back to that size for good.
    /// The try open now, when one is; whether it is taken is the walk's (`Walk::weigh_try`):
    /// when it is a tenth above the limit, or, closer, when it saves a request over the steps
    /// left (at 2,020 tokens stated nowhere the fold stayed at 1,381 + 256 for six steps
    /// because its try was 9.96% above the limit, one request over the bound; taken
    /// whenever it saved a request by the room alone, late tries with two steps left were
    /// refused at 1,937 to 1,959 tokens, with a tenth of margin on that room neither), and
    /// never when staying keeps the overflow's bound that a refused try would break
    /// ([`FoldState::stays_within_bound`]; docs/compaction.md).
    pub(super) fn try_higher(&self) -> Option<Try> {
        if let (Some(upper), Some(limit)) = (self.upper, self.limit)
            && self.shrinks <= MAX_SHRINKS
        {
            let floor = output_floor(self.form(Some(limit)));
            let between = halfway(self.proven, self.refused_input(upper, floor));
            // The most input the limit allows, and half again.
            let most = limit.saturating_sub(floor);
            let probe = between.min(most + most / 2) + floor;
            return (probe > limit).then_some(Try {
                limit,
                probe,
                floor,
            });
        }
        None
    }

    /// Takes the try `at` ([`Limits::try_higher`]): the fold's limit is now its probe.
    pub(super) fn take_try(&mut self, at: &Try) {
        self.limit = Some(at.probe);
        self.tried = true;
    }

    /// The most input the refusals that stated no limit allow a request with an output `floor`:
    /// the smallest input refused (`upper`), or, when larger, the smallest request refused
    /// (input and output) less `floor`. A server that counts the input only refuses the first;
    /// one that counts the output too (panto cannot tell which) takes an input up to the second
    /// once the floor is smaller than the refused request's output: 822 + 256 tokens refused at
    /// a window of 1,044 that counts the output, the tiny floor of 80 leaves room for an input
    /// of 960, not 822. A try above `upper` that an input-only server refuses falls back to
    /// what is known to fit, as any failed try ([`Limits::may_fall_back`]).
    fn refused_input(&self, upper: u64, floor: u64) -> u64 {
        upper.max(self.refused_below.map_or(0, |t| t.saturating_sub(floor)))
    }

    /// After a request of `input_tokens` (allowing `output` more) was refused with `error`: one
    /// more shrink, and what the refusal taught: the limit it stated, with its counts, when
    /// that limit explains the refusal (it is below what was sent, in panto's tokens); else,
    /// as for a refusal that stated none, that the window is below that input. A stated limit
    /// the refusal contradicts ("7,300 tokens > 10,636 maximum") says nothing of the window.
    /// Gives the limit believed ([`believed_limit`]), for the shrink that follows.
    pub(super) fn refused(
        &mut self,
        error: &ProviderError,
        input_tokens: u64,
        output: u64,
    ) -> Option<u64> {
        self.shrinks += 1;
        let stated = error.token_numbers().unwrap_or_default();
        let believed = believed_limit(error, input_tokens, output);
        if let Some(limit) = stated.limit
            && believed.is_some()
        {
            self.stated = Some(
                Stated::new(limit)
                    .with_counts(stated.input_tokens, input_tokens)
                    .with_output(stated.output_tokens),
            );
        } else {
            self.upper = Some(self.upper.map_or(input_tokens, |u| u.min(input_tokens)));
            let total = input_tokens + output;
            self.refused_below = Some(self.refused_below.map_or(total, |t| t.min(total)));
        }
        believed
    }
}

/// A try above the fold's limit ([`Limits::try_higher`]): the limit now, the limit tried and
/// the output floor at the limit now.
pub(super) struct Try {
    pub(super) limit: u64,
    pub(super) probe: u64,
    pub(super) floor: u64,
}

/// What a fold produced.
#[derive(Default)]
pub(super) struct Folded {
    pub(super) summary: String,
    pub(super) used: Option<ModelRef>,
    pub(super) fallback_cause: Option<AttemptFailure>,
    pub(super) steps: Vec<FoldStep>,
    pub(super) requests: usize,
    pub(super) elided: Vec<ElidedItem>,
    pub(super) ledger: Ledger,
    pub(super) degraded: Option<String>,
    /// Every failed attempt, as `model: cause`.
    pub(super) failures: Vec<String>,
    /// What the fold's requests cost, as the providers reported it (every answer counted,
    /// those the checks refused too).
    pub(super) usage: Option<Usage>,
}

/// What a run learned of the window and the models: the limit a compaction request was
/// refused with, the largest input a model took, the limit the fold ended with, and every
/// failed attempt. The window takes the first two ([`Taught::teach`]); panto's record, written
/// when the fold failed, is bounded by all of it.
#[derive(Default)]
pub(super) struct Taught {
    pub(super) stated: Option<Stated>,
    pub(super) proven: u64,
    pub(super) limit: Option<u64>,
    pub(super) failures: Vec<String>,
}

impl Taught {
    /// What the fold of `state` learned.
    pub(super) fn of(state: &FoldState) -> Taught {
        Taught {
            stated: state.limits.stated,
            proven: state.limits.proven,
            limit: state.limits.limit,
            failures: state.asked.failures.clone(),
        }
    }

    /// Gives `windows` what the run learned of the window: the limit the active model's
    /// provider stated when it refused a compaction request (the provider's latest word), and
    /// the largest compaction input a model took. A compaction request refused without a
    /// limit says less than a conversation's (its output counts against the window too), so
    /// it bounds the run's own tries only.
    pub(super) fn teach(&self, windows: &mut KnownWindows) {
        if let Some(stated) = self.stated {
            windows.learn_stated(stated);
        }
        if self.proven > 0 {
            windows.learn_accepted(self.proven);
        }
    }
}

//! What replies cost: usage in, cost out. [`usage_cost`] is the one function that turns a
//! reply's [`Usage`] into cache-weighted tokens ([`CacheRates`], each provider's documented
//! multipliers of the base input price) and, with the user's [`Prices`], money. Every report of
//! panto (a compaction entry, `--json`, the chat's meter, `panto cost`, the benchmark) calls it,
//! and sums its [`Cost`]s, which are whole numbers so that rows add up to their totals exactly.
//! [`CostReport`] is a whole session's, turn by turn and compaction by compaction.
//!
//! panto ships no price: money needs the user's `[prices]`. The multipliers it ships are the
//! ones each provider documents for cached input (`docs/providers.md`, "Prompt caching").

use std::ops::{Add, AddAssign};

use crate::message::Usage;

mod report;

pub use report::{CostCounter, CostReport, CostRow, CostRowKind};

/// The multipliers of a model's base input price at which its provider bills cached input.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct CacheRates {
    /// A token read from the cache.
    pub read: f64,
    /// A token written to the cache with the short lifetime (or the only one).
    pub write: f64,
    /// A token written with the long lifetime (Anthropic's 1 hour).
    pub write_long: f64,
}

impl CacheRates {
    /// No discount and no premium claimed: cached input billed as plain input.
    pub const PLAIN: CacheRates = CacheRates::new(1.0, 1.0, 1.0);

    /// Rates of `read`, `write` and `write_long` times the base input price.
    pub const fn new(read: f64, write: f64, write_long: f64) -> CacheRates {
        CacheRates {
            read,
            write,
            write_long,
        }
    }

    /// The documented rates of `model`'s family (`docs/providers.md`, "Prompt caching"):
    /// - Claude (`claude…`): reads 0.1, 5-minute writes 1.25, 1-hour writes 2 (Anthropic,
    ///   "Prompt caching", pricing: the same multipliers for every model);
    /// - `OpenAI` GPT-5.6 and later: reads 0.1, writes 1.25 ("Prompt caching": "For GPT-5.6
    ///   models and later model families, cache writes cost 1.25× the uncached input token
    ///   rate"); GPT-5 before 5.6: reads 0.1, writes at the input price; GPT-4.1: reads 0.25;
    ///   GPT-4o and the o-series: reads 0.5 (the launch's 50% discount);
    /// - Gemini (`gemini…`): reads 0.25 (the discount documented with implicit caching);
    /// - anything else (a local server, an unknown family): [`CacheRates::PLAIN`].
    pub fn for_model(model: &str) -> CacheRates {
        let model = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        if model.starts_with("claude") {
            return CacheRates::new(0.1, 1.25, 2.0);
        }
        if model.starts_with("gemini") {
            return CacheRates::new(0.25, 1.0, 1.0);
        }
        if let Some(version) = model.strip_prefix("gpt-") {
            return openai_rates(version);
        }
        if model.starts_with("o1") || model.starts_with("o3") || model.starts_with("o4") {
            return CacheRates::new(0.5, 1.0, 1.0);
        }
        CacheRates::PLAIN
    }
}

/// The rates of `OpenAI`'s `gpt-VERSION…` models (`5.6-mini`, `5`, `4.1-nano`, `4o`).
fn openai_rates(version: &str) -> CacheRates {
    let (major, rest) = leading_number(version);
    let minor = rest.strip_prefix('.').and_then(|r| leading_number(r).0);
    match (major, minor) {
        (Some(m), _) if m > 5 => CacheRates::new(0.1, 1.25, 1.25),
        (Some(5), Some(n)) if n >= 6 => CacheRates::new(0.1, 1.25, 1.25),
        (Some(5), _) => CacheRates::new(0.1, 1.0, 1.0),
        (Some(4), Some(1)) => CacheRates::new(0.25, 1.0, 1.0),
        _ => CacheRates::new(0.5, 1.0, 1.0),
    }
}

/// The number `text` starts with, if any, and the rest.
fn leading_number(text: &str) -> (Option<u32>, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    (text[..end].parse().ok(), &text[end..])
}

/// One model's prices per million tokens, as the user configured them (`[prices]`). A cache
/// price left out is the input price times the model's [`CacheRates`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input read from the cache.
    pub cache_read: Option<f64>,
    /// Input written to the cache (short lifetime).
    pub cache_write: Option<f64>,
    /// Input written to the cache with the long lifetime.
    pub cache_write_long: Option<f64>,
}

impl Price {
    /// `input` and `output` per million tokens; the cache prices from the model's rates.
    pub fn new(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cache_read: None,
            cache_write: None,
            cache_write_long: None,
        }
    }

    /// The same price with the cache's own prices, each per million tokens.
    #[must_use]
    pub fn with_cache(
        mut self,
        read: Option<f64>,
        write: Option<f64>,
        write_long: Option<f64>,
    ) -> Price {
        self.cache_read = read;
        self.cache_write = write;
        self.cache_write_long = write_long;
        self
    }
}

/// The user's prices, by model name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    models: Vec<(String, Price)>,
}

impl Prices {
    /// No prices: costs in tokens only.
    pub fn new() -> Prices {
        Prices::default()
    }

    /// The same prices with `price` for `model` (replacing one given before).
    #[must_use]
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Prices {
        let model = model.into();
        self.models.retain(|(m, _)| *m != model);
        self.models.push((model, price));
        self
    }

    /// Whether no price is configured.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// The price of `model`: the one configured under its exact name, else under the longest
    /// name it starts with followed by `-` (`claude-sonnet-4-5` prices the dated
    /// `claude-sonnet-4-5-20250929`).
    pub fn get(&self, model: &str) -> Option<&Price> {
        if let Some((_, p)) = self.models.iter().find(|(m, _)| m == model) {
            return Some(p);
        }
        self.models
            .iter()
            .filter(|(m, _)| {
                model
                    .strip_prefix(m.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(m, _)| m.len())
            .map(|(_, p)| p)
    }
}

/// What one or more replies cost. Whole numbers, so that a sum of rows is exactly its total:
/// cache-weighted tokens are rounded per reply, money is in millionths of the prices' currency
/// (a token priced at P per million costs P millionths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cost {
    /// Replies counted.
    pub replies: u64,
    /// Input billed at the full price (neither read from nor written to the cache).
    pub input_tokens: u64,
    /// Input read from the cache.
    pub cache_read_tokens: u64,
    /// Input written to the cache, with either lifetime.
    pub cache_write_tokens: u64,
    /// Of [`Cost::cache_write_tokens`], those written with the long lifetime.
    pub cache_write_long_tokens: u64,
    /// Output.
    pub output_tokens: u64,
    /// The input as billed, in tokens at the full input price: uncached input plus each cache
    /// read and write times its multiplier ([`CacheRates`]).
    pub billed_input_tokens: u64,
    /// The money of the replies that have a price, in millionths of the prices' currency.
    pub money_micros: u64,
    /// Replies whose model has no configured price (their money is not in
    /// [`Cost::money_micros`]).
    pub unpriced: u64,
}

impl Cost {
    /// Every input token of the requests, however billed.
    pub fn input_total(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    /// The share of the input read from the cache (0 when there was none).
    pub fn cache_hit_share(&self) -> f64 {
        let total = self.input_total();
        if total == 0 {
            return 0.0;
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "a share for people; token counts are far below 2^52"
        )]
        let share = self.cache_read_tokens as f64 / total as f64;
        share
    }

    /// The money, in the prices' currency, when every reply counted had a price.
    pub fn money(&self) -> Option<f64> {
        #[expect(
            clippy::cast_precision_loss,
            reason = "money for people, from millionths far below 2^52"
        )]
        let money = self.money_micros as f64 / 1e6;
        (self.replies > 0 && self.unpriced == 0).then_some(money)
    }
}

impl Add for Cost {
    type Output = Cost;

    fn add(mut self, other: Cost) -> Cost {
        self += other;
        self
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.replies += o.replies;
        self.input_tokens += o.input_tokens;
        self.cache_read_tokens += o.cache_read_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
        self.cache_write_long_tokens += o.cache_write_long_tokens;
        self.output_tokens += o.output_tokens;
        self.billed_input_tokens += o.billed_input_tokens;
        self.money_micros += o.money_micros;
        self.unpriced += o.unpriced;
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), Add::add)
    }
}

/// What `usage`, the usage of one reply of `model` (when known), cost: cache-weighted tokens
/// with the model's [`CacheRates`], and money with its price in `prices` when there is one.
pub fn usage_cost(usage: &Usage, model: Option<&str>, prices: &Prices) -> Cost {
    let rates = model.map_or(CacheRates::PLAIN, CacheRates::for_model);
    let read = usage.cache_read_input_tokens.unwrap_or(0);
    let written = usage.cache_creation_input_tokens.unwrap_or(0);
    let long = usage.cache_creation_long().min(written);
    let short = written - long;
    let billed = weigh(&[
        (usage.input_tokens, 1.0),
        (read, rates.read),
        (short, rates.write),
        (long, rates.write_long),
    ]);
    let price = model.and_then(|m| prices.get(m));
    let money = price.map(|p| {
        let each = |own: Option<f64>, rate: f64| own.unwrap_or(p.input * rate);
        weigh(&[
            (usage.input_tokens, p.input),
            (read, each(p.cache_read, rates.read)),
            (short, each(p.cache_write, rates.write)),
            (long, each(p.cache_write_long, rates.write_long)),
            (usage.output_tokens, p.output),
        ])
    });
    Cost {
        replies: 1,
        input_tokens: usage.input_tokens,
        cache_read_tokens: read,
        cache_write_tokens: written,
        cache_write_long_tokens: long,
        output_tokens: usage.output_tokens,
        billed_input_tokens: billed,
        money_micros: money.unwrap_or(0),
        unpriced: u64::from(price.is_none()),
    }
}

/// The sum of `count × factor`, rounded to a whole number (a negative factor counts as 0).
fn weigh(parts: &[(u64, f64)]) -> u64 {
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "token counts far below 2^52 times small factors, rounded back to a count"
    )]
    let sum = parts
        .iter()
        .map(|&(n, f)| n as f64 * f.max(0.0))
        .sum::<f64>()
        .round() as u64;
    sum
}

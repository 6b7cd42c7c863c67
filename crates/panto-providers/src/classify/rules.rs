//! The classification table: named rules, evaluated in order, first match wins.
//!
//! Order is the design. Capacity, quota and billing, and rate-limit vetoes come first, so that
//! no wording and no status (413 included) can turn a rate limit or a quota into an overflow;
//! the quota and billing rules precede the rate-limit ones, so that an account that cannot pay
//! is told so at once instead of being retried. Access errors and
//! per-item limits follow, then the output vetoes (an error whose numbers show the requested
//! output alone fills the window, or that only complains about the output limit), and only
//! then the rules that say "context overflow": structured fields and codes first, then
//! wording, then a generic fallback. The last rules map what is left by status.
//!
//! Why one file: the order is the design, and it is checked by reading the table top to bottom;
//! the word lists the rules name sit beside them.

use std::time::Duration;

use super::numbers::{Sizes, retry_delay_in_text};
use super::signals::Signals;
use super::{Protocol, Verdict};

/// One answer, as the rules see it.
pub(super) struct Answer<'a> {
    /// The HTTP status of an error answer, or the status embedded in a stream event or a 2xx
    /// body; `None` when there is neither.
    pub status: Option<u16>,
    /// What the payload says.
    pub signals: &'a Signals,
    /// The sizes its text states.
    pub sizes: Sizes,
    /// The delay a `Retry-After` header asked for, when there was one.
    pub retry_after: Option<Duration>,
}

/// One rule of the table.
pub(super) struct Rule {
    /// A stable name; tests and `docs/providers.md` refer to it.
    pub name: &'static str,
    /// The protocols it applies to.
    pub protocols: &'static [Protocol],
    /// When it fires.
    pub test: Test,
    /// What it decides.
    pub verdict: Verdict,
    /// Why it exists and where it sits, for the documentation.
    #[cfg_attr(not(test), allow(dead_code))]
    pub why: &'static str,
}

/// A condition on an [`Answer`].
pub(super) enum Test {
    /// The status is one of these.
    Status(&'static [u16]),
    /// The status is 400 to 499.
    ClientError,
    /// The status is 500 to 599.
    ServerError,
    /// Some error code, type, status or reason equals one of these (lowercase).
    Code(&'static [&'static str]),
    /// The normalised text contains one of these phrases.
    Text(&'static [&'static str]),
    /// llama.cpp's fields say `n_prompt_tokens` > `n_ctx`.
    PromptFieldsExceedContext,
    /// The stated numbers show the requested output leaves the input less than
    /// `numbers::MIN_INPUT_ROOM` tokens of the window.
    OutputFillsWindow,
    /// The text states the input size or the limit.
    StatesSizes,
    /// The text states an input size larger than the limit.
    InputExceedsLimit,
    /// A retry delay is stated: in a `Retry-After` header, a field (`RetryInfo`) or the text.
    StatesDelay,
    /// The text states a quota of zero (`limit: 0`): the plan does not include what was asked.
    ZeroQuota,
    /// Every one of these holds.
    All(&'static [Test]),
    /// At least one of these holds.
    Any(&'static [Test]),
    /// This does not hold.
    Not(&'static Test),
    /// Always holds.
    Always,
}

impl Test {
    pub(super) fn holds(&self, answer: &Answer<'_>) -> bool {
        let status = answer.status;
        match self {
            Test::Status(set) => status.is_some_and(|s| set.contains(&s)),
            Test::ClientError => status.is_some_and(|s| (400..500).contains(&s)),
            Test::ServerError => status.is_some_and(|s| (500..600).contains(&s)),
            Test::Code(set) => answer
                .signals
                .codes
                .iter()
                .any(|c| set.contains(&c.as_str())),
            Test::Text(phrases) => phrases.iter().any(|p| answer.signals.text.contains(p)),
            Test::PromptFieldsExceedContext => matches!(
                (answer.signals.n_prompt_tokens, answer.signals.n_ctx),
                (Some(n), Some(ctx)) if n > ctx
            ),
            Test::OutputFillsWindow => answer.sizes.output_fills_window(),
            Test::StatesSizes => {
                answer.sizes.any()
                    || answer.signals.n_prompt_tokens.is_some()
                    || answer.signals.n_ctx.is_some()
            }
            Test::InputExceedsLimit => matches!(
                (answer.sizes.input_tokens(), answer.sizes.limit),
                (Some(input), Some(limit)) if input > limit
            ),
            Test::StatesDelay => {
                answer.retry_after.is_some()
                    || answer.signals.retry_delay.is_some()
                    || retry_delay_in_text(&answer.signals.text).is_some()
            }
            Test::ZeroQuota => states_zero_quota(&answer.signals.text),
            Test::All(tests) => tests.iter().all(|t| t.holds(answer)),
            Test::Any(tests) => tests.iter().any(|t| t.holds(answer)),
            Test::Not(test) => !test.holds(answer),
            Test::Always => true,
        }
    }
}

/// Whether `text` states a quota of zero: `limit: 0` where the number ends (no digit follows,
/// nor a point and a digit: `limit: 0.5` is not zero, `limit: 0.` at a sentence's end is).
fn states_zero_quota(text: &str) -> bool {
    text.match_indices("limit: 0").any(|(at, found)| {
        let rest = &text.as_bytes()[at + found.len()..];
        match rest {
            [d, ..] if d.is_ascii_digit() => false,
            [b'.', d, ..] if d.is_ascii_digit() => false,
            _ => true,
        }
    })
}

const ALL: &[Protocol] = &Protocol::ALL;
const OPENAI: &[Protocol] = &[Protocol::OpenAiChat, Protocol::OpenAiResponses];

// Word lists. Every phrase is normalised: lowercase, no backticks, single spaces.

pub(super) const OVERLOADED_CODES: &[&str] = &[
    "overloaded_error",
    "overloaded",
    "server_is_overloaded",
    "service_unavailable",
    "unavailable",
];
pub(super) const OVERLOADED_WORDS: &[&str] = &[
    "overloaded",
    "service unavailable",
    "temporarily unavailable",
    "server is busy",
];
pub(super) const RATE_LIMIT_CODES: &[&str] = &[
    "rate_limit_exceeded",
    "rate_limit_error",
    "rate_limited",
    "rate_limit",
    "ratelimitexceeded",
    "ratelimited",
    "rate_limit_exceeded_error",
    "too_many_requests",
    "toomanyrequests",
    "throttlingexception",
    "throttling",
    "throttled",
    "resource_exhausted",
    "quota_exceeded",
    "quotaexceeded",
    "servicequotaexceededexception",
    "google.rpc.quotafailure",
    "google.rpc.retryinfo",
];
/// Codes of an account that cannot pay: `OpenAI`'s used-up quota and billing states.
pub(super) const QUOTA_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
];
/// Wordings of an account that cannot pay (credits, balance, billing), which no wait cures.
pub(super) const QUOTA_WORDS: &[&str] = &[
    "exceeded your current quota",
    "check your plan and billing",
    "plans & billing",
    "plans and billing",
    "billing hard limit",
    "credit balance",
    "insufficient credit",
    "insufficient balance",
    "insufficient funds",
    "requires more credits",
    "can only afford",
    "spending limit",
    "spend limit",
    "reached your specified api usage limits",
    "regain access on",
    "extra usage is required",
    "usage credits are required",
    // Gemini's and Vertex's `RESOURCE_EXHAUSTED` that names no wait: "Resource has been
    // exhausted (e.g. check quota)." and a request over the organization's quota.
    "check quota",
    "organization quota",
];
/// `OpenAI` and Groq put the kind of rate limit in `type`.
pub(super) const OPENAI_RATE_TYPES: &[&str] = &["tokens", "requests", "tokens_usage_based"];
pub(super) const RATE_LIMIT_WORDS: &[&str] = &[
    "rate limit",
    "rate-limit",
    "ratelimit",
    "rate_limit",
    "tokens per min",
    "requests per min",
    "per minute",
    "per-minute",
    "per hour",
    "per day",
    "daily",
    "hourly",
    "weekly",
    "monthly",
    "(tpm)",
    "(rpm)",
    "(tpd)",
    "(rpd)",
    "quota",
    "too many requests",
    "too many concurrent",
    "concurrency limit",
    "please wait",
    "try again in ",
    "retry in ",
    "retry after",
    "retry shortly",
    "try again later",
    "try again shortly",
    "high demand",
    "throttl",
    "resource exhausted",
    "resource has been exhausted",
    "requires more credits",
    "can only afford",
    "credit balance",
    "insufficient credit",
    "insufficient balance",
    "insufficient funds",
    "billing",
    "spending limit",
    "spend limit",
    "peak load",
    "must be reduced in order to run successfully",
    "usage limit",
    "settings/keys",
];
pub(super) const REGION_CODES: &[&str] = &["unsupported_country_region_territory"];
pub(super) const REGION_WORDS: &[&str] = &[
    "country, region, or territory not supported",
    "location is not supported",
    "not available in your country",
    "not available in your region",
    "not supported in your region",
];
/// A thinking block or thought signature refused as it was sent back: Anthropic's preserved
/// thinking ("Invalid `signature` in `thinking` block. The block is bound to a different
/// conversation."), Gemini's thought signatures ("Function call is missing a
/// `thought_signature`", "Corrupted thought signature").
pub(super) const THINKING_BINDING_WORDS: &[&str] = &[
    "bound to a different conversation",
    "invalid signature in thinking block",
    "missing a thought_signature",
    "thought signature",
];
pub(super) const AUTH_CODES: &[&str] = &[
    "authentication_error",
    "permission_error",
    "invalid_api_key",
    "api_key_invalid",
    "incorrect_api_key",
    "invalid_authentication",
    "unauthenticated",
    "unauthorized",
    "permission_denied",
    "access_denied",
    "accessdeniedexception",
    "unrecognizedclientexception",
    "invalidsignatureexception",
    "expiredtokenexception",
];
pub(super) const AUTH_WORDS: &[&str] = &[
    "api key not valid",
    "invalid api key",
    "incorrect api key",
    "api key is invalid",
    "invalid x-api-key",
    "invalid authentication",
    "authentication failed",
    "authentication fails",
    "missing api key",
    "no api key",
    "invalid subscription key",
    "is not allowed to use",
    "does not have permission",
    "permission denied",
    "access denied",
];
pub(super) const MODEL_NOT_FOUND_CODES: &[&str] =
    &["model_not_found", "modelnotfound", "model_not_available"];
pub(super) const NOT_FOUND_CODES: &[&str] = &[
    "not_found_error",
    "not_found",
    "notfound",
    "resourcenotfoundexception",
];
pub(super) const NOT_FOUND_WORDS: &[&str] = &[
    "not found",
    "does not exist",
    "no such model",
    "unknown model",
    "is not supported for generatecontent",
    "is not a valid model",
];
pub(super) const ITEM_CODES: &[&str] = &["string_above_max_length", "array_above_max_length"];
pub(super) const ITEM_WORDS: &[&str] = &[
    "string too long",
    "expected a string with maximum length",
    "array too long",
    "expected an array with maximum length",
    "image exceeds",
    "image dimensions",
    "image too large",
    "image is too large",
    "too many tokens in batch",
    "media_type",
    "physical batch size",
    "kv size",
];
pub(super) const OUTPUT_PARAMS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "max_new_tokens",
    "max_output_tokens",
    "maxoutputtokens",
    "max_tokens_to_sample",
    "maximum tokens you requested",
    "output tokens",
    "completion tokens",
];
pub(super) const CAP_WORDS: &[&str] = &[
    "too large",
    "too big",
    "too high",
    "must be less than",
    "must be <=",
    "must be at most",
    "cannot be greater",
    "cannot exceed",
    "above maximum",
    "exceed",
    "maximum allowed",
    "at most",
    " > ",
    "greater than",
    "larger than",
    "must be at least",
];
pub(super) const INPUT_WORDS: &[&str] = &["input", "prompt", "messages"];
pub(super) const OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "context_window_exceeded",
    "model_context_window_exceeded",
    "exceed_context_size_error",
    "contextwindowexceedederror",
    "context_length_exceeded_error",
    "prompt_too_long",
    "request_too_large",
    "tokens_limit_reached",
];
/// The llama.cpp server's own overflow phrases; it has sent them with status 500.
pub(super) const LLAMACPP_WORDS: &[&str] = &[
    "exceeds the available context size",
    "larger than the max context size",
    "context size has been exceeded",
    "context shift is disabled",
];
pub(super) const OVERFLOW_WORDS: &[&str] = &[
    // Anthropic, Bedrock, Vertex.
    "prompt is too long",
    "input is too long",
    "exceed context limit",
    "exceeds model context window",
    // OpenAI, Azure, vLLM, DeepSeek, OpenRouter, Fireworks, Mistral, FastChat, SGLang.
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "context window exceeded",
    "contextwindowexceedederror",
    "exceeds the context window",
    "input tokens exceed the configured limit",
    "reduce the length of the messages",
    "too long to fit into the model",
    "longer than the maximum model length",
    "too large for model with",
    "requested token count exceeds",
    "exceeds the maximum allowed length",
    "context length is only",
    "maximum input length of",
    // Gemini.
    "exceeds the maximum number of tokens allowed",
    "input token count",
    "cannot truncate to",
    // llama.cpp family, LM Studio, Ollama, TGI.
    "greater than the context length",
    "trying to keep the first",
    "cannot truncate prompt with n_keep",
    "does not fit in context length",
    "does not fit in the context",
    "longer than the context length",
    "longer than the model's context length",
    "exceeded max context length",
    "prompt too long",
    "inputs tokens + max_new_tokens must be",
    "inputs must have less than",
    // xAI, Kimi, DashScope, Cohere, MiniMax, Copilot, DS4, Poolside, oMLX, GitHub Models, Nova.
    "maximum prompt length is",
    "exceeded model token limit",
    "range of input length should be",
    "too many tokens: total number of tokens",
    "context window exceeds limit",
    "prompt token count of",
    "but the configured context size is",
    "maximum allowed input length",
    "exceeds max context window",
    "request body too large for",
    "input tokens exceeded",
    "context window full",
    "exceeds token limit",
    "exceeds the token limit",
    "total message size",
    "maximum context window",
    "context overflow",
];
pub(super) const BYTE_CAP_WORDS: &[&str] = &[
    "request exceeds the maximum size",
    "request size exceeds",
    "request payload size exceeds the limit",
    "maximum request body size",
    "value at 'body' failed to satisfy constraint",
    "too many total text bytes",
    "request entity too large",
    "payload too large",
    "request body too large",
];
pub(super) const CONTEXT_WORDS: &[&str] = &["context"];
/// What a generic message calls the window ("maximum context of 8192 tokens" names no window,
/// length, size or limit).
pub(super) const WINDOW_WORDS: &[&str] = &[
    "window",
    "length",
    "size",
    "limit",
    "maximum context",
    "max context",
];
pub(super) const EXCESS_WORDS: &[&str] = &[
    "exceed",
    "too long",
    "too large",
    "too many",
    "overflow",
    "greater than",
    "more than",
    "longer than",
    "larger than",
    "does not fit",
    "beyond",
];
pub(super) const TOKEN_LIMIT_WORDS: &[&str] = &[
    "too many tokens",
    "token limit exceeded",
    "exceeded token limit",
    "tokens exceed",
    "token count exceeds",
    "too many input tokens",
    "input too long",
    "prompt is too large",
    "input is too large",
];
pub(super) const TOKEN_COUNT_WORDS: &[&str] = &[
    "input tokens",
    "prompt tokens",
    "input token",
    "token limit",
    "token count",
    "number of tokens",
];
/// What a generic message calls the thing that is too large.
pub(super) const INPUT_SUBJECTS: &[&str] = &["prompt", "input", "conversation", "history"];
pub(super) const SIZE_EXCESS_WORDS: &[&str] = &[
    "too long",
    "too large",
    "too big",
    "exceeds max",
    "exceeds the max",
    "exceeds the limit",
    "exceeds limit",
    "exceeds the allowed",
];
pub(super) const TIMEOUT_CODES: &[&str] = &["deadline_exceeded", "timeout", "request_timeout"];
pub(super) const INVALID_CODES: &[&str] = &[
    "invalid_request_error",
    "invalid_request",
    "bad_request",
    "badrequest",
    "badrequesterror",
    "invalid_argument",
    "invalid_prompt",
    "invalid_params",
    "invalidparameter",
    "invalid_parameter_error",
    "validation_error",
    "validationexception",
];

/// Holds for any status except 5xx, where only specific evidence counts.
const NOT_SERVER_ERROR: Test = Test::Not(&Test::ServerError);

/// The table.
pub(super) const RULES: &[Rule] = &[
    Rule {
        name: "overloaded",
        protocols: ALL,
        test: Test::Any(&[
            Test::Status(&[529]),
            Test::Code(OVERLOADED_CODES),
            Test::All(&[
                Test::Text(OVERLOADED_WORDS),
                Test::Not(&Test::Status(&[429])),
            ]),
        ]),
        verdict: Verdict::Overloaded,
        why: "The provider is out of capacity (Anthropic 529 `overloaded_error`, also inside a \
              stream; Gemini `UNAVAILABLE`). Transient: retry, never compact.",
    },
    Rule {
        name: "unauthorized-status",
        protocols: ALL,
        test: Test::Status(&[401]),
        verdict: Verdict::Authentication,
        why: "HTTP 401 is always about the key.",
    },
    Rule {
        name: "quota-code",
        protocols: ALL,
        test: Test::Code(QUOTA_CODES),
        verdict: Verdict::QuotaExceeded,
        why: "OpenAI's `insufficient_quota` (\"You exceeded your current quota, please check \
              your plan and billing details\", sent with 429) and its billing codes: the account \
              has no credit left, and retrying spends the user's time for nothing. Before the \
              429 rule, which would retry it.",
    },
    Rule {
        name: "payment-required-status",
        protocols: ALL,
        test: Test::Status(&[402]),
        verdict: Verdict::QuotaExceeded,
        why: "HTTP 402 Payment Required: OpenRouter's credits and per-key spending limits, \
              DeepSeek's \"Insufficient Balance\".",
    },
    Rule {
        name: "quota-wording",
        protocols: ALL,
        test: Test::Any(&[
            Test::All(&[Test::Text(QUOTA_WORDS), Test::Not(&Test::StatesDelay)]),
            Test::ZeroQuota,
        ]),
        verdict: Verdict::QuotaExceeded,
        why: "Quota, credit and billing wording that names no wait (Anthropic's \"credit \
              balance is too low\" and \"You have reached your specified API usage limits\" on \
              a 400, its \"Extra usage is required for long context requests\" on a 429, \
              \"check your plan and billing\", Gemini's `RESOURCE_EXHAUSTED` \"Resource has \
              been exhausted (e.g. check quota).\" and \"exceeds your organization quota\" \
              with no `RetryInfo`), or a quota of \
              `limit: 0` (Gemini's free tier for a model it does not include, even when it adds \
              a retry delay). The same wording with a delay is a quota that refills (Gemini's \
              per-minute limits): a rate limit, decided below.",
    },
    Rule {
        name: "rate-limit-status",
        protocols: ALL,
        test: Test::Status(&[429]),
        verdict: Verdict::RateLimited,
        why: "HTTP 429, whatever the body says: Anthropic's per-minute input limit says \"reduce \
              the prompt length\" and is still a rate limit.",
    },
    Rule {
        name: "rate-limit-code",
        protocols: ALL,
        test: Test::Code(RATE_LIMIT_CODES),
        verdict: Verdict::RateLimited,
        why: "A rate-limit, throttling or refilling quota code on any status: Groq's TPM limit \
              arrives as 413 with `rate_limit_exceeded`, OpenAI Responses as `response.failed` \
              inside a 200 stream, Gemini quotas as `RESOURCE_EXHAUSTED` with `QuotaFailure` \
              details.",
    },
    Rule {
        name: "openai-rate-limit-type",
        protocols: OPENAI,
        test: Test::Code(OPENAI_RATE_TYPES),
        verdict: Verdict::RateLimited,
        why: "OpenAI and Groq name the kind of rate limit in `type` (`tokens`, `requests`).",
    },
    Rule {
        name: "rate-limit-wording",
        protocols: ALL,
        test: Test::Text(RATE_LIMIT_WORDS),
        verdict: Verdict::RateLimited,
        why: "Rate-limit, quota and billing wording on any status (\"tokens per min (TPM)\", \
              \"Too many tokens, please wait before trying again\", a billing word beside a \
              stated wait). Placed before every overflow rule: this is the veto.",
    },
    Rule {
        name: "thinking-binding",
        protocols: ALL,
        test: Test::Text(THINKING_BINDING_WORDS),
        verdict: Verdict::Rejected,
        why: "A thinking block or thought signature refused as it was sent back (Anthropic's \
              \"The block is bound to a different conversation\", Gemini's missing or corrupted \
              thought signature). The conversation is not too large, so it is never an \
              overflow; the Anthropic adapter sends the request once more without that \
              thinking.",
    },
    Rule {
        name: "unsupported-region",
        protocols: ALL,
        test: Test::Any(&[Test::Code(REGION_CODES), Test::Text(REGION_WORDS)]),
        verdict: Verdict::Rejected,
        why: "A 403 or 400 about the caller's country is neither a key problem nor transient.",
    },
    Rule {
        name: "authentication",
        protocols: ALL,
        test: Test::Any(&[
            Test::Status(&[403]),
            Test::Code(AUTH_CODES),
            Test::Text(AUTH_WORDS),
        ]),
        verdict: Verdict::Authentication,
        why: "403, or an authentication code or wording on another status: Gemini sends an \
              invalid key as 400 `INVALID_ARGUMENT`, the same pair as its overflow.",
    },
    Rule {
        name: "model-not-found",
        protocols: ALL,
        test: Test::Any(&[
            Test::Code(MODEL_NOT_FOUND_CODES),
            Test::All(&[
                NOT_SERVER_ERROR,
                Test::Text(&["model"]),
                Test::Any(&[
                    Test::Status(&[404]),
                    Test::Code(NOT_FOUND_CODES),
                    Test::Text(NOT_FOUND_WORDS),
                ]),
            ]),
        ]),
        verdict: Verdict::ModelNotFound,
        why: "The model does not exist (OpenAI `model_not_found`, Anthropic 404 \
              `not_found_error` naming the model, Ollama \"model not found, try pulling it\"). \
              A 404 that does not mention a model is left to `client-error`.",
    },
    Rule {
        name: "item-too-large",
        protocols: ALL,
        test: Test::All(&[
            NOT_SERVER_ERROR,
            Test::Any(&[Test::Code(ITEM_CODES), Test::Text(ITEM_WORDS)]),
        ]),
        verdict: Verdict::ItemTooLarge,
        why: "One item is over its own limit (a string over 10 MiB, an image over 5 MB or 8000 \
              px, an embeddings batch). Compacting the rest cannot fix it, and summarising it \
              sends it again. Not on 5xx (llama.cpp's batch-size failure is a server matter).",
    },
    Rule {
        name: "output-fills-window",
        protocols: ALL,
        test: Test::OutputFillsWindow,
        verdict: Verdict::OutputTooLarge,
        why: "The numbers show the requested output alone fills the window or leaves the input \
              too little room: lower the output limit, compaction cannot help. Overrides the \
              `context_length_exceeded` code, which OpenAI also sends in this case.",
    },
    Rule {
        name: "output-limit-wording",
        protocols: ALL,
        test: Test::All(&[
            Test::Text(OUTPUT_PARAMS),
            Test::Text(CAP_WORDS),
            Test::Not(&Test::Text(INPUT_WORDS)),
        ]),
        verdict: Verdict::OutputTooLarge,
        why: "A message about the output limit alone (\"max_tokens: 128001 > 64000, which is \
              the maximum allowed number of output tokens\", Groq's `max_completion_tokens` \
              cap that mentions `context_window`): it never mentions the input.",
    },
    Rule {
        name: "context-size-fields",
        protocols: ALL,
        test: Test::PromptFieldsExceedContext,
        verdict: Verdict::ContextOverflow,
        why: "llama.cpp's structured fields `n_prompt_tokens` > `n_ctx`.",
    },
    Rule {
        name: "overflow-code",
        protocols: ALL,
        test: Test::Code(OVERFLOW_CODES),
        verdict: Verdict::ContextOverflow,
        why: "A structured overflow code or type, on any status (llama.cpp has sent its type \
              with 500).",
    },
    Rule {
        name: "llamacpp-context-size",
        protocols: ALL,
        test: Test::Text(LLAMACPP_WORDS),
        verdict: Verdict::ContextOverflow,
        why: "The llama.cpp server's overflow wordings, on any status (old versions used 500).",
    },
    Rule {
        name: "overflow-wording",
        protocols: ALL,
        test: Test::All(&[
            Test::Text(OVERFLOW_WORDS),
            Test::Any(&[NOT_SERVER_ERROR, Test::StatesSizes]),
        ]),
        verdict: Verdict::ContextOverflow,
        why: "Each provider's overflow wording, matched as a substring so that proxy prefixes \
              (LiteLLM, Bedrock's \"The model returned the following errors\") do not matter. On \
              a 5xx only when the message also states the sizes.",
    },
    Rule {
        name: "sizes-exceed-limit",
        protocols: ALL,
        test: Test::All(&[Test::InputExceedsLimit, NOT_SERVER_ERROR]),
        verdict: Verdict::ContextOverflow,
        why: "The numbers the message states show the input larger than the limit, whatever \
              the words around them (\"the prompt contains 300000 tokens but the maximum is \
              200000\").",
    },
    Rule {
        name: "request-size-cap",
        protocols: ALL,
        test: Test::All(&[Test::Text(BYTE_CAP_WORDS), NOT_SERVER_ERROR]),
        verdict: Verdict::ContextOverflow,
        why: "A cap on the size of the whole request (Anthropic 32 MB `request_too_large`, \
              Gemini payload size, Bedrock's 25 MB body): history grown with images and tool \
              output causes it, and compaction shrinks it.",
    },
    Rule {
        name: "payload-too-large-status",
        protocols: ALL,
        test: Test::Status(&[413]),
        verdict: Verdict::ContextOverflow,
        why: "HTTP 413 means the request is too large; rate limits sent as 413 were vetoed \
              above.",
    },
    Rule {
        name: "overflow-generic",
        protocols: ALL,
        test: Test::All(&[
            NOT_SERVER_ERROR,
            Test::Any(&[
                Test::All(&[
                    Test::Text(CONTEXT_WORDS),
                    Test::Text(WINDOW_WORDS),
                    Test::Text(EXCESS_WORDS),
                ]),
                Test::Text(TOKEN_LIMIT_WORDS),
                Test::All(&[Test::Text(TOKEN_COUNT_WORDS), Test::Text(EXCESS_WORDS)]),
                Test::All(&[Test::Text(INPUT_SUBJECTS), Test::Text(SIZE_EXCESS_WORDS)]),
            ]),
        ]),
        verdict: Verdict::ContextOverflow,
        why: "Unseen wordings: the context (window, length, size, limit) exceeded, too many \
              (input) tokens, a token count or limit exceeded, the prompt or input too long. \
              Never on 5xx.",
    },
    Rule {
        name: "timeout",
        protocols: ALL,
        test: Test::Any(&[Test::Status(&[408, 504]), Test::Code(TIMEOUT_CODES)]),
        verdict: Verdict::Timeout,
        why: "408, 504 and `DEADLINE_EXCEEDED`.",
    },
    Rule {
        name: "server-error",
        protocols: ALL,
        test: Test::ServerError,
        verdict: Verdict::ServerError,
        why: "Any other 5xx: transient.",
    },
    Rule {
        name: "invalid-request-code",
        protocols: ALL,
        test: Test::Code(INVALID_CODES),
        verdict: Verdict::Rejected,
        why: "An error that names itself a bad request, for stream events and 2xx bodies \
              that embed no status.",
    },
    Rule {
        name: "client-error",
        protocols: ALL,
        test: Test::ClientError,
        verdict: Verdict::Rejected,
        why: "Any other 4xx: the request is wrong in a way compaction cannot fix.",
    },
    Rule {
        name: "unrecognized",
        protocols: ALL,
        test: Test::Always,
        verdict: Verdict::ServerError,
        why: "An error event or body with nothing to go on: treated as a server failure, so the \
              normal retry policy handles it.",
    },
];

/// The table as Markdown, for `docs/providers.md` (kept in sync by a test).
#[cfg(test)]
pub(super) fn markdown() -> String {
    let mut out = String::new();
    for (i, rule) in RULES.iter().enumerate() {
        let protocols = if rule.protocols == ALL {
            String::new()
        } else {
            let names: Vec<&str> = rule.protocols.iter().map(|p| p.feature()).collect();
            format!(" (only {})", names.join(", "))
        };
        out.push_str(&format!(
            "{}. **`{}`** → {}{}. When {}.\n   {}\n",
            i + 1,
            rule.name,
            rule.verdict.describe(),
            protocols,
            describe(&rule.test),
            rule.why
        ));
    }
    out
}

#[cfg(test)]
fn list(items: &[&str], quote: char) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{quote}{s}{quote}")).collect();
    quoted.join(", ")
}

#[cfg(test)]
fn describe(test: &Test) -> String {
    match test {
        Test::Status(set) => {
            let s: Vec<String> = set.iter().map(u16::to_string).collect();
            format!("the status is {}", s.join(" or "))
        }
        Test::ClientError => "the status is 4xx".to_owned(),
        Test::ServerError => "the status is 5xx".to_owned(),
        Test::Code([one]) => format!("a code, type, status or reason is `{one}`"),
        Test::Code(set) => format!(
            "a code, type, status or reason is one of {}",
            list(set, '`')
        ),
        Test::Text([one]) => format!("the text contains \"{one}\""),
        Test::Text(set) => format!("the text contains one of {}", list(set, '"')),
        Test::PromptFieldsExceedContext => "`n_prompt_tokens` > `n_ctx`".to_owned(),
        Test::OutputFillsWindow => {
            let room = super::numbers::MIN_INPUT_ROOM;
            format!(
                "the stated output is at least the window less {room} tokens, or the stated \
                 room for the input is under {room} tokens"
            )
        }
        Test::StatesSizes => "the text states the input size or the limit".to_owned(),
        Test::InputExceedsLimit => {
            "the stated input size is larger than the stated limit".to_owned()
        }
        Test::StatesDelay => "a retry delay is stated (header, `RetryInfo` or the text)".to_owned(),
        Test::ZeroQuota => "the text states `limit: 0`".to_owned(),
        Test::All(tests) => {
            let parts: Vec<String> = tests.iter().map(describe).collect();
            format!("({})", parts.join(") and ("))
        }
        Test::Any(tests) => {
            let parts: Vec<String> = tests.iter().map(describe).collect();
            format!("({})", parts.join(") or ("))
        }
        Test::Not(Test::ServerError) => "the status is not 5xx".to_owned(),
        Test::Not(Test::Status(set)) => {
            let s: Vec<String> = set.iter().map(u16::to_string).collect();
            format!("the status is not {}", s.join(" or "))
        }
        Test::Not(test) => format!("not ({})", describe(test)),
        Test::Always => "nothing above matched".to_owned(),
    }
}

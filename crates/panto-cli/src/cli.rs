//! The command line (Contract 3): commands, their arguments and the common options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use panto_compact::CompactionStrategy;

use crate::config::{Flags, ProviderKind};

/// panto keeps long LLM-agent conversations alive by compacting them.
#[derive(Debug, Parser)]
#[command(name = "panto", version, about, long_about = None, after_help = EXAMPLES)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Examples are written for an 80-column terminal: no example line is wider than 79 columns
/// (a longer command goes on with ` \\`), so help never wraps in the middle of a command.
/// Prose is one line per paragraph, wrapped by clap to the terminal.
const EXAMPLES: &str = "\
Examples:
  panto context examples/sessions/debugging.jsonl
  panto compact examples/sessions/debugging.jsonl --dry-run
  panto send notes.jsonl 'What did we decide about retries?' \\
      --provider anthropic --model claude-sonnet-4-5
  panto chat notes.jsonl --provider openai \\
      --base-url http://127.0.0.1:8080/v1 --model local

Configuration: <config dir>/panto/config.toml, then .panto/config.toml, then the environment, then flags (later wins); `panto config` shows each value and where it came from. A project's provider and base_url apply only once you trust it: `panto trust`.";

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the effective context that would be sent, and its size.
    #[command(after_help = "Example:\n  panto context session.jsonl --json | jq .estimated_tokens")]
    Context {
        /// The session file (JSONL).
        session: PathBuf,
        /// One JSON document on stdout: {"messages": [...], "`estimated_tokens"`: N, "turns": K}.
        #[arg(long)]
        json: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print the transcript artifact a compaction of the session would send.
    #[command(after_help = "Example:\n  panto transcript session.jsonl --keep-tokens 4000 | less")]
    Transcript {
        /// The session file (JSONL).
        session: PathBuf,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Compact the session now: summarize the older turns, keep the recent ones verbatim.
    #[command(
        after_help = "Examples:\n  panto compact session.jsonl --dry-run\n  panto compact session.jsonl --undo\n  panto compact session.jsonl \\\n      --instructions 'keep every detail about bugs #3 and #4'\n  panto compact session.jsonl --provider anthropic \\\n      --model claude-sonnet-4-5 --compaction-model claude-haiku-4-5 --json"
    )]
    Compact {
        /// The session file (JSONL).
        session: PathBuf,
        /// Extra instructions for this compaction run (appended to the compaction system prompt).
        #[arg(long, value_name = "TEXT")]
        instructions: Option<String>,
        /// Compute and print the summary, but write nothing to the session.
        #[arg(long)]
        dry_run: bool,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
        /// Write the compaction even when it would not make the conversation smaller.
        #[arg(long)]
        force: bool,
        /// Undo the latest compaction or clearing instead: its context is current again (one
        /// entry is appended; nothing is rewritten). Again, it goes one step further back.
        #[arg(long, conflicts_with_all = ["instructions", "dry_run", "force"])]
        undo: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print the whole ledger the latest compaction recorded: requests, files, errors,
    /// commands, todos and answers of everything summarized so far.
    #[command(
        after_help = "Examples:\n  panto ledger session.jsonl\n  panto ledger session.jsonl --json | jq '.errors[] | select(.resolved == null)'\n\nThe summary a model reads shows the most telling part of the ledger; this prints all of it, as stored on the compaction entry."
    )]
    Ledger {
        /// The session file (JSONL).
        session: PathBuf,
        /// The ledger as the JSON stored on the compaction entry.
        #[arg(long)]
        json: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// What the session cost: per turn and per compaction, the input as billed (cache reads
    /// and writes at their providers' multipliers), money with `[prices]`, and the share read
    /// from the cache.
    #[command(
        after_help = "Examples:\n  panto cost session.jsonl\n  panto cost session.jsonl --json | jq .totals.cache_hit_share\n\nMoney needs your prices per million tokens in config.toml:\n  [prices.claude-sonnet-4-5]\n  input = 3.0\n  output = 15.0\nCache reads and writes are priced at the provider's documented share of the input price unless you give cache_read, cache_write and cache_write_1h."
    )]
    Cost {
        /// The session (a JSONL file, or a name in a database store).
        session: PathBuf,
        /// One JSON document on stdout: `turns` rows and `totals`, which the rows add up to.
        #[arg(long)]
        json: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Search what the session's compactions summarized: ranked passages with their ids.
    #[command(
        after_help = "Examples:\n  panto recall session.jsonl 'migration error'\n  panto recall session.jsonl 9f8e7d6 --json | jq '.hits[0].text'\n  panto recall session.jsonl '\"connection refused\"' --limit 3\n\nA query's identifiers (SHAs and their prefixes, paths, path:line, URLs, versions, #123) and quoted text find their exact occurrences first; words rank by BM25. Items the effective context holds verbatim are left out unless --all is given. `panto show SESSION ID` prints a hit whole."
    )]
    Recall {
        /// The session file (JSONL), or a session name in the store.
        session: PathBuf,
        /// Words, identifiers or quoted text to search for.
        query: String,
        /// The most passages to print (1 to 50).
        #[arg(long, default_value_t = 5, value_name = "N")]
        limit: usize,
        /// Search the effective context too.
        #[arg(long)]
        all: bool,
        /// One JSON document on stdout: {"hits": [{"id", "role", "tool", "snippet", "text", "score", ...}]}.
        #[arg(long)]
        json: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print an item of the session's history by its id, with its neighbours.
    #[command(
        after_help = "Examples:\n  panto show session.jsonl toolu_01A9\n  panto show session.jsonl m7#0 --context 2\n\nAn id is what `panto recall` prints: a tool call's id (its result), ENTRY#BLOCK, an entry's id (all its blocks), or @POSITION for an entry without one."
    )]
    Show {
        /// The session file (JSONL), or a session name in the store.
        session: PathBuf,
        /// The item's id.
        id: String,
        /// Entries to print before and after it.
        #[arg(long, default_value_t = 0, value_name = "N")]
        context: usize,
        /// One JSON document on stdout: {"items": [...]}.
        #[arg(long)]
        json: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Send one message; on context overflow compact once and retry once; append the reply.
    #[command(
        after_help = "Example:\n  panto send session.jsonl 'Now add a regression test.' \\\n      --provider anthropic --model claude-sonnet-4-5"
    )]
    Send {
        /// The session file (JSONL); created when it does not exist.
        session: PathBuf,
        /// The user's message.
        message: String,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Chat interactively; `/help` lists the commands, `/compact [instructions]` compacts.
    #[command(
        after_help = "Example:\n  panto chat session.jsonl --provider openai --model gpt-4o\n  > /compact focus on the parser\n\nIn the chat, /help lists the commands. After every reply a line gives the tokens of that request and the size of the next one (with its share of the window when the window is known). Ctrl-C cancels a reply and returns to the prompt; Ctrl-D, or Ctrl-C twice, quits. Without SESSION, the recent sessions of the store are offered to pick from."
    )]
    Chat {
        /// The session (a JSONL file, or a name in a database store); created when it does not
        /// exist. Without it, the store's recent sessions are offered to pick from.
        session: Option<PathBuf>,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Copy a Contract 1 session file into a new session of the store, every line exactly.
    #[command(
        after_help = "Example:\n  panto import notes.jsonl notes --store sqlite:agent.sqlite3\n\nEvery entry is checked first: a malformed line is reported with its line and field, and nothing is imported. The session must not exist yet (or be empty)."
    )]
    Import {
        /// The JSONL file to read.
        file: PathBuf,
        /// The session to create in the store.
        session: PathBuf,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print every entry of a session as Contract 1 lines, each exactly as stored.
    #[command(
        after_help = "Example:\n  panto export notes --store sqlite:agent.sqlite3 > notes.jsonl"
    )]
    Export {
        /// The session.
        session: PathBuf,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// List the sessions of the store, one per line.
    #[command(
        after_help = "Examples:\n  panto sessions --store sqlite:agent.sqlite3\n  panto sessions --store postgres://agent@db/panto --schema > panto.sql"
    )]
    Sessions {
        /// Print the store's schema (the SQL migrations panto runs) instead, connecting to
        /// nothing, for a database administrator to apply first.
        #[arg(long)]
        schema: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Trust a project: let its .panto/config.toml choose where requests and your key go.
    #[command(
        after_help = "Examples:\n  panto trust\n  panto trust ~/src/my-project\n  panto trust --revoke ~/src/my-project\n\nAn untrusted project's provider, base_url and max_response_mib are ignored (with a note); its other settings apply. The record is <config dir>/panto/trusted.toml; see docs/trust.md."
    )]
    Trust {
        /// The project folder, or any folder inside it (default: the working directory).
        dir: Option<PathBuf>,
        /// Stop trusting the project instead.
        #[arg(long)]
        revoke: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print the context window panto knows for the model, where it came from, and when
    /// requests are compacted ahead; ask the server when nothing is known.
    #[command(
        after_help = "Examples:\n  panto window --provider openai \\\n      --base-url http://127.0.0.1:8080/v1 --model local\n  panto window --forget\n  panto window --forget --all\n\nA window is configured (context_window), learned from an overflow (the limit it stated, or a bound below a request that did not fit), or discovered from a local server (llama-server, Ollama, vLLM, LM Studio). Learned and discovered windows are kept in <data dir>/panto/windows.toml ($PANTO_DATA_DIR moves it); the smallest known window counts. A well-known model name (gpt-4o, Claude, Gemini, ...) has panto's catalogue window until anything else is known."
    )]
    Window {
        /// Forget the learned and discovered windows of the model (with --all: of every model).
        #[arg(long)]
        forget: bool,
        /// With --forget: every model's, not only the configured one's.
        #[arg(long, requires = "forget")]
        all: bool,
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
    /// Print each resolved configuration value and where it came from.
    #[command(after_help = "Example:\n  panto config --provider gemini")]
    Config {
        /// Common options.
        #[command(flatten)]
        common: Common,
    },
}

impl Command {
    /// The common options of any command.
    pub(crate) fn common(&self) -> &Common {
        match self {
            Command::Context { common, .. }
            | Command::Transcript { common, .. }
            | Command::Compact { common, .. }
            | Command::Ledger { common, .. }
            | Command::Cost { common, .. }
            | Command::Recall { common, .. }
            | Command::Show { common, .. }
            | Command::Send { common, .. }
            | Command::Chat { common, .. }
            | Command::Import { common, .. }
            | Command::Export { common, .. }
            | Command::Sessions { common, .. }
            | Command::Config { common }
            | Command::Window { common, .. }
            | Command::Trust { common, .. } => common,
        }
    }
}

/// Options every command takes.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct Common {
    /// The provider (the list comes from `ProviderKind`, whose adapters panto-providers
    /// defines).
    #[arg(
        long,
        value_parser = parse_provider,
        global = true,
        help = format!("The provider: {}", ProviderKind::names(" or ")),
        long_help = provider_long_help(),
    )]
    pub provider: Option<ProviderKind>,
    /// The active chat model.
    #[arg(long, global = true)]
    pub model: Option<String>,
    /// The model tried first for compaction (the active model is the fallback).
    #[arg(long, global = true)]
    pub compaction_model: Option<String>,
    /// The provider's base URL (for OpenAI-compatible servers, include the `/v1`).
    #[arg(long, global = true)]
    pub base_url: Option<String>,
    /// The keep-verbatim budget in tokens (for `compact` and `/compact`: exactly this, not at
    /// most half of the conversation).
    #[arg(long, value_name = "N", global = true, value_parser = whole_number)]
    pub keep_tokens: Option<u64>,
    /// The longest a model request may take, retries included (`timeout_secs`).
    #[arg(long, value_name = "SECS", global = true, value_parser = whole_number)]
    pub timeout_secs: Option<u64>,
    /// Where sessions are kept (`store`); the help text names the forms (the list comes from
    /// `store_value::KINDS`).
    #[arg(
        long,
        value_name = "URL",
        global = true,
        help = crate::store_value::help()
    )]
    pub store: Option<String>,
    /// Compact a request before sending it when it is above this share of the model's window
    /// (`auto_compact`; for example 0.8; 0 turns it off; off by default).
    #[arg(long, value_name = "SHARE", global = true, value_parser = share)]
    pub auto_compact: Option<f64>,
    /// How a compaction is made (`compaction_strategy`; the list comes from
    /// `CompactionStrategy::ALL`).
    #[arg(
        long,
        value_name = "NAME",
        global = true,
        value_parser = parse_strategy,
        help = format!("How a compaction is made: {}", CompactionStrategy::NAMES.join(", ")),
        long_help = strategy_long_help(),
    )]
    pub compaction_strategy: Option<CompactionStrategy>,
}

impl Common {
    /// The flags layer of the configuration.
    pub(crate) fn flags(&self) -> Flags {
        Flags {
            provider: self.provider,
            model: self.model.clone(),
            compaction_model: self.compaction_model.clone(),
            base_url: self.base_url.clone(),
            keep_tokens: self.keep_tokens,
            timeout_secs: self.timeout_secs,
            store: self.store.clone(),
            auto_compact: self.auto_compact,
            compaction_strategy: self.compaction_strategy,
        }
    }
}

/// `--compaction-strategy`'s long help: each strategy with what it does, from the one list.
fn strategy_long_help() -> String {
    let each: Vec<String> = CompactionStrategy::ALL
        .iter()
        .map(|s| format!("{} ({})", s.as_str(), s.help()))
        .collect();
    format!(
        "How a compaction is made (`compaction_strategy`): {}.",
        each.join("; ")
    )
}

fn parse_strategy(s: &str) -> Result<CompactionStrategy, String> {
    CompactionStrategy::parse(s.trim()).ok_or_else(|| {
        format!(
            "unknown compaction strategy `{s}`; use {}",
            CompactionStrategy::NAMES.join(", ")
        )
    })
}

/// `--provider`'s long help: each provider with what it is.
fn provider_long_help() -> String {
    use clap::ValueEnum;
    let described: Vec<String> = ProviderKind::value_variants()
        .iter()
        .filter_map(ValueEnum::to_possible_value)
        .map(|v| {
            let help = v.get_help().map(ToString::to_string).unwrap_or_default();
            format!("{} ({help})", v.get_name())
        })
        .collect();
    format!(
        "The provider: {}.",
        crate::lists::listed(&described, " or ")
    )
}

fn parse_provider(s: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse(s).ok_or_else(|| {
        format!(
            "unknown provider `{s}`; use {}",
            ProviderKind::names(" or ")
        )
    })
}

/// A flag's share of the window, from 0 to 1, refused in panto's words.
fn share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a share of the window; give one from 0 to 1, like 0.8 (0 turns it off)"
        )),
    }
}

/// A flag's whole number, refused in panto's words.
fn whole_number(s: &str) -> Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number; give one like 20000"))
}

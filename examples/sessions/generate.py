"""Writes panto's example sessions (examples/sessions/*.jsonl) with consistent usage.

Run: python3 examples/sessions/generate.py examples/sessions
"""
import hashlib, json, sys, os

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)

def tok(obj):
    # Roughly what a provider would count: ~3.2 bytes per token of the JSON on the wire.
    return max(1, round(len(json.dumps(obj, ensure_ascii=False)) / 3.2))

class Session:
    def __init__(self, model, system_tokens=2600, prefix="m"):
        self.lines = []
        self.model = model
        self.context = system_tokens   # tokens of the request so far
        self.n = 0
        self.prefix = prefix
        self.cached = 0
    def _id(self):
        self.n += 1
        return f"{self.prefix}{self.n}"
    def user(self, *blocks):
        content = [b if isinstance(b, dict) else {"type": "text", "text": b} for b in blocks]
        e = {"type": "message", "id": self._id(), "role": "user", "content": content}
        self.lines.append(e)
        self.context += tok(content) + 4
        return e
    def result(self, *results):
        content = []
        for r in results:
            tid, text = r[0], r[1]
            err = r[2] if len(r) > 2 else False
            content.append({"type": "tool_result", "tool_use_id": tid, "content": text, "is_error": err})
        return self.user(*content)
    def assistant(self, *blocks, stop=None):
        content = []
        for b in blocks:
            content.append(b if isinstance(b, dict) else {"type": "text", "text": b})
        has_tool = any(b["type"] == "tool_use" for b in content)
        out = tok(content)
        # Prompt caching: everything up to the previous request is read from cache.
        read = self.cached
        creation = self.context - read
        usage = {"input_tokens": 3, "output_tokens": out,
                 "cache_read_input_tokens": read, "cache_creation_input_tokens": max(0, creation - 3)}
        e = {"type": "message", "id": self._id(), "role": "assistant", "model": self.model,
             "stop_reason": stop or ("tool_use" if has_tool else "end_turn"),
             "usage": usage, "content": content}
        self.lines.append(e)
        self.cached = self.context
        self.context += out + 4
        return e
    def raw(self, e):
        self.lines.append(e)
    def write(self, name):
        with open(os.path.join(OUT, name), "w") as f:
            for l in self.lines:
                f.write(json.dumps(l, ensure_ascii=False) + "\n")

def call(id, name, **input):
    return {"type": "tool_use", "id": id, "name": name, "input": input}

def think(text):
    return {"type": "thinking", "thinking": text, "signature": "sig-" + hashlib.sha256(text.encode()).hexdigest()[:24]}

# ---------------------------------------------------------------------------------------------
# 1. A debugging session: tool loops, parallel calls, a failed tool call, a fix.
s = Session("claude-sonnet-4-5")
s.user("The `parse_duration` tests started failing after I bumped the `humantime` crate. Can you find out why and fix it? Don't change the public API of `config::Settings`.")
s.assistant(think("Start by running the failing tests to see the actual error, and look at where parse_duration lives."),
            "I'll run the test suite first to see the exact failure.",
            call("toolu_01", "bash", command="cargo test -p settings parse_duration 2>&1 | tail -40"))
s.result(("toolu_01", """running 6 tests
test tests::parse_duration_plain_seconds ... ok
test tests::parse_duration_minutes ... ok
test tests::parse_duration_compound ... FAILED
test tests::parse_duration_rejects_negative ... ok
test tests::parse_duration_with_spaces ... FAILED
test tests::parse_duration_zero ... ok

failures:

---- tests::parse_duration_compound stdout ----
thread 'tests::parse_duration_compound' panicked at crates/settings/src/duration.rs:88:9:
assertion `left == right` failed
  left: Err(InvalidFormat("1h30m"))
 right: Ok(5400s)

---- tests::parse_duration_with_spaces stdout ----
thread 'tests::parse_duration_with_spaces' panicked at crates/settings/src/duration.rs:95:9:
assertion `left == right` failed
  left: Err(InvalidFormat("2m 5s"))
 right: Ok(125s)

test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out"""))
s.assistant("Two compound-duration tests fail with `InvalidFormat`. Let me read the parser and the lock file change in parallel.",
            call("toolu_02", "read_file", path="crates/settings/src/duration.rs"),
            call("toolu_03", "bash", command="git diff HEAD~1 -- Cargo.lock | grep -A3 humantime"))
s.result(("toolu_03", """-name = "humantime"
-version = "2.1.0"
+name = "humantime"
+version = "2.2.0\""""),
         ("toolu_02", """//! Parsing of human-friendly durations in settings files.
use std::time::Duration;

#[derive(Debug, PartialEq)]
pub enum DurationError {
    InvalidFormat(String),
    Negative,
}

/// Parses "90s", "5m", "1h30m" and "2m 5s".
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if let Ok(secs) = trimmed.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let normalized = normalize_units(trimmed);
    humantime::parse_duration(&normalized)
        .map_err(|_| DurationError::InvalidFormat(text.to_owned()))
}

/// Rewrites our legacy unit spellings into the ones humantime accepts.
fn normalize_units(text: &str) -> String {
    text.replace("mins", "m").replace("secs", "s").replace(' ', "")
}
"""))
s.assistant(think("normalize_units removes spaces, so '2m 5s' becomes '2m5s'. humantime 2.2 may have changed whether units without separators parse... Actually humantime always accepted '1h30m'? Let me check what humantime 2.2.0 does with '1h30m' directly."),
            "The parser delegates to `humantime` after `normalize_units`. Let me check how humantime 2.2 treats these inputs directly.",
            call("toolu_04", "bash", command="cd /tmp/ht && cargo run -q -- '1h30m' '1h 30m' '2m5s' '2m 5s'"))
s.result(("toolu_04", "error: could not find `Cargo.toml` in `/tmp/ht` or any parent directory", True))
s.assistant("That scratch project doesn't exist yet. I'll create a tiny one to probe humantime 2.2.0.",
            call("toolu_05", "bash", command="cargo new -q /tmp/ht && cd /tmp/ht && cargo add -q humantime@2.2.0 && cat > src/main.rs <<'EOF'\nfn main() { for a in std::env::args().skip(1) { println!(\"{a:?} -> {:?}\", humantime::parse_duration(&a)); } }\nEOF\ncargo run -q -- '1h30m' '1h 30m' '2m5s' '2m 5s'"))
s.result(("toolu_05", """"1h30m" -> Err(UnknownUnit { start: 1, end: 5, unit: "h30m", value: 1 })
"1h 30m" -> Ok(5400s)
"2m5s" -> Err(UnknownUnit { start: 1, end: 4, unit: "m5s", value: 2 })
"2m 5s" -> Ok(125s)"""))
s.assistant(think("So 2.2.0 requires a separator between components; our normalize_units strips spaces, which used to be harmless. Fix: don't strip spaces; instead insert a space between a unit letter and a following digit, so '1h30m' -> '1h 30m'."),
            "Found it: humantime 2.2.0 no longer accepts components glued together (`1h30m`), but it does accept them separated by a space. Our `normalize_units` *removes* spaces, which turns `2m 5s` into the now-rejected `2m5s`. I'll change normalization to insert a space between a unit and the next number instead.",
            call("toolu_06", "edit_file", path="crates/settings/src/duration.rs",
                 old="/// Rewrites our legacy unit spellings into the ones humantime accepts.\nfn normalize_units(text: &str) -> String {\n    text.replace(\"mins\", \"m\").replace(\"secs\", \"s\").replace(' ', \"\")\n}",
                 new="/// Rewrites our legacy unit spellings into the ones humantime accepts, and separates\n/// glued components (`1h30m` -> `1h 30m`), which humantime 2.2 requires.\nfn normalize_units(text: &str) -> String {\n    let text = text.replace(\"mins\", \"m\").replace(\"secs\", \"s\");\n    let mut out = String::with_capacity(text.len() + 4);\n    let mut prev_alpha = false;\n    for c in text.chars() {\n        if c.is_ascii_digit() && prev_alpha {\n            out.push(' ');\n        }\n        prev_alpha = c.is_ascii_alphabetic();\n        out.push(c);\n    }\n    out\n}"))
s.result(("toolu_06", "Edited crates/settings/src/duration.rs (1 hunk, +12 -2)"))
s.assistant("Now rerunning the tests.", call("toolu_07", "bash", command="cargo test -p settings 2>&1 | tail -5"))
s.result(("toolu_07", """test tests::parse_duration_with_spaces ... ok
test tests::parse_duration_zero ... ok

test result: ok. 14 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"""))
s.assistant("All 14 settings tests pass. Summary:\n\n- **Cause:** `humantime` 2.2.0 rejects glued components like `1h30m` (`UnknownUnit`), while 2.1 accepted them. Our `normalize_units` stripped spaces, so even `2m 5s` became `2m5s`.\n- **Fix:** `normalize_units` in `crates/settings/src/duration.rs` now keeps spaces and inserts one between a unit letter and a following digit. The public API of `config::Settings` is unchanged.\n\nWant me to add a regression test for `1h30m` with the new normalization, or pin `humantime` to `~2.2`?")
s.user("Add the regression test, and also make sure `90 secs` still works.")
s.assistant(call("toolu_08", "edit_file", path="crates/settings/src/duration.rs",
                 old="    #[test]\n    fn parse_duration_zero() {",
                 new="    #[test]\n    fn parse_duration_glued_and_legacy_units() {\n        assert_eq!(parse_duration(\"1h30m\"), Ok(Duration::from_secs(5400)));\n        assert_eq!(parse_duration(\"90 secs\"), Ok(Duration::from_secs(90)));\n        assert_eq!(parse_duration(\"3mins\"), Ok(Duration::from_secs(180)));\n    }\n\n    #[test]\n    fn parse_duration_zero() {"),
            call("toolu_09", "bash", command="cargo test -p settings parse_duration 2>&1 | tail -3"))
s.result(("toolu_08", "Edited crates/settings/src/duration.rs (1 hunk, +7 -0)"))
s.result(("toolu_09", """test tests::parse_duration_glued_and_legacy_units ... FAILED

thread 'tests::parse_duration_glued_and_legacy_units' panicked at crates/settings/src/duration.rs:104:9:
  left: Err(InvalidFormat("90 secs"))
 right: Ok(90s)""", True))
s.assistant(think("'90 secs' -> replace 'secs' with 's' -> '90 s'. humantime: does '90 s' parse? It seems not: a space between number and unit is rejected. Need to remove spaces between a digit and a following unit letter, while keeping spaces between components."),
            "`90 secs` normalizes to `90 s`, and humantime rejects a space between a number and its unit. I'll make normalization remove spaces *inside* a component while keeping them *between* components.",
            call("toolu_10", "edit_file", path="crates/settings/src/duration.rs",
                 old="    for c in text.chars() {\n        if c.is_ascii_digit() && prev_alpha {\n            out.push(' ');\n        }\n        prev_alpha = c.is_ascii_alphabetic();\n        out.push(c);\n    }",
                 new="    let mut prev_digit = false;\n    for c in text.chars() {\n        if c == ' ' {\n            // A space right after a number separates it from its unit: drop it.\n            if !prev_digit {\n                out.push(' ');\n            }\n            continue;\n        }\n        if c.is_ascii_digit() && prev_alpha {\n            out.push(' ');\n        }\n        prev_alpha = c.is_ascii_alphabetic();\n        prev_digit = c.is_ascii_digit();\n        out.push(c);\n    }"))
s.result(("toolu_10", "Edited crates/settings/src/duration.rs (1 hunk, +9 -1)"))
s.assistant(call("toolu_11", "bash", command="cargo test -p settings 2>&1 | tail -3 && cargo clippy -p settings -- -D warnings 2>&1 | tail -2"))
s.result(("toolu_11", """test result: ok. 15 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out

    Finished `dev` profile [unoptimized + debuginfo] target(s) in 1.92s"""))
s.assistant("Done. `parse_duration_glued_and_legacy_units` covers `1h30m`, `90 secs` and `3mins`; all 15 tests pass and clippy is clean. Normalization now drops a space between a number and its unit, keeps spaces between components, and inserts one where components are glued.")
s.user("Great. Last thing: write a one-line changelog entry.")
s.assistant("Added to `CHANGELOG.md` under *Unreleased*:",
            call("toolu_12", "edit_file", path="CHANGELOG.md", old="## Unreleased\n", new="## Unreleased\n\n- settings: accept `1h30m` and `90 secs` durations again with humantime 2.2 (components are now normalized before parsing).\n"))
s.result(("toolu_12", "Edited CHANGELOG.md (1 hunk, +2 -0)"))
s.assistant("Changelog entry added: \"settings: accept `1h30m` and `90 secs` durations again with humantime 2.2 (components are now normalized before parsing).\"")
s.write("debugging.jsonl")

# ---------------------------------------------------------------------------------------------
# 2. A long design discussion: mostly prose, a few reads.
d = Session("gpt-5", system_tokens=1800, prefix="d")
d.user("We need a rate limiter in front of our public API (about 40 endpoints, 3 regions, ~12k req/s peak). I'm torn between token bucket in Redis and a sliding-window log. What would you pick and why? Constraints: p99 overhead under 2 ms, limits per API key and per endpoint group, and we must be able to change limits without a deploy.")
d.assistant("""Short answer: a token bucket (or its close cousin GCRA) in Redis, evaluated by a Lua script, with limits read from a config table that the service caches for a few seconds.

Why not a sliding-window log: it stores one entry per request per key. At 12k req/s that is a sorted-set insert and a range trim on every call, memory proportional to the limit (a 1000/min key holds up to 1000 timestamps), and the cost grows with the limit. It gives exact counts, but you don't need exactness at that granularity.

Why token bucket / GCRA:
- O(1) state per key: two numbers (tokens, last refill) or one (the theoretical arrival time for GCRA).
- One round trip: a Lua script reads, refills, decides and writes atomically. With Redis in-region that is typically 0.3–0.8 ms, well inside your 2 ms p99.
- Bursts are explicit: bucket capacity is the burst, refill rate is the sustained limit. Product people understand "100 per minute, bursts of 20".

Per API key and per endpoint group: make the bucket key `rl:{api_key}:{group}`. Use a hash tag on the API key so all of one customer's buckets land on the same cluster slot if you ever need multi-bucket checks in one script.

Changing limits without a deploy: store limits in a table (Postgres or a Redis hash) keyed by plan and group, with per-key overrides. Each API node caches them for 5–10 s. The Lua script takes rate and burst as arguments, so a change applies on the next cache refresh, no migration of bucket state needed.

Regions: decide whether limits are global or per region. Global exactness across 3 regions means cross-region round trips, which blows the latency budget. The usual answer is per-region buckets with the limit divided by region weight, or per-region buckets at the full limit if you can tolerate a customer getting up to 3x in a pathological spread.

What I'd want to know next: are limits contractual (customers pay for them), and how spiky is per-key traffic?""")
d.user("Limits are contractual for the enterprise plan, best-effort for the others. Per-key traffic is very spiky: batch jobs that fire 500 requests in a second and then nothing for ten minutes.")
d.assistant("""That changes two things.

1. **Contractual limits must not under-serve.** If a customer paid for 600/min and your per-region split gives each region 200/min, a batch job that happens to hit one region gets throttled at 200 — you'd be violating the contract. Options:
   - Route each enterprise key to a home region for limiting (the edge forwards the limit check, not the request). Adds a cross-region hop only for enterprise keys, maybe 20–60 ms — too slow for your 2 ms budget if done synchronously.
   - Give each region the *full* enterprise limit and reconcile asynchronously: each region publishes consumed tokens every 250 ms to the others, which debit their local buckets. Over-admission is bounded by (regions − 1) × rate × sync interval. For 600/min and 250 ms that is at most 5 extra requests. Contractually safe (you never under-serve), and the overshoot is tiny.
   I'd pick the second.

2. **Spiky batch traffic wants a large burst.** With a token bucket, 500 requests in one second needs capacity ≥ 500. If the sustained limit is 600/min (10/s), a bucket of 500 refills in 50 s. That matches "fire then idle for ten minutes" nicely. GCRA expresses the same thing with a tolerance parameter.

For best-effort plans keep the simple per-region split; no reconciliation.

One more thing for spiky clients: return `Retry-After` and `RateLimit-*` headers (the IETF draft names: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`). Batch clients that honor them smooth themselves out, which reduces your peak.""")
d.user("How does the async reconciliation behave if Redis in one region goes down?")
d.assistant("""Design it to fail open for the limiter and closed for nothing else:

- **Local Redis down:** the API node can't evaluate buckets. Fail open (admit) with a local in-process fallback bucket per key at, say, 1/N of the limit where N is the number of API nodes in the region. That keeps a runaway client from getting unlimited throughput while Redis recovers. Emit a metric and alert; don't page on a single blip.
- **A remote region unreachable:** reconciliation messages to/from it stop. Each region keeps enforcing the full limit locally, so the worst case is up to 3x over-admission for keys active in all regions during the outage. For contractual limits that's over-serving, which is the safe direction.
- **Reconciliation transport:** don't use Redis replication for this; use a small pub/sub stream (NATS, Kafka, or Redis Streams per region with a consumer in each other region). Messages are idempotent deltas: `{key, group, tokens, window_id}`; consumers dedupe by `(region, window_id)`.

Test it with fault injection: kill a region's Redis under load, partition a region, and measure over-admission against the bound you computed.""")
d.user("Let me look at what we have today before we go further.")
d.assistant("Sure — I'll read the current middleware and config.",
            call("call_1", "read_file", path="services/gateway/src/middleware/ratelimit.go"),
            call("call_2", "read_file", path="services/gateway/config/limits.yaml"))
d.result(("call_1", "package middleware\n\n// RateLimit is a fixed-window counter per API key (INCR + EXPIRE 60).\nfunc RateLimit(rdb *redis.Client, limit int) func(http.Handler) http.Handler {\n\treturn func(next http.Handler) http.Handler {\n\t\treturn http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {\n\t\t\tkey := \"rl:\" + apiKey(r) + \":\" + strconv.FormatInt(time.Now().Unix()/60, 10)\n\t\t\tn, err := rdb.Incr(r.Context(), key).Result()\n\t\t\tif err == nil && n == 1 {\n\t\t\t\trdb.Expire(r.Context(), key, 61*time.Second)\n\t\t\t}\n\t\t\tif err == nil && n > int64(limit) {\n\t\t\t\tw.WriteHeader(http.StatusTooManyRequests)\n\t\t\t\treturn\n\t\t\t}\n\t\t\tnext.ServeHTTP(w, r)\n\t\t})\n\t}\n}\n"),
         ("call_2", "default:\n  per_minute: 600\nplans:\n  free: {per_minute: 60}\n  team: {per_minute: 600}\n  enterprise: {per_minute: 6000}\n"))
d.assistant("""Today's limiter is a fixed-window counter: `INCR rl:{key}:{minute}` with a 61 s expiry, one global limit per key, limits in a YAML file baked into the deploy.

Problems it has that the new design fixes:
- **Boundary bursts:** a client can send the full limit at 00:59 and again at 01:00 — 2x the limit in two seconds.
- **No endpoint groups:** one counter per key.
- **Two round trips and a race:** `INCR` then `EXPIRE` are separate; if the process dies between them the key never expires (the `n == 1` check makes that window small but real).
- **Limits need a deploy:** `limits.yaml` ships with the binary.
- **Errors fail open silently:** `err != nil` admits without any metric.

Migration path that keeps risk low:
1. Add the GCRA Lua script and a `limits` table; keep YAML as the seed data.
2. Shadow mode: evaluate both limiters, enforce the old one, log disagreements for a week.
3. Flip enforcement per plan, free first, enterprise last.
4. Add reconciliation for enterprise keys only once per-region enforcement is live.""")
d.user("Good. Write the GCRA Lua script and explain the parameters.")
d.assistant("""```lua
-- KEYS[1]: bucket key, e.g. rl:{key123}:search
-- ARGV[1]: emission interval in microseconds (period / rate), e.g. 100000 for 10/s
-- ARGV[2]: burst tolerance in microseconds (interval * (burst - 1))
-- ARGV[3]: now in microseconds (from the caller, so all nodes agree within clock skew)
-- ARGV[4]: cost (number of tokens this request takes, usually 1)
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval * cost
local allow_at = new_tat - tolerance - interval
if allow_at > now then
  -- Denied: tell the caller how long to wait.
  return {0, allow_at - now, 0}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1000)
local remaining = math.floor((tolerance + interval - (new_tat - now)) / interval)
return {1, 0, remaining}
```

Parameters:
- **interval** (`T`): time between requests at the sustained rate. 600/min → 100 ms.
- **tolerance** (`τ`): how far ahead of schedule a client may run; `T × (burst − 1)`. Burst 500 → 49.9 s.
- **TAT** (theoretical arrival time): the only state. A request is allowed if it doesn't push TAT more than `τ` into the future.
- **now from the caller:** Redis' `TIME` would be more consistent, but passing `now` keeps the script deterministic for replication. Keep clocks in sync with chrony; skew only shifts a few milliseconds of allowance.
- Returns `{allowed, retry_after_us, remaining}` so the middleware can set `Retry-After` and `RateLimit-Remaining` directly.""")
d.user("What about the Redis hash tag detail you mentioned — does `rl:{key123}:search` actually do it?")
d.assistant("""Yes: in Redis Cluster only the part inside the first `{...}` is hashed to pick the slot, so `rl:{key123}:search` and `rl:{key123}:upload` live on the same slot and one Lua script may touch both (a script may only access keys in one slot). Two caveats:

- Don't put the group inside the braces, or you lose co-location.
- A very hot customer concentrates on one shard. At 12k req/s total that's fine; if a single key ever reaches a large share of traffic, give it a sharded bucket (`rl:{key123#0..3}:search` with the limit divided by four) and accept slightly coarser enforcement.""")
d.user("OK, I'm convinced. Summarize the decision so I can paste it into the design doc.")
d.assistant("""**Decision: GCRA rate limiting in Redis, per API key and endpoint group, with runtime-configurable limits.**

- **Algorithm:** GCRA (token-bucket equivalent) via one Lua script; state is one TAT value per `rl:{api_key}:{group}`; one round trip, ~0.5 ms in-region.
- **Limits:** stored in a `limits` table (plan × group, with per-key overrides), cached 5–10 s by API nodes; no deploy to change them. Seeded from today's `limits.yaml`.
- **Bursts:** capacity sized for batch clients (e.g. 500 at 600/min sustained).
- **Regions:** best-effort plans use per-region buckets with the limit split by region weight. Enterprise keys get the full limit in every region plus async reconciliation every 250 ms over a stream; over-admission bounded by (regions−1) × rate × interval, never under-serving.
- **Failure:** local Redis down → fail open to an in-process fallback bucket at 1/N of the limit, with metrics and alerts; remote region unreachable → enforce locally, over-serve in the safe direction.
- **Headers:** `Retry-After`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
- **Rollout:** shadow mode for a week comparing with the fixed-window limiter, then enforce per plan: free → team → enterprise; reconciliation last.
- **Replaces:** the fixed-window `INCR`+`EXPIRE` middleware in `services/gateway/src/middleware/ratelimit.go` (boundary bursts, no groups, race between INCR and EXPIRE, deploy-bound limits).""")
d.write("design-discussion.jsonl")

# ---------------------------------------------------------------------------------------------
# 3. A session compacted twice: original history, compaction 1 with kept copies, more work,
#    compaction 2 (whose summary merges the first) with kept copies, then the conversation goes on.
c = Session("claude-sonnet-4-5", prefix="e")
c.user("Let's migrate the `orders` service from the `chrono` crate to `jiff`. Start with an inventory of where chrono is used.")
c.assistant("Searching the service for chrono usage.", call("toolu_a1", "grep", pattern="chrono::", path="services/orders"))
c.result(("toolu_a1", "services/orders/src/model.rs:3:use chrono::{DateTime, Utc};\nservices/orders/src/model.rs:41:    pub placed_at: DateTime<Utc>,\nservices/orders/src/api.rs:12:use chrono::Utc;\nservices/orders/src/api.rs:88:        placed_at: Utc::now(),\nservices/orders/src/report.rs:5:use chrono::{Datelike, NaiveDate};\nservices/orders/src/report.rs:30:    let month_start = NaiveDate::from_ymd_opt(d.year(), d.month(), 1).unwrap();"))
c.assistant("chrono is used in three files: `model.rs` (the `placed_at: DateTime<Utc>` field), `api.rs` (`Utc::now()`), and `report.rs` (`NaiveDate` month arithmetic). The serialized format of `placed_at` matters for the database and the JSON API, so that is where the risk is.")
first_cut = len(c.lines)
c.user("Do model.rs first. Keep the JSON format identical: RFC 3339 with a `Z` suffix.")
c.assistant("Replacing the field type with `jiff::Timestamp`, whose serde format is RFC 3339 with `Z`.",
            call("toolu_a2", "edit_file", path="services/orders/src/model.rs", old="use chrono::{DateTime, Utc};", new="use jiff::Timestamp;"),
            call("toolu_a3", "edit_file", path="services/orders/src/model.rs", old="    pub placed_at: DateTime<Utc>,", new="    pub placed_at: Timestamp,"))
c.result(("toolu_a2", "Edited services/orders/src/model.rs"), ("toolu_a3", "Edited services/orders/src/model.rs"))
c.assistant("model.rs now uses `jiff::Timestamp`. Next I'll fix the call sites in api.rs.")
# Compaction 1 keeps the last 3 messages (the model.rs turn).
kept1 = [dict(x) for x in c.lines[-3:]]
c.raw({"type": "compaction", "id": "c1", "summary": "## Goal\nMigrate the `orders` service from `chrono` to `jiff`, keeping the JSON format of timestamps identical (RFC 3339 with a `Z` suffix).\n\n## Inventory\n- `services/orders/src/model.rs`: `placed_at: DateTime<Utc>` (serialized to DB and JSON).\n- `services/orders/src/api.rs`: `Utc::now()` at line 88.\n- `services/orders/src/report.rs`: `NaiveDate` month arithmetic at line 30.\n\n## Next\nConvert model.rs, then api.rs, then report.rs.",
       "trigger": "manual", "model": "claude-haiku-4-5", "instructions": "keep the file inventory", "tokens_before": 5420, "tokens_after": 1630, "kept_messages": 3})
for k, m in enumerate(kept1):
    m = dict(m); m["id"] = f"k1-{k}"; m["kept_by"] = "c1"; c.raw(m)
c.context = 2600 + 420 + sum(tok(m["content"]) + 4 for m in kept1)
c.cached = 0
c.user("Now api.rs and report.rs.")
c.assistant(call("toolu_b1", "edit_file", path="services/orders/src/api.rs", old="use chrono::Utc;", new="use jiff::Timestamp;"),
            call("toolu_b2", "edit_file", path="services/orders/src/api.rs", old="        placed_at: Utc::now(),", new="        placed_at: Timestamp::now(),"),
            call("toolu_b3", "read_file", path="services/orders/src/report.rs"))
c.result(("toolu_b1", "Edited services/orders/src/api.rs"), ("toolu_b2", "Edited services/orders/src/api.rs"),
         ("toolu_b3", "use chrono::{Datelike, NaiveDate};\n\npub fn month_start(d: NaiveDate) -> NaiveDate {\n    NaiveDate::from_ymd_opt(d.year(), d.month(), 1).unwrap()\n}\n"))
c.assistant("In report.rs, `NaiveDate` maps to `jiff::civil::Date`, and `first_of_month()` replaces the manual construction.",
            call("toolu_b4", "write_file", path="services/orders/src/report.rs", content="use jiff::civil::Date;\n\npub fn month_start(d: Date) -> Date {\n    d.first_of_month()\n}\n"))
c.result(("toolu_b4", "Wrote services/orders/src/report.rs (5 lines)"))
c.assistant("Building and running the service tests.", call("toolu_b5", "bash", command="cargo test -p orders 2>&1 | tail -15"))
c.result(("toolu_b5", "error[E0308]: mismatched types\n  --> services/orders/src/report.rs:14:25\n   |\n14 |     let start = month_start(order.placed_at.date_naive());\n   |                             ^^^^^^^^^^^^^^^^^^^^^^^^^ expected `Date`, found `NaiveDate`\n\nerror[E0599]: no method named `date_naive` found for struct `Timestamp`", True))
c.assistant("A caller in report.rs still uses chrono's `date_naive()`. With jiff, a `Timestamp` needs a time zone to become a civil date; orders are reported in UTC.",
            call("toolu_b6", "edit_file", path="services/orders/src/report.rs", old="month_start(order.placed_at.date_naive())", new="month_start(order.placed_at.to_zoned(jiff::tz::TimeZone::UTC).date())"))
c.result(("toolu_b6", "Edited services/orders/src/report.rs"))
c.assistant(call("toolu_b7", "bash", command="cargo test -p orders 2>&1 | tail -4"))
c.result(("toolu_b7", "test snapshot::order_json_roundtrip ... ok\ntest report::month_start_of_leap_february ... ok\n\ntest result: ok. 23 passed; 0 failed; 0 ignored"))
c.assistant("All 23 orders tests pass, including `order_json_roundtrip`, which pins the JSON format of `placed_at` (RFC 3339 with `Z`).")
# Compaction 2: summarizes everything up to here except the last turn; merges S1.
kept2 = [dict(x) for x in c.lines[-3:]]
c.raw({"type": "compaction", "id": "c2", "summary": "## Goal\nMigrate the `orders` service from `chrono` to `jiff`, keeping the JSON format of timestamps identical (RFC 3339 with a `Z` suffix).\n\n## Done\n- `model.rs`: `placed_at` is now `jiff::Timestamp` (serde format is RFC 3339 with `Z`).\n- `api.rs`: `Utc::now()` -> `Timestamp::now()`.\n- `report.rs`: `NaiveDate` -> `jiff::civil::Date`; `month_start` uses `first_of_month()`; the caller converts with `placed_at.to_zoned(TimeZone::UTC).date()` (reports are in UTC).\n\n## Errors fixed\n- E0308/E0599 in report.rs: `date_naive()` does not exist on `Timestamp`; fixed by converting through UTC.\n\n## State\n`cargo test -p orders`: 23 passed, including `order_json_roundtrip`. Remaining: remove `chrono` from Cargo.toml and check other services.",
       "trigger": "overflow", "model": "claude-haiku-4-5", "tokens_before": 9650, "tokens_after": 2210, "kept_messages": 3})
for k, m in enumerate(kept2):
    m = dict(m); m["id"] = f"k2-{k}"; m["kept_by"] = "c2"; c.raw(m)
c.context = 2600 + 520 + sum(tok(m["content"]) + 4 for m in kept2)
c.cached = 0
c.user("Remove chrono from Cargo.toml and check nothing else in the workspace depends on it through orders.")
c.assistant(call("toolu_c1", "bash", command="sed -i '/^chrono = /d' services/orders/Cargo.toml && cargo tree -i chrono -p orders 2>&1 | head -5"))
c.result(("toolu_c1", "error: package ID specification `chrono` did not match any packages"))
c.assistant("`chrono` is gone from `services/orders/Cargo.toml`, and `cargo tree -i chrono -p orders` confirms nothing in the orders dependency graph pulls it in anymore. The migration of the orders service is complete.")
c.write("compacted-twice.jsonl")
print("ok")

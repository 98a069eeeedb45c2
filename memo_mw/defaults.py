"""Tunables, one place, each with the reason for its default: :class:`memo_mw.MemoryMiddleware`'s
keyword arguments and the Flask extension's ``MEMO_*`` keys default to them."""

#: Rule files loaded when ``rules=None``, from the top-level ``rules/`` folder.
DEFAULT_RULE_FILES = ("zh.yaml", "en.yaml")
#: Paths the middleware reads; everything else passes through untouched.
PATHS = ("/chat", "/v1/chat/completions")
#: Where the user id comes from (the body's ``user_id``/``user`` too, but only with ``body_user=True``).
USER_HEADER = "X-User-Id"
#: Larger bodies pass through unread: memory is for chat turns, not uploads.
MAX_BODY_BYTES = 256 * 1024
#: Longer messages (characters) are not captured: long pastes are seldom about the user.
MAX_MESSAGE_CHARS = 200
#: Longer captured phrases are usually a run-on clause, not a preference.
MAX_CAPTURE_CHARS = 60
#: A rule's confidence when the rule does not say.
DEFAULT_CONFIDENCE = 0.7
#: Seconds a pattern may run on a message: bounds catastrophic backtracking.
REGEX_TIMEOUT = 0.05
#: Seconds between ``stat``s of the rule files: an edit is live soon, at little cost. ``0``/``None``: off.
RULES_RELOAD_INTERVAL = 2.0

#: Recall: at most this many memories a request (DESIGN: 3-5).
RECALL_K = 5
#: Recall: characters of memory lines in the block; keeps the prompt small.
RECALL_BUDGET_CHARS = 600
#: Recall score weights (DESIGN): relevance, recency, hotness.
WEIGHT_RELEVANCE = 0.7
WEIGHT_RECENCY = 0.1
WEIGHT_HOTNESS = 0.2
#: Weight of a shared topic in relevance, a word's being 1: brings in a memory with no word in common;
#: like a word, a topic most candidates share weighs little.
WEIGHT_TOPIC = 1.0
#: Recalls a memory needs before hotness counts fully, so one restatement does not outweigh relevance.
HOTNESS_FULL = 10
#: Recency is ``exp(-RECENCY_DECAY * days since last access)``.
RECENCY_DECAY = 0.01
#: Recall scores at most this many full-text matches: far more than it shows, and bounded work.
RECALL_CANDIDATES = 50
#: Recall: at most this many insight lines, in this many characters, in ``[PROFILE]``: small, since
#: the profile comes with every request.
PROFILE_RECALL_K = 3
PROFILE_RECALL_BUDGET_CHARS = 240

#: Chat history: days a user message is kept (set on each message as it is written), and in the
#: block's [HISTORY] section at most this many past messages, in about this many model tokens, each
#: cut to this many characters; a message needs this share of the request's (weighted) words; the
#: current session's last turns are left out (the app has them already).
HISTORY_DAYS = 90
HISTORY_K = 3
HISTORY_BUDGET_TOKENS = 150
HISTORY_LINE_CHARS = 200
HISTORY_MIN_MATCH = 0.25
HISTORY_SKIP_TURNS = 10

#: The RQ queue the middleware enqueues to and ``memo-mw worker`` listens on.
QUEUE_NAME = "memo"
#: Seconds to wait for Redis on connect and each command: a request must not hang on a sick Redis.
REDIS_TIMEOUT = 0.5
#: Seconds the web process skips Redis after a failure; jobs wait in the spool file meanwhile.
REDIS_COOLDOWN = 5.0
#: Seconds between the spool thread's attempts to send the jobs waiting for Redis.
SPOOL_RETRY_INTERVAL = 1.0
#: Seconds the web process adds up topic counts before sending them as one job; a dying process
#: loses at most this much of them (they only nudge a weekly profile).
COUNTS_SEND_INTERVAL = 10.0
#: Seconds a captured memory is recalled as pending before its job stores it: bounds a lost job's trace.
PENDING_TTL = 600
#: Seconds between a worker's maintenance rounds (rq's default is 600): jobs of a dead worker are
#: retried soon after their heartbeat expires; processed_jobs makes a rerun a no-op.
WORKER_MAINTENANCE_INTERVAL = 60
#: Seconds ``memo-mw worker`` waits at most between tries while Redis is down (from 1 s, doubling):
#: back within half a minute of Redis, and a log line at most that often while it stays down.
WORKER_RETRY_MAX = 30.0
#: A capture job stores up to this many captures (itself and those waiting behind it) at once; 1: one.
WORKER_BATCH = 100
#: Seconds a failed job (with masked memory text) stays in Redis for inspection; forget removes it.
JOB_FAILURE_TTL = 7 * 86400
#: Days a forget request's hashed tokens are kept: longer than any job (even a failed one) waits.
FORGET_MARKER_DAYS = 8

#: SQLite busy timeout: writers wait for each other instead of failing.
SQLITE_BUSY_TIMEOUT_MS = 5000
#: PostgreSQL: connections in each process's pool for one database URL (MEMO_PG_POOL), and seconds to
#: wait for one (or to connect) before the call fails as a passing fault.
PG_POOL_SIZE = 10
#: The web process's spool with a PostgreSQL store (with SQLite: ``<db>.spool``, beside the file).
SPOOL = "var/memo.spool"
PG_POOL_TIMEOUT = 5.0
#: Seconds a failed read of the store must have made a request wait for recall to skip the store for a
#: while (``PG_POOL_TIMEOUT``): a server that does not answer must not hold every request.
SLOW_FAULT = 1.0
#: Seconds between two logs of a failing read of the database on the request path (each request
#: would log one until it recovers; after a degraded start, the first comes this long after it).
FAULT_LOG_INTERVAL = 60
#: Confidence added when a memory is stated again (capped at 1.0).
CONFIDENCE_STEP = 0.1

#: Days an expired task waits for confirmation (recall shows it once) before it is deleted.
CONFIRM_DAYS = 7
#: Seconds between the maintenance runs ``python -m memo_mw.cron`` schedules.
MAINTAIN_INTERVAL = 3600
#: Insights (cron, local time; env ``MEMO_INSIGHTS_CRON``): Mondays at 03:00, once the week before is complete.
INSIGHTS_CRON = "0 3 * * 1"
#: Insights: lines a user at most; a profile is a few lines, not everything they mentioned.
INSIGHTS_MAX = 5
#: Insights: messages (or memories) a topic needs: one or two questions say little about a person.
INSIGHTS_MIN_COUNT = 3
#: Insights: ``(label, least messages, least distinct weeks)``, the first that holds, else ``low``:
#: many messages in one week are a project, the same topic over weeks a habit.
INSIGHTS_CONFIDENCE = (("high", 10, 3), ("medium", 5, 2))
#: Insights: only the last weeks are read (older counts are deleted): what the user asks about now.
INSIGHTS_WINDOW_WEEKS = 26
#: Insights: facets (``code.*``) named at most in a line's brackets.
INSIGHTS_FACETS = 3

"""Tunables, one place, each with the reason for its default.

Every keyword argument of :class:`memo_mw.MemoryMiddleware` that is not a path or a
callable defaults to a value here; the Flask extension reads the same values as
``MEMO_*`` keys.
"""

#: Rule files loaded when ``rules=None``, from the top-level ``rules/`` folder.
DEFAULT_RULE_FILES = ("zh.yaml", "en.yaml")

#: Paths the middleware reads. Everything else passes through untouched.
PATHS = ("/chat", "/v1/chat/completions")

#: Where the user id comes from first; the body's ``user_id``/``user`` field is the fallback.
USER_HEADER = "X-User-Id"

#: Bodies larger than this are passed through unread: memory is for chat turns, and
#: reading a large upload into memory to look for "I like" is not worth its cost.
MAX_BODY_BYTES = 256 * 1024

#: Messages longer than this (characters) are not captured: long pastes are seldom a
#: statement about the user. Rule files may set their own ``max_length``.
MAX_MESSAGE_CHARS = 200

#: The longest captured phrase (characters) that becomes a memory; longer captures
#: are usually a clause run-on, not a preference.
MAX_CAPTURE_CHARS = 60

#: A rule's confidence when the rule does not say.
DEFAULT_CONFIDENCE = 0.7

#: Seconds a single pattern may run on a message. Bounds catastrophic backtracking.
REGEX_TIMEOUT = 0.05

#: Seconds between two looks (a ``stat`` per file) at the rule files for changes: an edit
#: is live within a few seconds, and a busy server still stats its files only now and then.
#: ``0`` or ``None`` turns reloading off.
RULES_RELOAD_INTERVAL = 2.0

#: Recall: at most this many memories per request (DESIGN: 3-5).
RECALL_K = 5

#: Recall: character budget of the memory lines in the injected block; keeps the prompt small.
RECALL_BUDGET_CHARS = 600

#: Recall score weights (DESIGN): relevance, recency, hotness.
WEIGHT_RELEVANCE = 0.7
WEIGHT_RECENCY = 0.1
WEIGHT_HOTNESS = 0.2

#: Relevance a topic shared by the query and a memory adds (capped at 1): enough to bring a
#: memory with no word in common into the block, less than a real lexical match.
WEIGHT_TOPIC = 0.3

#: Hotness is ``log(1 + hits) / log(1 + max(HOTNESS_FULL, most hits among the candidates))``:
#: a memory needs about this many recalls before hotness counts fully, so a single
#: restatement or recall does not outweigh relevance.
HOTNESS_FULL = 10

#: Recency decay per day since last access: ``exp(-RECENCY_DECAY * days)``.
RECENCY_DECAY = 0.01

#: The RQ queue the middleware enqueues to and ``memo-mw worker`` listens on.
QUEUE_NAME = "memo"

#: Seconds to wait for Redis on connect and on each command: a chat request must not
#: hang on a sick Redis.
REDIS_TIMEOUT = 0.5

#: Seconds the web process skips Redis after a failed call (the circuit breaker's cooldown);
#: then one request tries again. Jobs made meanwhile wait in the spool file.
REDIS_COOLDOWN = 5.0

#: Seconds the web process adds up its messages' topic counts before it sends them as one job;
#: a process that dies loses at most this much of them (they only nudge a weekly profile).
COUNTS_SEND_INTERVAL = 10.0

#: Seconds between the spool thread's attempts to send jobs waiting for Redis (memo_mw.spool).
SPOOL_RETRY_INTERVAL = 1.0

#: Seconds between a worker's maintenance rounds (rq's default is 600). A round finds the jobs
#: of a worker that died mid-job (SIGKILL, OOM) once their heartbeat has expired (about 90 s)
#: and retries them; the store's processed_jobs table makes a rerun of a finished job a no-op.
WORKER_MAINTENANCE_INTERVAL = 60

#: Seconds a failed job (and the masked memory text in its arguments) stays in Redis for
#: inspection. A forget request removes the user's failed jobs at once.
JOB_FAILURE_TTL = 7 * 86400

#: Days a "forget that ..." request is remembered (as hashed tokens) so that no job still
#: waiting somewhere can store what it names again: longer than any job waits (failed jobs are
#: kept JOB_FAILURE_TTL, retries take minutes).
FORGET_MARKER_DAYS = 8

#: SQLite busy timeout (milliseconds): writers wait for each other instead of failing.
SQLITE_BUSY_TIMEOUT_MS = 5000

#: Increase of confidence when the same memory is stated again (capped at 1.0).
CONFIDENCE_STEP = 0.1

#: Days an expired task waits for confirmation (shown once by recall, marked) before it is deleted.
CONFIRM_DAYS = 7

#: Seconds between maintenance runs scheduled by ``rq cron memo_mw.cron``.
MAINTAIN_INTERVAL = 3600

#: Recall scores at most this many of the memories that share a word with the message (the best
#: full-text matches): far more than it shows, and a bound on the work for a user with thousands.
RECALL_CANDIDATES = 50

#: Seconds a captured memory counts as pending (recalled before its job has stored it).
#: The job drops it once stored; this bounds what a lost job leaves behind.
PENDING_TTL = 600

#: Insights (memo_mw.insights): at most this many lines per user. A profile is a few lines about
#: what the user keeps coming back to, not a list of everything they mentioned.
INSIGHTS_MAX = 5

#: Insights: a topic needs at least this many counted messages (or a remembered statement) to
#: be a line at all: one or two questions say little about a person.
INSIGHTS_MIN_COUNT = 3

#: Insights: confidence by evidence, ``(label, least messages, least distinct ISO weeks)``, the
#: first that holds wins, else ``low``. Many messages in one week are a project, not a habit;
#: the same topic over weeks is what a profile should say.
INSIGHTS_CONFIDENCE = (("high", 10, 3), ("medium", 5, 2))

#: Insights: only counts of the last this many weeks (before the run's ``now``) are read, and the
#: weekly job deletes older ones: a profile says what the user asks about now.
INSIGHTS_WINDOW_WEEKS = 26

#: Insights: at most this many facets (``code.*`` topics) named in a line's brackets.
INSIGHTS_FACETS = 3

#: When ``rq cron memo_mw.cron`` runs the insights job (a cron string, UTC; env
#: ``MEMO_INSIGHTS_CRON``): Mondays at 03:00, once the week before is complete.
INSIGHTS_CRON = "0 3 * * 1"

#: Recall: at most this many insight lines in the block's ``[PROFILE]`` section.
PROFILE_RECALL_K = 3

#: Recall: character budget of the ``[PROFILE]`` lines, on top of ``RECALL_BUDGET_CHARS``: small,
#: since the profile comes with every request of a user who has one.
PROFILE_RECALL_BUDGET_CHARS = 240

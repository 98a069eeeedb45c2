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

#: Import path of the jobs' serializer: JSON payloads (it also reads the plain values of the
#: job ``rq cron`` enqueues; see memo_mw.queue.JobSerializer).
SERIALIZER = "memo_mw.queue.JobSerializer"

#: Seconds to wait for Redis on connect and on each command: a chat request must not
#: hang on a sick Redis.
REDIS_TIMEOUT = 0.5

#: Seconds the web process skips Redis after a failed call (the circuit breaker's cooldown);
#: then one request tries again. Jobs made meanwhile wait in the outbox file.
REDIS_COOLDOWN = 5.0

#: Seconds a user's state (pending memories, forget requests) read from Redis is used from the
#: web process's copy at most; changes drop the copy at once (memo_mw.statecache), this bounds
#: anything else.
STATE_CACHE_MAX_AGE = 30.0

#: Seconds between sends of what requests only count (recall counts, topic counts): off the
#: request path, in one round trip; a process that dies loses at most this much of them.
COUNTS_SEND_INTERVAL = 1.0

#: Seconds between the outbox thread's attempts to send waiting jobs to Redis.
OUTBOX_DRAIN_INTERVAL = 1.0

#: Captures and forget requests are written to the SQLite outbox (one local transaction, no
#: fsync: it survives the process, as a job in Redis would) and sent to Redis at once by the
#: outbox thread, off the request path: the request never waits on a Redis round trip. False:
#: the request sends them itself (one round trip) and uses the outbox only while Redis is down.
WRITE_BEHIND = True

#: With write-behind, seconds between folding the outbox's WAL into its file after sends (a
#: forget applied to the outbox always does it at once, so deleted text leaves no copy).
OUTBOX_CHECKPOINT_INTERVAL = 5.0

#: Seconds between a worker's maintenance rounds (rq's default is 600). A round finds the jobs
#: of a worker that died mid-job (SIGKILL, OOM) once their heartbeat has expired (about 90 s)
#: and retries them; the store's processed_jobs table makes a rerun of a finished job a no-op.
WORKER_MAINTENANCE_INTERVAL = 60

#: A remember job stores up to this many remember jobs waiting behind it in one SQLite
#: transaction (memo_mw.jobs.remember); 1 turns batching off.
WORKER_BATCH = 100

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

#: Seconds a captured memory counts as pending (recalled before its job has stored it).
#: The job drops it once stored; this bounds what a lost job leaves behind.
PENDING_TTL = 600

#: Recall reads through the term index (memo_mw.index) only for a user with more active memories
#: than this. Below it, loading and scoring every memory is as fast as the index's several small
#: queries (see bench/recall.py), and it is the reference the index path must agree with.
RECALL_INDEX_MIN_MEMORIES = 300

#: Bytes (estimated) of memories the web process keeps for recall (memo_mw.memcache), over all
#: users; the least recently used users go first. A user with up to RECALL_INDEX_MIN_MEMORIES is
#: kept as dicts (about 3.4 KB of RSS a memory: the fastest for a few), a larger one compactly
#: (about 1.5 KB, recalled through bounds). 16 MB: ~4,900 memories of small users, or one user
#: with 10,000. A worker's RSS grows by up to this much with many users. 0 turns the cache off.
RECALL_CACHE_BYTES = 16 * 2**20

#: Seconds recall trusts a user's version it read while the user-state listener hears nothing
#: about the user (a stored memory drops its pending entry, a deletion adds a forget marker: both
#: publish the user id); a write that publishes nothing (maintenance expiring a task, a touch
#: flush) is seen within this. 0: read it on every request.
RECALL_VERSION_MAX_AGE = 1.0

#: The most memories of one user the cache keeps; a larger user is read through the term index.
RECALL_CACHE_USER_MEMORIES = 20_000

#: Cached large user: how many of the memories sharing a token (and of those sharing a topic) are
#: scored, those with the best possible score. The k-th pick must beat the best left out (checked);
#: when it does not, eight times as many, then every memory that could score.
RECALL_CACHE_CANDIDATES = 10

#: Index path: how many of the memories sharing a term with the message are loaded and scored
#: (those with the best possible score). Far more than k, so the k-th pick nearly always beats
#: every memory left out, which recall checks; when it does not, every memory is loaded.
RECALL_INDEX_CANDIDATES = 200

#: Index path, for "what do you know about me": the most recent and the hottest memories loaded
#: besides the matching ones (such a question shows memories with no word in common).
RECALL_INDEX_RECENT = 50

#: Seconds counted recalls wait in Redis for their flush job before they are dropped (a
#: bound for a queue nobody works, not a delay: the job is queued with the first count).
TOUCHES_TTL = 86400

#: Seconds a user's topic counts wait in Redis (memo_mw.counters) for the weekly job that moves
#: them to SQLite: five weeks, so a missed run loses nothing; refreshed on every count.
TOPIC_COUNTS_TTL = 35 * 86400

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

"""Each user's memories, kept in the web process for recall, checked against the database per request.

Loading a user's memories from SQLite and tokenising them costs far more than the chat app's own
work for a request; they change rarely (when a job stores, merges, forgets or counts). So the
recaller keeps them here, with an inverted index of their tokens and topics, and checks one row
per request: the user's version in ``user_versions``, which triggers change with every write to
the user's memories (m004). The cache is bounded by the number of memories it holds (least
recently used users go first); a user with more memories than ``max_user`` is not cached (recall
reads them through the SQL term index instead).

Recall through the index scores only the memories that could score: those sharing a token or a
topic with the message, and those always shown (style; an expired task awaiting confirmation).
That is every memory :func:`memo_mw.recall.score` would keep, so the answer is the same.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any, Callable

from .text import tokens


@dataclass(frozen=True)
class UserMemories:
    version: int | None
    memories: list[dict[str, Any]]
    by_token: dict[str, tuple[int, ...]]
    by_topic: dict[str, tuple[int, ...]]
    always: tuple[int, ...]
    max_hits: int

    @classmethod
    def build(cls, version: int | None, memories: list[dict[str, Any]],
              tag: Callable[[str], frozenset[str]]) -> "UserMemories":
        by_token: dict[str, list[int]] = collections.defaultdict(list)
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        always = []
        for i, memory in enumerate(memories):
            for token in tokens(f"{memory['content']} {memory['key']}"):
                by_token[token].append(i)
            for topic in set(memory.get("topics") or ()) or tag(memory["content"]):
                by_topic[topic].append(i)
            if memory.get("type") == "style" or memory.get("status") == "pending_confirm":
                always.append(i)
        return cls(version, memories, {t: tuple(v) for t, v in by_token.items()},
                   {t: tuple(v) for t, v in by_topic.items()}, tuple(always),
                   max((int(m.get("hits") or 0) for m in memories), default=0))

    def candidates(self, message_tokens: frozenset[str] | set[str], message_topics: frozenset[str]) -> list[dict[str, Any]]:
        """The memories that may score for a message with these tokens and topics, in stored order."""
        picked = set(self.always)
        for token in message_tokens:
            picked.update(self.by_token.get(token, ()))
        for topic in message_topics:
            picked.update(self.by_topic.get(topic, ()))
        return [self.memories[i] for i in sorted(picked)]


class MemoryCache:
    """A bounded, thread-safe map of user id to :class:`UserMemories`."""

    def __init__(self, *, max_memories: int, max_user: int):
        self.max_memories = max_memories
        self.max_user = max_user
        self._users: collections.OrderedDict[str, UserMemories] = collections.OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.stats = collections.Counter()

    def get(self, user_id: str, version: int | None) -> UserMemories | None:
        with self._lock:
            entry = self._users.get(user_id)
            if entry is None or entry.version != version:
                self.stats["miss"] += 1
                return None
            self._users.move_to_end(user_id)
            self.stats["hit"] += 1
            return entry

    def put(self, user_id: str, entry: UserMemories) -> None:
        if len(entry.memories) > self.max_user or self.max_memories <= 0:
            return
        with self._lock:
            old = self._users.pop(user_id, None)
            if old is not None:
                self._size -= len(old.memories)
            self._users[user_id] = entry
            self._size += len(entry.memories)
            while self._size > self.max_memories and len(self._users) > 1:
                _, evicted = self._users.popitem(last=False)
                self._size -= len(evicted.memories)

    def clear(self) -> None:
        with self._lock:
            self._users.clear()
            self._size = 0

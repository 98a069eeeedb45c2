"""The capture funnel: which user messages become memories, and as what one-line summary. Pure
computation, no I/O. The stages are in docs/rules.md; a result names the stage where the message
stopped, and the trace through the gates."""

import logging
from dataclasses import asdict, dataclass, field

import regex

from . import defaults
from .privacy import mask_pii
from .rules import Gate, RuleFile, RuleSet, Trigger
from .rules_grammar import lowered, negation_in, requires_met, spelled_out, statement_form
from .summary import strip_edge_punct, summarize
from .text import nfkc
from .topics import TopicTagger

__all__ = ["STAGES", "Candidate", "Funnel", "FunnelResult"]

log = logging.getLogger(__name__)

#: Stage names, in funnel order; ``captured`` and ``forget`` are the two that produce work.
STAGES = ("forget", "no_trigger", "too_long", "negative", "sensitive", "unusable", "captured")

# A period ends a sentence only before whitespace, so "3.5" stays whole. A comma before "but" or
# "and I" starts a statement of its own: "My boss likes golf, and I like tennis" keeps the user's.
_SPLIT = regex.compile(
    r"(?<=[。！？!?；;])|\n|(?<=\.)(?=\s)|[,，]\s*(?=(?:but|however|though|although)\b|但|不过|可是)"
    r"|[,，]\s*(?=and\s+I\b|而我|我自己)",
    regex.IGNORECASE | regex.V1,
)
# A sentence's statements (a comma before a clause of condition or cause, or before a last question:
# "我很喜欢打羽毛球，你也喜欢运动吗？") are what the negative gates judge; its clauses ("I have two cats and
# I love jazz") are tried one by one; the sensitive gates judge the sentence ("I have diabetes and I…").
_STATEMENTS = regex.compile(
    r"[,，]\s*(?=(?:if|so|because|since|which|unless)\b|如果|要是|假如|因为|所以|然后|而且|虽然|只是)"
    # a last question, unless it is a tag on the statement itself ("I love jazz, don't I?")
    r"|[,，]\s*+(?!(?:do|am|are|did|have|can|will|would|was)(?:n't|n’t| not)?\s+I\s*[?？])"
    r"(?=[^,，.。!！?？;；\n]{0,120}(?:[?？]|[吗呢嘛]|怎么办|咋办|怎么弄|怎么样)\s*$"
    # a tag question (好不好, 行不行) asks about its own piece ("我喜欢吃辣，推荐个餐厅好不好", "…，推荐个餐厅，好不好"),
    # a bare one about all before it ("我是程序员，对不对")
    r"|[^,，.。!！?？;；\n]{1,60}(?:[,，]\s*)?(?:好不好|行不行|对不对|可不可以)[\s。.!！~～]*$)",
    regex.IGNORECASE | regex.V1,
)
# A compound subject stays whole: "My wife and I live in Oslo".
_CLAUSES = regex.compile(r"\s+(?=(?:and|but|so|because|while|though)\s+(?:\w+\s+){0,2}?I\b)"
                         r"(?<!^\W*(?:my|our)(?:\s+[\w'-]+){1,2}\s+)", regex.I | regex.V1)
_BLANKS = regex.compile(r"[^\S\n]+")
_PIECE = regex.compile(r"[^,，]+")
#: A clause of more comma pieces than this is read once, as a whole: a comma-rich paste costs one pass.
MAX_PIECES = 12
# Rule files of these languages are skipped for sentences without their script.
_SCRIPT_OF = {"zh": regex.compile(r"\p{Han}"), "en": regex.compile(r"\p{Latin}")}


def _applies(rule_file: RuleFile, text: str) -> bool:
    """A Chinese rule needs a Chinese character in ``text``, an English one a Latin letter."""
    script = _SCRIPT_OF.get(rule_file.language)
    return script is None or script.search(text) is not None


@dataclass(slots=True)
class Candidate:
    """One memory the funnel wants stored: plain values only, so it travels as JSON."""
    type: str
    key: str
    polarity: int
    content: str
    excerpt: str
    rule_id: str
    confidence: float
    ttl_days: float | None
    language: str
    topics: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True, frozen=True)
class FunnelResult:
    """Where a message stopped, what it produced, and the trace through each gate."""
    stage: str
    candidates: tuple[Candidate, ...] = ()
    forget_scope: str | None = None
    forget_match: str | None = None
    trace: tuple[tuple[str, str], ...] = ()
    recall_all: bool = False  # the message asks for everything remembered
    #: Why an explicit request to remember ("remember that …") is not kept; None when it is, or was none.
    declined: str | None = None
    #: The message cleaned and PII-masked (what the chat history may keep: :meth:`Funnel.history_text`).
    text: str = ""

    @property
    def captured(self) -> bool:
        return self.stage == "captured"


@dataclass(slots=True)
class _Hit:
    sentence: str  # the clause the trigger matched
    trigger: Trigger
    groups: dict[str, str | None]
    rule_file: RuleFile
    statement: str = ""  # the statement the clause is part of: what the negative gates read
    whole: str = ""  # the sentence: what the sensitive gates read
    touched: tuple[int, int] = (0, 1)  # the first and past-the-last comma piece of the clause the match read
    read: str = ""  # the touched pieces up to the match's end: all a statement about others keeps
    clause: str = ""  # the pieces back to one that names the user: what `scope: clause` gates read
    preceding: str = ""  # the statement up to the match's end: what `scope: preceding` gates read


def _touched(text: str, match: regex.Match) -> tuple[tuple[int, int], str]:
    """The comma pieces of ``text`` the match reads, from its first named group (a lead-in before it, a
    statement's "我是做前端的，", a pattern's own "^(?:[^,]{1,30},)?", is left for the other rules), and the
    text from the first of them to the match's end."""
    start = min((match.start(g) for g in match.re.groupindex if match.start(g) >= 0), default=match.start())
    hit = [(i, piece.start()) for i, piece in enumerate(_PIECE.finditer(text))
           if piece.start() < match.end() and piece.end() > start]
    if not hit:
        return (0, 1), text[start:match.end()].strip()
    return (hit[0][0], hit[-1][0] + 1), text[hit[0][1]:match.end()].strip()


def clauses(text: str) -> list[tuple[str, str, str]]:
    """The clauses of ``text``, each with its statement and its sentence."""
    return [(clause.strip(), statement.strip(), sentence.strip())
            for sentence in _SPLIT.split(text) if sentence and sentence.strip()
            for statement in _STATEMENTS.split(sentence) if statement.strip()
            for clause in _CLAUSES.split(statement) if clause.strip()]


class Funnel:
    """Runs messages through the compiled rules. Thread-safe: it holds no per-message state."""

    def __init__(self, rules: RuleSet, *, timeout: float = defaults.REGEX_TIMEOUT):
        self.rules = rules
        self.timeout = timeout
        self.topics = TopicTagger(rules.topics)
        negative, sensitive = rules.gates("negative"), rules.gates("sensitive")
        self._negative_message = [g for g in negative if g.scope == "message"]
        self._negative_sentence = {id(f): [g for g in f.negative if g.scope != "message"] for f in rules.files}
        self._others_sentence = {key: [g for g in gates if g.others] for key, gates in self._negative_sentence.items()}
        self._sensitive_message = [g for g in sensitive if g.scope == "message"]
        self._sensitive_sentence = [g for g in sensitive if g.scope == "sentence"]

    def _search(self, rule: Trigger | Gate | regex.Pattern, text: str) -> regex.Match | None:
        """A pattern (a rule's, or a statement opening) that times out is logged and counts as no match."""
        try:
            return (rule if isinstance(rule, regex.Pattern) else rule.pattern).search(text, timeout=self.timeout)
        except TimeoutError:
            name = "a statement opening" if isinstance(rule, regex.Pattern) else f"rule {rule.id} of {rule.source}"
            log.warning("memo-mw: %s timed out on a message of %d characters; treated as no match", name, len(text))
            return None

    def _gate_hit(self, gates: list[Gate], text: str) -> Gate | None:
        return next((gate for gate in gates if self._search(gate, text) is not None), None)

    def clean(self, text: str) -> str:
        """NFKC, fillers removed, whitespace collapsed (line breaks stay: they end sentences)."""
        text = nfkc(text)
        for filler in [f for rule_file in self.rules.files if _applies(rule_file, text) for f in rule_file.fillers]:
            try:
                text = filler.sub("", text, timeout=self.timeout)
            except TimeoutError:
                log.warning("memo-mw: a filler pattern timed out; left the text as it was")
        return _BLANKS.sub(" ", text).strip()

    def process(self, message: str) -> FunnelResult:
        recall_all = self.is_recall_all(message)
        # PII is masked first, so no capture can cut an address in half and keep a piece.
        text = mask_pii(self.clean(message or ""))
        if not text:
            return FunnelResult("no_trigger", trace=(("trigger", "empty message"),), recall_all=recall_all)
        trace: list[tuple[str, str]] = []
        sentences = clauses(text)
        forget = self._forget_request(text)
        if forget is None:
            stage, candidates = self._capture(text, sentences, trace)
            return FunnelResult(stage, candidates=tuple(candidates), trace=tuple(trace), recall_all=recall_all,
                                declined=self._declined(stage, text, trace), text=text)
        gate, what = forget
        trace.append(("forget", f"{gate.id} ({gate.scope})"))
        candidates = []
        if gate.scope == "match":
            # "Forget that I play tennis. I like golf now.": the other sentences still count, and so does
            # what follows the request in its own ("Forget what I said about Berlin, I moved to Hamburg").
            rest = []
            for parts in sentences:
                match = self._search(gate, parts[0])
                rest += [parts] if match is None else clauses(strip_edge_punct(parts[0][match.end():]))
            if rest:
                candidates = self._capture(text, rest, trace)[1]
        return FunnelResult("forget", candidates=tuple(candidates), forget_scope=gate.scope, forget_match=what,
                            trace=tuple(trace), recall_all=recall_all, text=text)

    def history_text(self, result: FunnelResult) -> str | None:
        """What the chat history keeps of a processed message: its cleaned, PII-masked text. None for
        a forget request and for a message any sentence of which meets a sensitive gate: all of it stays out."""
        text = result.text
        if not text or result.stage in ("forget", "sensitive") or self._gate_hit(self._sensitive_message, text):
            return None
        sentences = {sentence for _, _, sentence in clauses(text)}
        return None if any(self._gate_hit(self._sensitive_sentence, s) for s in sentences) else text

    def _declined(self, stage: str, text: str, trace: list[tuple[str, str]]) -> str | None:
        """The reason an explicit request to remember is not kept (the gate that stopped it)."""
        if stage == "captured" or not any(self._search(t, text) for t in self.rules.triggers if t.explicit):
            return None
        if stage == "no_trigger":
            return "nothing to remember"
        reason = trace[-1][1]  # "en.sens.health: health or medication"
        return reason.partition(": ")[2] or reason

    def is_recall_all(self, message: str) -> bool:
        """True for questions like "what do you remember about me"."""
        return self._gate_hit(self.rules.gates("recall_all"), nfkc(message or "")) is not None

    def _forget_request(self, text: str) -> tuple[Gate, str | None] | None:
        """The forget gate the message meets, and what it names (None: everything)."""
        for rule_file in self.rules.files:
            if not _applies(rule_file, text):
                continue
            for gate in rule_file.forget:
                match = self._search(gate, text)
                if match is None:
                    continue
                if gate.scope == "all":
                    return gate, None
                what = strip_edge_punct(match.group("what") or "")
                if what:
                    return gate, what
        return None

    def _capture(self, text: str, sentences: list[tuple[str, str, str]], trace: list[tuple[str, str]]
                 ) -> tuple[str, list[Candidate]]:
        """Trigger, length, negative, sensitive and compression stages over the given clauses."""
        hits = self._the_users([(parts[0], self._hits(*parts)) for parts in sentences])
        if not hits:
            trace.append(("trigger", "no trigger matched"))
            return "no_trigger", []
        trace.append(("trigger", ", ".join(h.trigger.id for h in hits)))

        # The length limit is a clause's: a long story still gives up the statements in it.
        long = [h for h in hits if len(h.sentence) > h.rule_file.max_length]
        trace.extend(("length", f"{h.trigger.id}: {len(h.sentence)} > {h.rule_file.max_length} characters")
                     for h in long)
        hits = [h for h in hits if h not in long]
        if not hits:
            return "too_long", []
        trace.append(("length", f"{max(len(h.sentence) for h in hits)} <= {hits[0].rule_file.max_length}"))

        for stage, message_gates in (("negative", self._negative_message), ("sensitive", self._sensitive_message)):
            whole = self._gate_hit(message_gates, text)
            stops = [(hit, whole or self._sentence_gate(stage, hit)) for hit in hits]
            trace.extend((stage, f"{gate.id}: {gate.reason}") for _, gate in stops if gate is not None)
            hits = [hit for hit, gate in stops if gate is None]
            if not hits:
                return stage, []

        candidates: dict[tuple[str, int], Candidate] = {}
        for hit in hits:
            candidate = self._compress(hit)
            if candidate is None:
                trace.append(("compress", f"{hit.trigger.id}: nothing usable captured"))
            elif (candidate.key, candidate.polarity) not in candidates:
                candidates[(candidate.key, candidate.polarity)] = candidate
                trace.append(("compress", f"{hit.trigger.id} -> {candidate.content}"))
        if not candidates:
            return "unusable", []
        return "captured", list(candidates.values())

    def _sentence_gate(self, stage: str, hit: _Hit) -> Gate | None:
        """The first sentence gate that stops the hit: a sensitive one reads the sentence; a negative one, of
        the hit's own file, its statement (or, by its scope, the hit's clause or the statement up to the hit)
        or, for statements about someone else (`others: true`), the pieces it read, which a trigger about
        them by design or an explicit request passes (docs/rules.md)."""
        if stage == "sensitive":
            return self._gate_hit(self._sensitive_sentence, hit.whole)
        gates = self._negative_sentence[id(hit.rule_file)]
        # A plan takes its time from the whole statement: "Today is the weekend and I plan to go on a trip".
        clause = hit.clause if hit.clause and hit.trigger.type in ("fact", "preference") else hit.statement
        read = {"clause": clause, "preceding": hit.preceding or hit.statement}
        stop = next((gate for gate in gates if not gate.others and self._search(
            gate, read.get(gate.scope, hit.statement)) is not None), None)
        if stop is None and not (hit.trigger.of_others or hit.trigger.explicit):
            stop = self._gate_hit(self._others_sentence[id(hit.rule_file)], hit.sentence)
        return stop

    def _hits(self, clause: str, statement: str, whole: str) -> list[_Hit]:
        """The triggers the clause meets, in its order: after a match, the comma pieces it left before
        and after it are read again, and a run of them that meets none is read again without its first
        piece; so is the clause, when it meets none and opens on the user ("我以前很喜欢喝奶茶，现在改喝茶了")."""
        spans = [piece.span() for piece in _PIECE.finditer(clause)]
        if len(spans) > MAX_PIECES:  # a paste: read once, as a whole
            return [hit] if (hit := self._trigger(clause, statement, whole)) else []
        opens = bool(spans) and self._names_the_user(clause[spans[0][0]:spans[0][1]])
        found, todo = [], [(0, len(spans), opens)]  # runs of pieces to read: first, past-the-last, again?
        while todo:
            lo, hi, again = todo.pop()
            hit = self._trigger(clause[spans[lo][0]:spans[hi - 1][1]].strip(), statement, whole) if lo < hi else None
            if hit is None:
                if again and hi - lo > 1:  # these pieces met no trigger: read them without the first
                    todo.append((lo + 1, hi, True))
                continue
            first, last = lo + hit.touched[0], lo + hit.touched[1]
            hit.sentence = clause[spans[first][0]:spans[last - 1][1]].strip()  # the pieces it read, as typed
            hit.touched, start = (first, last), first
            while start > 0 and not self._names_the_user(clause[spans[start - 1][0]:spans[start - 1][1]].strip()):
                start -= 1  # "今天，我想吃火锅" is one clause; "我刚下班，我是做设计的" two
            hit.clause = clause[spans[start][0]:spans[last - 1][1]].strip()
            hit.preceding = statement[:max(statement.find(clause), 0) + spans[last - 1][1]]
            found.append(hit)
            todo.append((lo, first, True))
            if last < hi:
                todo.append((last, hi, True))
        return sorted(found, key=lambda hit: hit.touched)

    def _the_users(self, read: list[tuple[str, list[_Hit]]]) -> list[_Hit]:
        """The hits of the clauses, in order, less those about someone else. Once someone else is named (by a
        trigger marked `others: true`, or a gate so marked at the start of a comma piece), what follows is
        theirs until a piece names the user: "我同事是湖南人，喜欢吃辣", "有个女儿。今年上初一" keep no liking or
        grade; "我老婆是老师，我是程序员" keeps both. After a gate in its own clause, a hit that states a subject
        is the negative stage's to judge ("My kids are grown, my hobby is gardening")."""
        if not any(hits for _, hits in read):
            return []
        # theirs: someone else was named, so what follows is theirs; after_gate: a gate named them in this
        # clause, so only a statement with its subject unsaid is theirs.
        kept, theirs, after_gate = [], False, False
        for clause, hits in read:
            files = [f for f in self.rules.files if _applies(f, clause)]
            theirs, after_gate = theirs or after_gate, False
            for index, piece in enumerate(_PIECE.findall(clause)):
                gated = any(self._gate_hit(self._others_sentence[id(f)], piece.strip()) for f in files)
                if gated or self._names_the_user(piece.strip()):
                    theirs = after_gate = False
                for hit in (hit for hit in hits if hit.touched[0] == index):
                    others = hit.trigger.of_others or self._gate_hit(self._others_sentence[id(hit.rule_file)],
                                                                     hit.sentence) is not None
                    unsaid = hit.trigger.statement and not hit.groups.get("who")
                    if (theirs or after_gate and unsaid) and not others \
                            and not self._says_the_user(hit.rule_file, hit.sentence):
                        continue
                    kept.append(hit)
                    theirs, after_gate = others, False
                after_gate = after_gate or gated
        return kept

    def _names_the_user(self, text: str) -> bool:
        """The text opens on the user's own subject, as any grammar that applies to it reads it."""
        return any(self._says_the_user(f, text) for f in self.rules.files if f.opening and _applies(f, text))

    def _says_the_user(self, rule_file: RuleFile, text: str) -> bool:
        """The text opens on the user's own subject (the grammar opening's ``said`` group). A file with no
        grammar reads no subjects: what it matches is the user's."""
        if rule_file.opening is None:
            return True
        opened = self._search(rule_file.opening, lowered(spelled_out(rule_file.contractions, text)))
        return opened is not None and opened.group("said") is not None

    def _trigger(self, sentence: str, statement: str = "", whole: str = "") -> _Hit | None:
        """The first trigger, in file order, that matches the sentence. The grammar's triggers read
        it with contractions spelled out, and only when it opens as a statement (a subject)."""
        folded = sentence.casefold()
        for rule_file in self.rules.files:
            if not _applies(rule_file, sentence):
                continue
            said = spelled_out(rule_file.contractions, sentence) if rule_file.opening else sentence
            low = lowered(said)
            opens = rule_file.opening is not None and self._search(rule_file.opening, low) is not None
            for trigger in rule_file.triggers:
                if trigger.statement and not opens:
                    continue
                if not requires_met(trigger, low=low, folded=folded):
                    continue
                match = self._search(trigger, low if trigger.statement else sentence)
                if match is not None and statement_form(trigger, match):
                    # A statement read the lower-cased sentence: what it keeps is taken from the sentence.
                    groups = {name: None if match.start(name) < 0 else said[match.start(name):match.end(name)]
                              for name in match.re.groupindex} if trigger.statement else match.groupdict()
                    groups.setdefault("neg", negation_in(trigger, match) if trigger.statement else None)
                    return _Hit(sentence, trigger, groups, rule_file, statement or sentence, whole or sentence,
                                *_touched(said if trigger.statement else sentence, match))
        return None

    def _compress(self, hit: _Hit) -> Candidate | None:
        said, trigger = summarize(hit.trigger, hit.rule_file, hit.groups), hit.trigger
        if said is None:
            return None
        content, key = said
        # What someone else did or said stays out: of a statement about them the excerpt is what the rule read.
        excerpt = hit.read if trigger.of_others and hit.read else hit.sentence
        return Candidate(type=trigger.type, key=key, polarity=trigger.polarity, content=content, excerpt=excerpt,
                         rule_id=trigger.id, confidence=trigger.confidence, ttl_days=trigger.ttl_days,
                         language=hit.rule_file.language, topics=sorted(self.topics.tag(f"{content} {hit.sentence}")))


"""What one persona's history holds, indexed for query planning: which user turn voices which
preference version or event (from the turns' annotations, never from their text), and what holds when."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from pipeline.rng import derive_rng
from pipeline.s4_queries.sources import Pools, event_kind
from pipeline.words import content_words, mentioned, stems
from schemas.conversation import SessionWithTurns
from schemas.persona import Persona
from schemas.timeline import Event, PreferenceVersion, Timeline

END_GAP = timedelta(hours=1)


class TurnRef(BaseModel):
    """A user turn, with its session's time so refs sort chronologically."""

    model_config = ConfigDict(frozen=True)

    time: datetime
    session_id: str
    turn_index: int


@dataclass
class Facts:
    """One persona's timeline and sessions with the look-ups the query builders need."""

    persona: Persona
    timeline: Timeline
    sessions: list[SessionWithTurns]
    pools: Pools
    n_options: int
    voiced: dict[str, list[TurnRef]] = field(default_factory=dict)
    by_topic: dict[str, list[SessionWithTurns]] = field(default_factory=dict)
    _texts: list[tuple[str, set[str]]] = field(default_factory=list)
    asked: set[str] = field(default_factory=set)  # the user messages already planned, so none repeats
    _memo: dict[tuple, object] = field(default_factory=dict)  # pure look-ups asked again by every query

    def _memoized(self, key: tuple, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def __post_init__(self) -> None:
        voiced: dict[str, list[TurnRef]] = defaultdict(list)
        by_topic: dict[str, list[SessionWithTurns]] = defaultdict(list)
        for swt in sorted(self.sessions, key=lambda s: (s.session.time, s.session.session_id)):
            by_topic[swt.session.topic].append(swt)
            for turn in swt.turns:
                if turn.role == "user":
                    ref = TurnRef(time=swt.session.time, session_id=swt.session.session_id, turn_index=turn.turn_index)
                    for key in [*turn.pref_versions, *turn.event_ids]:
                        voiced[key].append(ref)
        self.voiced, self.by_topic = dict(voiced), dict(by_topic)
        self._texts = [(t.content.casefold(), content_words(t.content)) for s in self.sessions for t in s.turns]

    def unsaid(self, item: str) -> bool:
        """True when no turn of the persona's history (either role) names ``item``: "you have not told me" holds."""
        folded, words = item.casefold(), content_words(item)
        return self._memoized(("unsaid", item), lambda: item not in self.pools.held and not any(
            mentioned(t, w, folded, words) for t, w in self._texts))

    def spare_items(self, topic: str, rng: random.Random, k: int) -> list[str]:
        """Up to ``k`` items of ``topic`` from the persona's pool that were never held nor named anywhere."""
        return [i for i in self.pools.fresh_items(topic, rng, k + 4) if self.unsaid(i)][:k]

    def told_by(self, topic: str, as_of: datetime) -> list[str]:
        """Life and routine events voiced by user turns of ``topic`` in sessions up to ``as_of`` (anchor session whole)."""
        kinds = {e.event_id: e.kind for e in self.timeline.events}
        return [e for swt in self.by_topic.get(topic, []) if swt.session.time <= as_of for turn in swt.turns
                if turn.role == "user" for e in turn.event_ids if kinds.get(e) in ("life_event", "routine")]

    @property
    def end(self) -> datetime:
        """End of history: just after the persona's last session."""
        return max(s.session.time for s in self.sessions) + END_GAP

    def final(self, topic: str) -> SessionWithTurns | None:
        """The persona's last session of ``topic``."""
        sessions = self.by_topic.get(topic)
        return sessions[-1] if sessions else None

    def refs(self, keys: list[str], as_of: datetime) -> list[TurnRef] | None:
        """The latest user turn voicing each key by ``as_of``; None when some key was never voiced."""
        out: list[TurnRef] = []
        for key in keys:
            turns = [r for r in self.voiced.get(key, []) if r.time <= as_of]
            if not turns:
                return None
            if turns[-1] not in out:
                out.append(turns[-1])
        return sorted(out, key=lambda r: (r.time, r.session_id, r.turn_index))

    def told_events(self, topic: str) -> list[str]:
        """Life and routine events voiced by user turns in ``topic``'s sessions, in telling order."""
        kinds = {e.event_id: e.kind for e in self.timeline.events}
        out: list[str] = []
        for swt in self.by_topic.get(topic, []):
            for turn in swt.turns:
                out += [e for e in turn.event_ids if kinds.get(e) in ("life_event", "routine") and e not in out]
        return out

    def current(self, pref_id: str, as_of: datetime) -> PreferenceVersion | None:
        return self.timeline.as_of(pref_id, as_of)

    def current_and_previous(self, pref_id: str, as_of: datetime) -> tuple[PreferenceVersion | None, PreferenceVersion | None]:
        """The version valid at ``as_of`` and the one it superseded (None for an initial version)."""
        current = self.current(pref_id, as_of)
        if current is None or current.version == 1:
            return current, None
        return current, self.timeline.versions(pref_id)[current.version - 2]

    def updates(self, pref_id: str, as_of: datetime) -> int:
        """How many times the preference changed by ``as_of``."""
        return max(0, sum(v.valid_from <= as_of for v in self.timeline.versions(pref_id)) - 1)

    def held(self, topic: str, as_of: datetime) -> list[PreferenceVersion]:
        """Versions of ``topic``'s preferences valid at ``as_of``."""
        return [c for pid in self.prefs(topic) if (c := self.current(pid, as_of)) is not None]

    def ended(self, topic: str, as_of: datetime) -> list[PreferenceVersion]:
        """Versions of ``topic``'s preferences that ended by ``as_of``, newest first."""
        old = [v for v in self.timeline.preferences if v.topic == topic and v.valid_to is not None and v.valid_to <= as_of]
        return sorted(old, key=lambda v: (v.valid_to, v.key), reverse=True)

    def prefs(self, topic: str) -> list[str]:
        """pref ids of ``topic``, in a stable order."""
        return sorted({p.pref_id for p in self.timeline.preferences if p.topic == topic})

    def life_cause(self, version: PreferenceVersion) -> Event | None:
        """The life event that caused this version (through its preference-update event)."""
        if version.caused_by_event_id is None:
            return None
        return self._memoized(("life_cause", version.key), lambda: self._life_cause(version))

    def _life_cause(self, version: PreferenceVersion) -> Event | None:
        for edge in self.timeline.edges:
            if edge.child_event_id == version.caused_by_event_id and edge.relation == "causes":
                parent = self.timeline.event(edge.parent_event_id)
                if parent.kind == "life_event":
                    return parent
        return None

    def causes(self, pref_id: str) -> list[Event]:
        """Every life event behind some version of the preference (any time): none may be a wrong reason."""
        return [c for v in self.timeline.versions(pref_id) if (c := self.life_cause(v)) is not None]

    def decoy_reasons(self, pref_id: str, k: int) -> list[tuple[str, str]]:
        """Up to ``k`` (grounding, summary) reasons that are false for this preference: life events the persona
        never lived that would have turned its item (naming the item first, then pushing one of its facets;
        never one that only reaches its topic: as related to the item as the true cause), of about the true
        cause's length, alternately toward the stance it left (first) and the one it holds. Fixed per preference, whoever asks: its revisit and
        generalize questions and its topic's recall questions show the same ones, so an event seen in another
        question of the persona is no sign of the true one."""
        away, toward = self.decoy_ways(pref_id)
        return [r for pair in zip(away, toward, strict=False) for r in pair][:k]

    def decoy_ways(self, pref_id: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The preference's wrong reasons by the way they would have turned it: (toward the stance it left,
        toward the one it holds), each of up to ``n_options`` + 2, no reason in both; fixed per preference (one
        list, so a question asking for fewer shows the first of the same ones)."""
        return self._memoized(("decoy_ways", pref_id), lambda: self._decoy_ways(pref_id, self.n_options + 2))

    def _decoy_ways(self, pref_id: str, k: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        causes = self.causes(pref_id)
        barred, near = {c.summary for c in causes}, causes[-1].summary if causes else ""
        kind = event_kind(near) if near else None

        def off_kind(summary: str) -> bool:  # of another kind than the true cause (scale, months)
            return kind is not None and event_kind(summary) != kind

        now = self.timeline.versions(pref_id)[-1]
        named = stems(now.item)
        rng = derive_rng(0, self.persona.persona_id, pref_id, "decoy_reasons")
        ways: list[list[tuple[str, str]]] = []
        for stance in ("dislike" if now.stance == "like" else "like", now.stance):
            pool: list[str] = []
            # only events that name the item or push one of its facets that way: one that merely reaches the
            # topic ("watched a zombie film" for heist films) is a non sequitur a reader rules out
            for tier in self.pools.related_events(now.topic, now.item, "+" if stance == "like" else "-")[:2]:
                tier = [s for s in tier if s not in barred]
                rng.shuffle(tier)
                # events of the true cause's kind (scale, and whether it takes months) first, then of the kind
                # personas live: the simulator's causes in a week or a month are minor experiences
                tier.sort(key=lambda s: (off_kind(s), s not in self.pools.causes))
                pool += tier
            # of about the cause's length (in steps of 3 words), those sharing words with the item first: a true
            # cause often names it ("food poisoning from street noodle soup" for pho), so sharing words with the
            # item does not tell the true reason
            shown = pool[: max(3 * k, 8)] + [s for s in pool[max(3 * k, 8):] if stems(s) & named]
            size = len(near.split())
            shown.sort(key=lambda s: (off_kind(s), abs(len(s.split()) - size) // 3 if near else 0, not stems(s) & named))
            taken = {r for way in ways for _, r in way}
            ways.append([(f"taxonomy:{r}", r) for r in dict.fromkeys(shown) if r not in taken][:k])
        return ways[0], ways[1]

    def related_untold(self, topic: str, rng: random.Random, k: int, near: str = "") -> list[str]:
        """Up to ``k`` life events the persona never lived that reach ``topic`` (as related to it as a told
        one), of about the length of ``near``: first the wrong reasons its revisit and generalize questions
        show about the topic's preferences (so an event seen in another of its questions is no sign of a
        lived one), then others that reach the topic, drawn per question."""
        shown = sorted({s for pid in self.prefs(topic) for _, s in self.decoy_reasons(pid, 3)})
        rest = [s for tier in self.pools.related_events(topic) for s in tier if s not in shown]
        rng.shuffle(shown)
        rng.shuffle(rest)
        return near_in_length(shown[:k] + rest[: max(2 * k, 8)], near, k)

    def decoy_items(self, topic: str) -> list[str]:
        """The second items of the topic's item x stance designs (one per preference, see ``decoy_item``): items
        the persona never held nor named that its acknowledge and provide questions show."""
        return sorted({d for pid in self.prefs(topic) if (v := self.current(pid, self.end))
                       and (d := self.decoy_item(topic, pid, v.item))})

    def decoy_item(self, topic: str, pref_id: str, like: str) -> str | None:
        """An item of the persona's own pool for ``topic`` never held nor named, fixed per (persona,
        preference), of the focal item's source (catalog or model) where one is, and of about its length:
        the second item of an item x stance design (acknowledge, provide), so neither row stands out by its item."""
        return self._memoized(("decoy_item", topic, pref_id, like), lambda: self._decoy_item(topic, pref_id, like))

    def _decoy_item(self, topic: str, pref_id: str, like: str) -> str | None:
        rng = derive_rng(0, self.persona.persona_id, pref_id, "decoy_item")
        spare = [i for i in self.spare_items(topic, rng, 8) if i != like]
        same = [i for i in spare if self.pools.source(topic, i) == self.pools.source(topic, like)] or spare
        size = len(like.split())
        return min(same, key=lambda i: abs(len(i.split()) - size)) if same else None


def near_in_length(pool: list[str], near: str, k: int) -> list[str]:
    """The ``k`` entries of ``pool`` whose word counts are closest to ``near``'s (ties in pool order)."""
    if not near:
        return pool[:k]
    size = len(near.split())
    return sorted(pool, key=lambda s: abs(len(s.split()) - size))[:k]


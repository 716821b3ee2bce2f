"""A synthetic agent-memory corpus with known ground truth, for demos, tests and benchmarks.

`generate(n)` returns `n` memory rows over several namespaces, a few existing links, and a `truth` table that
names every planted structure: duplicates, consolidation clusters, chains that must not collapse,
contradictions, stale and archived rows, pins, blocks, repeated episodic patterns, promotion candidates,
cross-namespace twins, link garbage. About `PLANTED_FRACTION` of the rows are planted; the rest are background
memories (conversation events) written so that they plant nothing by accident:

- every background sentence carries a unique ticket or note number, so no two rows share content;
- background templates avoid relational and copular forms ("X is Y", "uses", "prefers", "lives in",
  "works at"), so a structural contradiction join finds only the planted pairs;
- each planted group gets its own person and project names, so no two groups state facts about one subject;
- vectors are a namespace topic direction plus noise orthogonal to it, so unrelated memories of one topic sit
  around 0.25-0.5 cosine and no unplanted pair reaches 0.70 (tested; checked once on a whole 1M corpus).

`TRUTH_KINDS` says what each truth kind means. Pairwise kinds list `ids[0]` first: the head, the expected
canonical (highest importance) or the older statement.

Planted cosines are exact by construction: a member of a group is `c * head + sqrt(1 - c^2) * w` with `w` a
unit vector orthogonal to the head and to the other members' `w`, so member-head cosines are `c` and
member-member cosines are `c_i * c_j`. The truth note records them (`parse_note`).

Timestamps lie within `HISTORY_DAYS` before the as-of instant, `end_of_day(as_of)` (the exclusive bound of the
daily partition, see `timestamps.end_of_day`); every timestamp is strictly before it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import mmap
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from engram_pipelines.core import records
from engram_pipelines.core.digests import content_sha
from engram_pipelines.core.timestamps import UTC, end_of_day, format_timestamp

DEFAULT_AS_OF = dt.date(2026, 11, 29)
HISTORY_DAYS = 180.0
CORE_NAMESPACES = ("agent:coder", "agent:research", "user:alice", "user:bob")
CORE_WEIGHTS = (0.3, 0.25, 0.25, 0.2)
TENANT_TARGET_ROWS = 2_500  # for large corpora: many small tenants, as in a multi-tenant deployment
MIN_ROWS = 500
TOPICS_PER_NAMESPACE = 8
# The previous nightly run, 03:00 on the as-of day, in days before the as-of instant.
LAST_RUN_AGE = 21.0 / 24.0
DAY_US = 86_400_000_000
FIRST_NUMBER = 10_000  # ticket and note numbers: planted groups first, then background rows
_CHUNK = 8_192  # rows per vector batch: buffers under glibc's 32 MB mmap threshold get reused, not re-faulted

TRUTH_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("ids", pa.list_(pa.string()), nullable=False),
        pa.field("expected", pa.string(), nullable=False),
        pa.field("note", pa.string(), nullable=False),
    ]
)

TRUTH_KINDS = {
    # planted rows (about PLANTED_FRACTION of n)
    "exact_duplicate": "2-4 rows, identical content and vector; collapse into ids[0]",
    "near_duplicate": "2-4 paraphrases at cosine >= 0.97 to ids[0]; collapse into ids[0]",
    "merge_cluster": "2-6 paraphrases in [0.85, 0.97) to ids[0], the canonical; the others become losers",
    "pinned_cluster_member": "a merge cluster whose ids[1] is pinned: it must never be superseded",
    "chain": "A~B and B~C in [0.85, 0.97), A~C below 0.85: A and C never share a cluster",
    "contradiction": "older ids[0], newer ids[1]: one subject, another value or polarity; cos [0.80, 0.97)",
    "structural_contradiction": "a contradiction below cosine 0.80: only a (subject, relation) join finds it",
    "contradiction_control": "looks like one (elaboration, pronoun subject) but must not fire",
    "stale": "old, never accessed, unimportant, never scored: marked stale, then archived",
    "deprecated": "tagged deprecated: archived",
    "archived": "already archived; note due=yes: grace expired, moves to purge_queue",
    "purge_queue": "already queued; note due=yes: grace expired, purged with an audit pre-image",
    "pinned": "pinned, old, never accessed (some tagged deprecated): survives every step",
    "block": "kind block (some tagged deprecated): exempt from decay and retention",
    "semantic_pattern": "one fact in >= 3 conversations, pairwise cosine in [0.70, 0.85): a semantic node",
    "single_conversation_pattern": "one fact 3-4 times in one conversation: no semantic node",
    "compression_cluster": "3-5 low-importance notes in one conversation, pairwise >= 0.75: one summary",
    "promotable_stm": "STM with access >= 3 and importance >= 0.5 (some exactly at both): promoted to LTM",
    "semantic_promotion": "episodic, access > 10, importance > 0.8, a critical/permanent tag or 2 links in",
    "promotion_boundary": "just below a promotion threshold: not promoted",
    "cross_namespace_twin": "the same fact in two namespaces (namespace 'a,b'): never paired",
    "cue_boost": "equal rows but ids[0] has cue words and a cue tag: it scores higher (engram policy)",
    "association": "two related facts at cosine [0.70, 0.85): an associated link",
    "superseded": "ids[1] already superseded_by ids[0] (with a duplicate-of link): no change",
    "missing_embedding": "no vector: skipped by similarity analyses",
    "embedding_excluded": "a duplicate pair whose ids[1] has metadata.embeddingExcluded: never merged",
    # links and conversations (background and planted)
    "temporal_missing": "a conversation without temporal edges, ids in creation order: forward edges built",
    "temporal_boost": "[src, dst] temporal edge traversed since the last cycle: weight x 0.95 x 1.2",
    "temporal_prune": "[src, dst] temporal edge at 0.051: x 0.95 falls below 0.05, pruned",
    "dangling_link": "[src, dst] link with an endpoint id no memory has: gc removes it",
    "duplicate_link": "[src, dst] link present twice: gc keeps one",
}

# Planted cosine bands: inside the analyses' default thresholds, with a margin float noise never crosses.
DUPLICATE_COS = (0.975, 0.995)
MERGE_COS = (0.86, 0.955)
CHAIN_COS = (0.86, 0.90)  # ends: at most 0.90^2 = 0.81 < 0.85
CONTRADICTION_COS = (0.82, 0.955)
STRUCTURAL_COS = (0.62, 0.78)
ASSOCIATION_COS = (0.72, 0.84)
PATTERN_COS = (0.865, 0.915)  # to a latent fact: pairwise 0.748..0.837, above 0.70 and below the merge band
COMPRESSION_COS = (0.875, 0.915)  # pairwise 0.766..0.837, above the compression threshold 0.75
TOPIC_ALPHA = (0.5, 0.7)  # weight of the topic direction in a memory: same-topic pairs at 0.25..0.49
TOPIC_SHARE = 0.3  # squared share of the namespace direction in each topic: cross-topic pairs near 0.1

# -- words and templates (data/demo_corpus.yaml) -------------------------------------------------------------
# Slots: P person, X project, S service, T team, N unique number, D date, W weekday, C city, K research topic,
# V/U family values (U: the newer value of a contradiction), M member number.
SLOT_ORDER = ("P", "X", "S", "T", "N", "D", "W", "C", "K", "V", "U", "M")
_SLOT_RE = re.compile(r"\{([A-Z])\}")
TEMPLATES_PATH = Path(__file__).resolve().parents[1] / "data" / "demo_corpus.yaml"


def _positional(template: str) -> str:
    """'{P} met {X}' -> '{0} met {1}': positional formatting is the cheap path for a million rows."""
    return _SLOT_RE.sub(lambda m: f"{{{SLOT_ORDER.index(m.group(1))}}}", template)


def _templates(variants: Sequence[str]) -> tuple[str, ...]:
    return tuple(_positional(v) for v in variants)


def _render(templates: Sequence[str] | np.ndarray, slots: dict[str, np.ndarray]) -> list[str]:
    """Fill positional templates row by row; a slot missing from `slots` renders empty."""
    columns = [slots[name] if name in slots else itertools.repeat("") for name in SLOT_ORDER]
    return list(itertools.starmap(str.format, zip(templates, *columns, strict=False)))


@dataclass(frozen=True)
class _Family:
    """A group of sentences that state one fact in different words (all named values shared)."""

    name: str
    variants: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True)
class _Conflict:
    """Two statements about one subject with different values; `pairing` picks the value pair."""

    name: str
    older: str
    newer: str
    subject: str
    values: tuple[str, ...]
    rule: str
    pairing: str  # "swap": two different values; "same": one value (negation); "polar": "a|b" opposites


_DATA = yaml.safe_load(TEMPLATES_PATH.read_text(encoding="utf-8"))
_WORDS: dict[str, tuple[str, ...]] = {name: tuple(values) for name, values in _DATA["words"].items()}


def _family(raw: dict[str, Any]) -> _Family:
    return _Family(raw["name"], _templates(raw["variants"]), tuple(raw["values"]))


def _conflict(raw: dict[str, Any]) -> _Conflict:
    """`values` names a word list."""
    return _Conflict(
        raw["name"],
        _positional(raw["older"]),
        _positional(raw["newer"]),
        _positional(raw["subject"]),
        _WORDS[raw["values"]],
        raw["rule"],
        raw["pairing"],
    )


FIRST, LAST, PROJECTS = _WORDS["first"], _WORDS["last"], _WORDS["projects"]
SERVICES, TEAMS, CITIES = _WORDS["services"], _WORDS["teams"], _WORDS["cities"]
RESEARCH_TOPICS, MONTHS, WEEKDAYS = _WORDS["research_topics"], _WORDS["months"], _WORDS["weekdays"]
DATES = tuple(f"{m} {d}" for m in MONTHS for d in (3, 8, 12, 17, 21, 26))

# Background events: no relational or copular forms, one unique number each.
BACKGROUND = {flavor: _templates(variants) for flavor, variants in _DATA["background"].items()}
FLAVOR_BACKGROUND = {
    "coder": ("coder",),
    "research": ("research",),
    "user": ("user",),
    "tenant": ("coder", "research", "user"),
}
PARAPHRASES = {name: _family(raw) for name, raw in _DATA["paraphrases"].items()}
PARAPHRASES_BY_FLAVOR = {
    "coder": ("decision", "incident", "release"),
    "research": ("finding", "release"),
    "user": ("preference", "appointment"),
    "tenant": ("decision", "incident", "release", "preference", "finding", "appointment"),
}
# Twins state project facts (shared work two agents or tenants both record), whatever the namespaces.
TWIN_FAMILIES = ("decision", "incident", "release")
OBSERVATIONS = {flavor: _family(raw) for flavor, raw in _DATA["observations"].items()}
OBSERVATIONS["tenant"] = OBSERVATIONS["user"]
COMPRESSION = _templates(_DATA["compression"])
CHAINS = {name: _templates(variants) for name, variants in _DATA["chains"].items()}
CHAINS_BY_FLAVOR = {
    "coder": ("export",),
    "research": ("export",),
    "user": ("trip",),
    "tenant": ("export", "trip"),
}
ASSOCIATIONS = {flavor: _templates(variants) for flavor, variants in _DATA["associations"].items()}
ASSOCIATIONS["tenant"] = ASSOCIATIONS["coder"]
CONFLICTS = {raw["name"]: _conflict(raw) for raw in _DATA["conflicts"]}
CONFLICTS_BY_FLAVOR = {
    "coder": ("switched_db", "standup", "api_negation", "friday_deploys", "prefers_lang"),
    "research": ("works_at", "lives_in", "standup", "prefers_lang"),
    "user": ("lives_in", "works_at", "standup", "prefers_lang"),
    "tenant": tuple(CONFLICTS),
}
# Pairs below the cosine band are found only by joining claims on (subject, relation) with differing values; a
# negation keeps the value, so no negation family there.
STRUCTURAL_BY_FLAVOR = {
    flavor: tuple(name for name in names if CONFLICTS[name].pairing != "same")
    for flavor, names in CONFLICTS_BY_FLAVOR.items()
}
# Pairs that look like contradictions by cosine but must not fire (seed 000's rules).
CONTROLS = tuple(_conflict(raw) for raw in _DATA["controls"])
SINGLES = {name: _templates(variants) for name, variants in _DATA["singles"].items()}
BLOCK_NAMES = ("style-guide", "support-persona", "standing-instructions")

TIERS = {name: i for i, name in enumerate(records.TIERS)}
KINDS = {name: i for i, name in enumerate(records.KINDS)}
ZONES = {name: i for i, name in enumerate(records.ZONES)}
SOURCES = ("chat", "reflection", "import", "block", "tool")
BACKGROUND_TAGS = (
    "[]",
    '["meeting"]',
    '["code-review"]',
    '["research"]',
    '["travel"]',
    '["important"]',
    '["follow-up"]',
)
BACKGROUND_TAG_P = (0.7, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05)
CLUSTER_TAGS = ("[]", '["important"]', '["follow-up"]', '["meeting"]', '["decision"]')


# -- the result --------------------------------------------------------------------------------------------


@dataclass
class DemoCorpus:
    memories: pa.Table  # records.memory_schema(dim)
    links: pa.Table  # records.LINK_SCHEMA
    truth: pa.Table  # TRUTH_SCHEMA: (namespace, kind, ids, expected, note)


def parse_note(note: str) -> dict[str, str]:
    """A truth note 'cos=0.91,0.88; band=[0.85,0.97)' as {'cos': '0.91,0.88', 'band': '[0.85,0.97)'}."""
    pairs = (part.split("=", 1) for part in note.split("; ") if "=" in part)
    return {key.strip(): value.strip() for key, value in pairs}


# -- planning: rows as numpy columns, filled by background and by one planter per truth kind ---------------


@dataclass
class _Groups:
    """Planted groups of one kind: plan rows per member slot (-1 pads), namespaces, ordinal and number."""

    rows: np.ndarray  # (G, S) int64
    size: np.ndarray  # (G,)
    ns: np.ndarray  # (G,) namespace of the group (slot 0)
    ns2: np.ndarray  # (G,) second namespace (cross-namespace kinds), else == ns
    ordinal: np.ndarray  # (G,) index of the group among all groups: its subjects (person, project) are unique
    number: np.ndarray  # (G,) its ticket/note number, unique in the corpus

    def __len__(self) -> int:
        return len(self.size)

    def slot(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """(group indexes, plan rows) of the groups that have a member in slot `s`."""
        present = np.flatnonzero(self.rows[:, s] >= 0) if s < self.rows.shape[1] else np.empty(0, np.int64)
        return present, self.rows[present, s]


@dataclass
class _VectorGroups:
    """Members at exact cosines to a head: a stored row (head >= 0) or a latent fact vector (head == -1)."""

    head: np.ndarray  # (G,)
    members: np.ndarray  # (G, S), -1 pads
    cos: np.ndarray  # (G, S)
    ns: np.ndarray  # (G,) namespace, for a latent head's topic


class _Plan:
    """Every column of the corpus in plan order, as numpy arrays; ages are days before the as-of instant."""

    def __init__(self, n: int, rng: np.random.Generator, anchor: dt.datetime, ns_names: list[str]):
        self.n, self.rng, self.anchor, self.ns_names = n, rng, anchor, ns_names
        self.flavors = [_flavor(name) for name in ns_names]
        self.ns = np.zeros(n, np.int32)
        self.topic = np.zeros(n, np.int16)
        self.tier = np.full(n, TIERS["ltm"], np.int8)
        self.kind = np.full(n, KINDS["episodic"], np.int8)
        self.importance = np.full(n, 0.5)
        self.access = np.zeros(n, np.int64)
        self.age = np.full(n, np.nan)
        self.last_age = np.full(n, np.nan)
        self.updated_age = np.full(n, np.nan)
        self.zone = np.zeros(n, np.int8)
        self.zone_age = np.full(n, np.nan)
        self.pinned = np.zeros(n, bool)
        self.stale = np.zeros(n, bool)
        self.score = np.full(n, np.nan)
        self.version = np.ones(n, np.int64)
        self.superseded_row = np.full(n, -1, np.int64)
        self.tags = np.full(n, "[]", dtype=object)
        self.extra = np.full(n, None, dtype=object)  # JSON members added to metadata
        self.source = np.zeros(n, np.int8)
        self.conv = np.full(n, -1, np.int64)
        self.project = np.full(n, None, dtype=object)
        self.content = np.full(n, "", dtype=object)
        self.has_vector = np.ones(n, bool)
        self.vector_groups: list[_VectorGroups] = []
        self.truth: list[tuple[str, str, list[int], str, str]] = []
        self.links: list[dict[str, np.ndarray]] = []
        self.extra_ids = 0  # ids that exist only as dangling link endpoints (plan rows n, n+1, ...)
        self.next_conv = 0
        self.next_number = FIRST_NUMBER
        self.bg_range = np.zeros((len(ns_names), 2), np.int64)

    # helpers used by the planters
    def uniform(self, lo: float, hi: float, size: int | tuple[int, ...]) -> np.ndarray:
        return self.rng.uniform(lo, hi, size)

    def pick(self, options: Sequence[str], size: int) -> np.ndarray:
        return np.asarray(options, dtype=object)[self.rng.integers(0, len(options), size)]

    def new_conversations(self, count: int) -> np.ndarray:
        start, self.next_conv = self.next_conv, self.next_conv + count
        return np.arange(start, start + count, dtype=np.int64)

    def when(self, age_days: float) -> str:
        return format_timestamp(self.anchor - dt.timedelta(days=float(age_days)))

    def accessed(self, rows: np.ndarray, access: np.ndarray, recent_within: float | None = None) -> None:
        """Set access counts and a last access between creation (or `recent_within` days ago) and now."""
        self.access[rows] = access
        upper = self.age[rows] if recent_within is None else np.minimum(self.age[rows], recent_within)
        self.last_age[rows] = np.where(access > 0, upper * self.rng.uniform(0.02, 1.0, len(rows)), np.nan)

    def add_truth(
        self, kind: str, ns: int | str, rows: Sequence[int] | np.ndarray, expected: str, note: str = ""
    ) -> None:
        label = ns if isinstance(ns, str) else self.ns_names[ns]
        self.truth.append((label, kind, [int(r) for r in rows], expected, note))

    def add_links(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        kind: str,
        weight: np.ndarray,
        origin: str,
        created_age: np.ndarray,
        traversed_age: np.ndarray | None = None,
        updated_age: np.ndarray | None = None,
    ) -> None:
        count = len(src)
        if count == 0:
            return
        traversed = np.full(count, np.nan) if traversed_age is None else np.asarray(traversed_age, np.float64)
        self.links.append(
            {
                "src": np.asarray(src, np.int64),
                "dst": np.asarray(dst, np.int64),
                "kind": np.full(count, kind, dtype=object),
                "weight": np.asarray(weight, np.float64),
                "origin": np.full(count, origin, dtype=object),
                "created_age": np.asarray(created_age, np.float64),
                "updated_age": np.asarray(created_age if updated_age is None else updated_age, np.float64),
                "traversed_age": traversed,
            }
        )


def _flavor(namespace: str) -> str:
    return {
        "agent:coder": "coder",
        "agent:research": "research",
        "user:alice": "user",
        "user:bob": "user",
    }.get(namespace, "tenant")


def _person(ordinal: int) -> str:
    """The person of a planted group, unique per ordinal: 'Alice Novak', then double-barrelled surnames
    ('Alice Novak-Okafor', 125k names in all, enough for 1M rows), then middle initials, then numbers."""
    first, last = FIRST[ordinal % len(FIRST)], ordinal // len(FIRST) % len(LAST)
    second = ordinal // (len(FIRST) * len(LAST)) % len(LAST)
    initial = ordinal // (len(FIRST) * len(LAST) * len(LAST))
    surname = LAST[last] if second == 0 else f"{LAST[last]}-{LAST[(last + second) % len(LAST)]}"
    if initial == 0:
        return f"{first} {surname}"
    suffix = "" if initial <= 26 else f" {(initial - 1) // 26 + 1}"
    return f"{first} {chr(65 + (initial - 1) % 26)}. {surname}{suffix}"


def _project(ordinal: int) -> str:
    """The project of a planted group, unique per ordinal: 'Falcon', ..., 'Quartz', 'Falcon-2', ..."""
    base = PROJECTS[ordinal % len(PROJECTS)]
    return base if ordinal < len(PROJECTS) else f"{base}-{ordinal // len(PROJECTS) + 1}"


def _group_slots(
    plan: _Plan,
    groups: _Groups,
    values: Sequence[str] | np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One value per group for every slot; the subjects (P, X) belong to this group alone."""
    size = len(groups)
    slots = {
        "P": np.asarray([_person(int(k)) for k in groups.ordinal], dtype=object),
        "X": np.asarray([_project(int(k)) for k in groups.ordinal], dtype=object),
        "S": plan.pick(SERVICES, size),
        "T": plan.pick(TEAMS, size),
        "N": np.asarray([str(v) for v in groups.number], dtype=object),
        "D": plan.pick(DATES, size),
        "W": plan.pick(WEEKDAYS, size),
        "C": plan.pick(CITIES, size),
        "K": plan.pick(RESEARCH_TOPICS, size),
    }
    if values is not None:
        slots["V"] = np.asarray(values, dtype=object)
    return slots


def _render_slot(
    plan: _Plan,
    groups: _Groups,
    s: int,
    templates: np.ndarray,
    slots: dict[str, np.ndarray],
    **row_slots: Sequence[str] | np.ndarray,
) -> None:
    """Write the content of member slot `s`: `templates` and `slots` are per group, `row_slots` per member."""
    present, rows = groups.slot(s)
    if len(rows) == 0:
        return
    chosen = {key: value[present] for key, value in slots.items()}
    chosen.update({key: np.asarray(value, dtype=object)[present] for key, value in row_slots.items()})
    plan.content[rows] = _render(templates[present], chosen)
    # Projects are known in the coding and tenant namespaces, as in the background.
    coded = np.asarray([plan.flavors[k] in ("coder", "tenant") for k in plan.ns[rows]], dtype=bool)
    plan.project[rows[coded]] = ["proj-" + x.lower() for x in chosen["X"][coded]]


def _choose(plan: _Plan, ns: np.ndarray, by_flavor: dict[str, tuple[str, ...]]) -> np.ndarray:
    """A family name per group, drawn among the families that suit the namespace's flavour."""
    out = np.empty(len(ns), dtype=object)
    for flavor, names in by_flavor.items():
        mask = np.asarray([plan.flavors[k] == flavor for k in ns], dtype=bool)
        out[mask] = plan.pick(names, int(mask.sum()))
    return out


def _member_rows(groups: _Groups) -> list[np.ndarray]:
    return [groups.slot(s)[1] for s in range(groups.rows.shape[1])]


def _all_rows(groups: _Groups) -> np.ndarray:
    rows = groups.rows.ravel()
    return rows[rows >= 0]


def _cosines(plan: _Plan, groups: _Groups, band: tuple[float, float], columns: int) -> np.ndarray:
    """Target cosines (G, columns), NaN where a group has no member in that column."""
    cos = plan.uniform(band[0], band[1], (len(groups), columns))
    cos[groups.rows[:, 1 : 1 + columns] < 0] = np.nan
    return cos


def _fmt(values: Sequence[float]) -> str:
    return ",".join(f"{v:.4f}" for v in values if not np.isnan(v))


# -- planters: paraphrase groups ---------------------------------------------------------------------------


def _paraphrase_base(
    plan: _Plan,
    groups: _Groups,
    cos: np.ndarray,
    *,
    exact: bool = False,
    families: np.ndarray | None = None,
) -> None:
    """Head (slot 0) and members stating one fact: head most important and oldest, members later."""
    fam = families if families is not None else _choose(plan, groups.ns, PARAPHRASES_BY_FLAVOR)
    values = [plan.pick(PARAPHRASES[f].values, 1)[0] for f in fam]
    slots = _group_slots(plan, groups, values)
    start = plan.rng.integers(0, 6, len(groups))
    for s in range(groups.rows.shape[1]):
        variant = start if exact else (start + s) % 6
        templates = np.asarray([PARAPHRASES[f].variants[v] for f, v in zip(fam, variant, strict=True)])
        _render_slot(plan, groups, s, templates, slots)
    head = groups.rows[:, 0]
    plan.age[head] = plan.uniform(25, 170, len(head))
    plan.importance[head] = np.round(plan.uniform(0.62, 0.8, len(head)), 2)
    plan.accessed(head, plan.rng.integers(2, 9, len(head)))
    for s in range(1, groups.rows.shape[1]):
        present, rows = groups.slot(s)
        plan.age[rows] = np.maximum(plan.age[head[present]] - plan.uniform(1, 20, len(rows)), 0.3)
        plan.importance[rows] = np.round(
            np.maximum(plan.importance[head[present]] - plan.uniform(0.05, 0.45, len(rows)), 0.05), 2
        )
        plan.accessed(rows, plan.rng.integers(0, 4, len(rows)))
    plan.vector_groups.append(_VectorGroups(head, groups.rows[:, 1:], cos, groups.ns))


def _plant_exact_duplicates(plan: _Plan, groups: _Groups) -> None:
    cos = np.where(groups.rows[:, 1:] >= 0, 1.0, np.nan)
    _paraphrase_base(plan, groups, cos, exact=True)
    for g in range(len(groups)):
        rows = groups.rows[g, : groups.size[g]]
        plan.add_truth(
            "exact_duplicate",
            groups.ns[g],
            rows,
            "collapse into ids[0] (identical content); annotate duplicateMatches",
            f"cos={_fmt(cos[g])}",
        )


def _plant_near_duplicates(plan: _Plan, groups: _Groups) -> None:
    cos = _cosines(plan, groups, DUPLICATE_COS, groups.rows.shape[1] - 1)
    _paraphrase_base(plan, groups, cos)
    for g in range(len(groups)):
        plan.add_truth(
            "near_duplicate",
            groups.ns[g],
            groups.rows[g, : groups.size[g]],
            "collapse into ids[0] (cosine >= 0.97); annotate duplicateMatches",
            f"cos={_fmt(cos[g])}",
        )


def _plant_merge_clusters(plan: _Plan, groups: _Groups) -> None:
    cos = _cosines(plan, groups, MERGE_COS, groups.rows.shape[1] - 1)
    _paraphrase_base(plan, groups, cos)
    rows = _all_rows(groups)
    plan.tags[rows] = plan.pick(CLUSTER_TAGS, len(rows))
    for g in range(len(groups)):
        members = groups.rows[g, : groups.size[g]]
        union = sorted({t for row in members for t in json.loads(plan.tags[row])})
        plan.add_truth(
            "merge_cluster",
            groups.ns[g],
            members,
            "one cluster, canonical ids[0]; the others superseded_by ids[0] with a duplicate-of link, "
            "their tags unioned onto ids[0] (review-gated)",
            f"cos={_fmt(cos[g])}; tags_union={','.join(union)}",
        )


def _plant_pinned_cluster_members(plan: _Plan, groups: _Groups) -> None:
    cos = _cosines(plan, groups, MERGE_COS, groups.rows.shape[1] - 1)
    _paraphrase_base(plan, groups, cos)
    plan.pinned[groups.rows[:, 1]] = True
    for g in range(len(groups)):
        plan.add_truth(
            "pinned_cluster_member",
            groups.ns[g],
            groups.rows[g, : groups.size[g]],
            "canonical ids[0]; ids[1] is pinned and never superseded; the rest merge into ids[0]",
            f"cos={_fmt(cos[g])}; pinned=ids[1]",
        )


def _plant_superseded(plan: _Plan, groups: _Groups) -> None:
    """A cluster merged by an earlier run: the loser is hidden behind a durable marker and a link."""
    cos = _cosines(plan, groups, MERGE_COS, 1)
    _paraphrase_base(plan, groups, cos)
    head, loser = groups.rows[:, 0], groups.rows[:, 1]
    when = plan.age[loser] * plan.uniform(0.1, 0.9, len(loser))
    plan.superseded_row[loser] = head
    plan.version[loser] = 2
    plan.updated_age[loser] = when
    plan.extra[loser] = [
        f'"supersededReason": "consolidation: duplicate of an older memory", "supersededAt": "{plan.when(a)}"'
        for a in when
    ]
    plan.add_links(loser, head, "duplicate-of", cos[:, 0], "consolidation", when)
    for g in range(len(groups)):
        plan.add_truth(
            "superseded",
            groups.ns[g],
            groups.rows[g, :2],
            "ids[1] already superseded_by ids[0]: excluded from new clusters, no change",
            f"cos={_fmt(cos[g])}",
        )


def _plant_embedding_excluded(plan: _Plan, groups: _Groups) -> None:
    cos = _cosines(plan, groups, DUPLICATE_COS, 1)
    _paraphrase_base(plan, groups, cos)
    plan.extra[groups.rows[:, 1]] = '"embeddingExcluded": true'
    for g in range(len(groups)):
        plan.add_truth(
            "embedding_excluded",
            groups.ns[g],
            groups.rows[g, :2],
            "never paired or merged: ids[1] has metadata.embeddingExcluded",
            f"cos={_fmt(cos[g])}",
        )


def _plant_twins(plan: _Plan, groups: _Groups) -> None:
    """The same fact in two namespaces (exact copy or a close paraphrase): must never pair."""
    exact = np.arange(len(groups)) % 2 == 0
    cos = np.where(exact, 1.0, plan.uniform(*DUPLICATE_COS, len(groups)))[:, None]
    families = plan.pick(TWIN_FAMILIES, len(groups))
    _paraphrase_base(plan, groups, cos, families=families)
    copies = groups.rows[exact]
    plan.content[copies[:, 1]] = plan.content[copies[:, 0]]
    for g in range(len(groups)):
        a, b = plan.ns_names[groups.ns[g]], plan.ns_names[groups.ns2[g]]
        plan.add_truth(
            "cross_namespace_twin",
            f"{a},{b}",
            groups.rows[g, :2],
            "never paired, clustered or linked (different namespaces)",
            f"cos={_fmt(cos[g])}; exact_content={'yes' if exact[g] else 'no'}; namespaces={a}|{b}",
        )


# -- planters: pairs and chains with distinct sentences ----------------------------------------------------


def _conflict_values(plan: _Plan, families: Sequence[_Conflict]) -> tuple[list[str], list[str]]:
    older, newer = [], []
    for fam in families:
        if fam.pairing == "polar":
            a, b = plan.pick(fam.values, 1)[0].split("|")
        elif fam.pairing == "same":
            a = b = plan.pick(fam.values, 1)[0]
        else:
            i = int(plan.rng.integers(0, len(fam.values)))
            j = (i + int(plan.rng.integers(1, len(fam.values)))) % len(fam.values)
            a, b = fam.values[i], fam.values[j]
        older.append(a)
        newer.append(b)
    return older, newer


def _plant_conflicts(
    plan: _Plan,
    groups: _Groups,
    kind: str,
    families: Sequence[_Conflict],
    band: tuple[float, float],
    band_label: str,
    expected: Callable[[_Conflict], str],
) -> None:
    """Older statement (slot 0) and a later one about the same subject with another value or polarity."""
    older_rows, newer_rows = groups.rows[:, 0], groups.rows[:, 1]
    values, updated = _conflict_values(plan, families)
    slots = _group_slots(plan, groups, values)
    slots["U"] = np.asarray(updated, dtype=object)
    _render_slot(plan, groups, 0, np.asarray([f.older for f in families]), slots)
    _render_slot(plan, groups, 1, np.asarray([f.newer for f in families]), slots)
    subjects = _render([f.subject for f in families], slots)
    cos = plan.uniform(band[0], band[1], len(groups))
    plan.kind[older_rows] = plan.kind[newer_rows] = KINDS["semantic"]
    plan.age[older_rows] = plan.uniform(40, 170, len(groups))
    plan.age[newer_rows] = np.maximum(plan.age[older_rows] - plan.uniform(5, 35, len(groups)), 0.5)
    for rows in (older_rows, newer_rows):
        plan.importance[rows] = np.round(plan.uniform(0.5, 0.8, len(rows)), 2)
        plan.accessed(rows, plan.rng.integers(0, 5, len(rows)))
    plan.vector_groups.append(_VectorGroups(older_rows, newer_rows[:, None], cos[:, None], groups.ns))
    for g, fam in enumerate(families):
        note = (
            f"cos={cos[g]:.4f}; band={band_label}; rule={fam.rule}; subject={subjects[g]}; "
            f"values={values[g]}|{updated[g]}"
        )
        plan.add_truth(kind, groups.ns[g], groups.rows[g, :2], expected(fam), note)


def _plant_contradictions(plan: _Plan, groups: _Groups) -> None:
    families = [CONFLICTS[name] for name in _choose(plan, groups.ns, CONFLICTS_BY_FLAVOR)]
    _plant_conflicts(
        plan,
        groups,
        "contradiction",
        families,
        CONTRADICTION_COS,
        "[0.80,0.97)",
        lambda f: (
            f"contradiction ({f.rule}): flag marks both with a contradicts link; under supersede ids[0] "
            "(older) is superseded_by ids[1]; never merged"
        ),
    )


def _plant_structural_contradictions(plan: _Plan, groups: _Groups) -> None:
    families = [CONFLICTS[name] for name in _choose(plan, groups.ns, STRUCTURAL_BY_FLAVOR)]
    _plant_conflicts(
        plan,
        groups,
        "structural_contradiction",
        families,
        STRUCTURAL_COS,
        "[0.00,0.80)",
        lambda f: (
            f"contradiction ({f.rule}) found only by the structural (subject, relation) join: cosine "
            "below 0.80; flag both, under supersede ids[0] is superseded_by ids[1]"
        ),
    )


def _plant_contradiction_controls(plan: _Plan, groups: _Groups) -> None:
    families = [CONTROLS[g % len(CONTROLS)] for g in range(len(groups))]
    _plant_conflicts(
        plan,
        groups,
        "contradiction_control",
        families,
        CONTRADICTION_COS,
        "[0.80,0.97)",
        lambda f: f"no contradiction ({f.rule}); never flagged nor superseded",
    )


def _plant_associations(plan: _Plan, groups: _Groups) -> None:
    """Two different facts about one subsystem: related (>= 0.70) but neither duplicates nor conflicts."""
    templates = np.asarray([ASSOCIATIONS[plan.flavors[k]] for k in groups.ns], dtype=object)
    slots = _group_slots(plan, groups)
    for s in (0, 1):
        _render_slot(plan, groups, s, templates[:, s], slots)
    cos = plan.uniform(*ASSOCIATION_COS, len(groups))
    rows = _all_rows(groups)
    plan.age[rows] = plan.uniform(10, 160, len(rows))
    plan.importance[rows] = np.round(plan.uniform(0.35, 0.75, len(rows)), 2)
    plan.accessed(rows, plan.rng.integers(0, 6, len(rows)))
    plan.vector_groups.append(_VectorGroups(groups.rows[:, 0], groups.rows[:, 1:2], cos[:, None], groups.ns))
    for g in range(len(groups)):
        plan.add_truth(
            "association",
            groups.ns[g],
            groups.rows[g, :2],
            "an associated link between ids[0] and ids[1] (related, not duplicates)",
            f"cos={cos[g]:.4f}",
        )


def _plant_chains(plan: _Plan, groups: _Groups) -> None:
    """A~B and B~C in the merge band, A~C below it; A is the most important: A and C never share a cluster."""
    names = _choose(plan, groups.ns, CHAINS_BY_FLAVOR)
    slots = _group_slots(plan, groups)
    for s in range(3):
        _render_slot(plan, groups, s, np.asarray([CHAINS[name][s] for name in names]), slots)
    a, b, c = groups.rows[:, 0], groups.rows[:, 1], groups.rows[:, 2]
    cos = plan.uniform(*CHAIN_COS, (len(groups), 2))  # A~B, C~B
    plan.age[a] = plan.uniform(60, 170, len(groups))
    plan.age[b] = plan.age[a] - plan.uniform(5, 20, len(groups))
    plan.age[c] = np.maximum(plan.age[b] - plan.uniform(5, 20, len(groups)), 0.5)
    for rows, imp in ((a, (0.75, 0.8)), (c, (0.6, 0.7)), (b, (0.4, 0.55))):
        plan.importance[rows] = np.round(plan.uniform(*imp, len(rows)), 2)
        plan.accessed(rows, plan.rng.integers(0, 5, len(rows)))
    plan.vector_groups.append(_VectorGroups(b, np.stack([a, c], axis=1), cos, groups.ns))
    for g in range(len(groups)):
        ab, cb = cos[g]
        plan.add_truth(
            "chain",
            groups.ns[g],
            groups.rows[g, :3],
            "never one cluster: ids[0] and ids[2] are below the merge threshold (ids[1] may join ids[0])",
            f"cos={ab:.4f},{ab * cb:.4f}; cos_bc={cb:.4f}; ends={ab * cb:.4f}",
        )


def _plant_cue_pairs(plan: _Plan, groups: _Groups) -> None:
    """Two unrelated memories with equal age, access and importance; only ids[0] has cue words and a tag."""
    slots = _group_slots(plan, groups)
    _render_slot(plan, groups, 0, np.full(len(groups), SINGLES["cue"][0], dtype=object), slots)
    _render_slot(plan, groups, 1, np.full(len(groups), SINGLES["plain"][0], dtype=object), slots)
    age = plan.uniform(45, 90, len(groups))
    for rows in (groups.rows[:, 0], groups.rows[:, 1]):
        plan.age[rows] = age
        plan.importance[rows] = 0.4
        plan.access[rows] = 1
        plan.last_age[rows] = age - 2
    plan.tags[groups.rows[:, 0]] = np.where(np.arange(len(groups)) % 2 == 0, '["critical"]', '["important"]')
    for g in range(len(groups)):
        plan.add_truth(
            "cue_boost",
            groups.ns[g],
            groups.rows[g, :2],
            "engram policy: score(ids[0]) > score(ids[1]) (cue words and a cue tag, all else equal)",
            f"tags={plan.tags[groups.rows[g, 0]]}",
        )


# -- planters: episodic patterns around a latent fact ------------------------------------------------------


def _plant_pattern(
    plan: _Plan,
    groups: _Groups,
    band: tuple[float, float],
    *,
    one_conversation: bool,
    importance: tuple[float, float],
) -> np.ndarray:
    """Observations of one fact (no stored head): pairwise cosines c_i * c_j."""
    families = [OBSERVATIONS[plan.flavors[k]] for k in groups.ns]
    values = [plan.pick(f.values, 1)[0] for f in families]
    slots = _group_slots(plan, groups, values)
    start = plan.rng.integers(0, 6, len(groups))
    for s in range(groups.rows.shape[1]):
        templates = np.asarray([f.variants[(v + s) % 6] for f, v in zip(families, start, strict=True)])
        _render_slot(plan, groups, s, templates, slots)
    cos = plan.uniform(band[0], band[1], groups.rows.shape)
    cos[groups.rows < 0] = np.nan
    rows = _all_rows(groups)
    plan.importance[rows] = np.round(plan.uniform(*importance, len(rows)), 2)
    if one_conversation:
        base = plan.uniform(10, 120, len(groups))
        conv = plan.new_conversations(len(groups))
        for s, rows_s in enumerate(_member_rows(groups)):
            present = groups.slot(s)[0]
            plan.age[rows_s] = base[present] - s * plan.uniform(2, 10, len(rows_s)) / 1440.0
            plan.conv[rows_s] = conv[present]
    else:
        plan.age[rows] = plan.uniform(8, 150, len(rows))
    plan.accessed(rows, plan.rng.integers(0, 3, len(rows)))
    plan.vector_groups.append(_VectorGroups(np.full(len(groups), -1), groups.rows, cos, groups.ns))
    return cos


def _pairwise_note(cos: np.ndarray) -> str:
    c = cos[~np.isnan(cos)]
    pair = np.outer(c, c)[np.triu_indices(len(c), 1)]
    return f"pairwise_min={pair.min():.4f}; pairwise_max={pair.max():.4f}; sources={len(c)}"


def _plant_semantic_patterns(plan: _Plan, groups: _Groups) -> None:
    cos = _plant_pattern(plan, groups, PATTERN_COS, one_conversation=False, importance=(0.4, 0.7))
    for g in range(len(groups)):
        k = groups.size[g]
        plan.add_truth(
            "semantic_pattern",
            groups.ns[g],
            groups.rows[g, :k],
            f"one semantic node from these {k} episodic sources in {k} conversations (corroborated)",
            _pairwise_note(cos[g]),
        )


def _plant_single_conversation_patterns(plan: _Plan, groups: _Groups) -> None:
    cos = _plant_pattern(plan, groups, PATTERN_COS, one_conversation=True, importance=(0.4, 0.7))
    for g in range(len(groups)):
        plan.add_truth(
            "single_conversation_pattern",
            groups.ns[g],
            groups.rows[g, : groups.size[g]],
            "no semantic node: one conversation, no context variability",
            _pairwise_note(cos[g]),
        )


def _plant_compression_clusters(plan: _Plan, groups: _Groups) -> None:
    """Low-value routine checks in one conversation: summarised into one row, members archived."""
    slots = _group_slots(plan, groups)
    start = plan.rng.integers(0, len(COMPRESSION), len(groups))
    for s in range(groups.rows.shape[1]):
        templates = np.asarray([COMPRESSION[(v + s) % len(COMPRESSION)] for v in start])
        _render_slot(plan, groups, s, templates, slots, M=np.full(len(groups), str(s + 1), dtype=object))
    cos = plan.uniform(*COMPRESSION_COS, groups.rows.shape)
    cos[groups.rows < 0] = np.nan
    base = plan.uniform(40, 120, len(groups))
    conv = plan.new_conversations(len(groups))
    for s, rows in enumerate(_member_rows(groups)):
        present = groups.slot(s)[0]
        plan.age[rows] = base[present] - s * plan.uniform(5, 30, len(rows)) / 1440.0
        plan.conv[rows] = conv[present]
    rows = _all_rows(groups)
    plan.importance[rows] = np.round(plan.uniform(0.1, 0.3, len(rows)), 2)
    _mark_stale(plan, rows, plan.uniform(0.1, 0.25, len(rows)))
    plan.vector_groups.append(_VectorGroups(np.full(len(groups), -1), groups.rows, cos, groups.ns))
    for g in range(len(groups)):
        k = groups.size[g]
        plan.add_truth(
            "compression_cluster",
            groups.ns[g],
            groups.rows[g, :k],
            f"one summary row replaces these {k} low-importance memories; members archived with "
            "summarized-into links (review-gated)",
            _pairwise_note(cos[g]),
        )


# -- planters: single rows with a lifecycle profile --------------------------------------------------------


def _single_content(plan: _Plan, groups: _Groups, templates: tuple[str, ...]) -> np.ndarray:
    """Render one of `templates` per row; returns the template index used."""
    which = plan.rng.integers(0, len(templates), len(groups))
    _render_slot(plan, groups, 0, np.asarray(templates, dtype=object)[which], _group_slots(plan, groups))
    return which


def _mark_stale(plan: _Plan, rows: np.ndarray, score: np.ndarray) -> None:
    """A stale mark left by the previous nightly run (a versioned write with its score)."""
    plan.stale[rows] = True
    plan.score[rows] = np.round(score, 4)
    plan.version[rows] = np.maximum(plan.version[rows], 2)
    plan.updated_age[rows] = LAST_RUN_AGE


def _plant_stale(plan: _Plan, groups: _Groups) -> None:
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["stale"])
    plan.age[rows] = plan.uniform(120, 178, len(rows))
    plan.importance[rows] = np.round(plan.uniform(0.05, 0.2, len(rows)), 2)
    plan.source[rows] = SOURCES.index("import")  # imported history: never scored, so not yet marked
    for g, row in enumerate(rows):
        plan.add_truth(
            "stale",
            groups.ns[g],
            [row],
            "marked stale (score < 0.3), then archived (score < 0.15, older than 30 days, never accessed)",
            f"age_days={plan.age[row]:.1f}; access=0; importance={plan.importance[row]:.2f}",
        )


def _plant_deprecated(plan: _Plan, groups: _Groups) -> None:
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["deprecated"])
    plan.age[rows] = plan.uniform(40, 150, len(rows))
    plan.importance[rows] = np.round(plan.uniform(0.3, 0.6, len(rows)), 2)
    plan.accessed(rows, plan.rng.integers(0, 3, len(rows)))
    plan.last_age[rows] = np.where(plan.access[rows] > 0, np.maximum(plan.last_age[rows], 35.0), np.nan)
    plan.last_age[rows] = np.minimum(plan.last_age[rows], plan.age[rows])
    plan.tags[rows] = '["deprecated"]'
    for g, row in enumerate(rows):
        plan.add_truth(
            "deprecated", groups.ns[g], [row], "archived (deprecated tag)", f"age_days={plan.age[row]:.1f}"
        )


def _plant_zoned(plan: _Plan, groups: _Groups, zone: str) -> None:
    """Rows an earlier retention sweep moved out of `active`: half past their grace period, half within."""
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["stale"])
    due = np.arange(len(rows)) % 2 == 0
    zone_age = np.where(due, plan.uniform(35, 60, len(rows)), plan.uniform(2, 20, len(rows)))
    earlier = 30.0 if zone == "purge_queue" else 0.0  # archived at least a grace period before the queue
    plan.age[rows] = np.minimum(zone_age + earlier + plan.uniform(30, 60, len(rows)), 178.0)
    plan.importance[rows] = np.round(plan.uniform(0.05, 0.2, len(rows)), 2)
    _mark_stale(plan, rows, plan.uniform(0.03, 0.14, len(rows)))
    plan.zone[rows] = ZONES[zone]
    plan.zone_age[rows] = zone_age
    plan.updated_age[rows] = zone_age
    plan.version[rows] = 3 if zone == "purge_queue" else 2
    reason = (
        "archive grace period expired" if zone == "purge_queue" else "score below 0.15, older than 30 days"
    )
    plan.extra[rows] = [f'"zoneReason": "{reason}", "zoneChangedAt": "{plan.when(a)}"' for a in zone_age]
    if zone == "archived":
        outcome = ("moves to purge_queue (archive grace of 30 days expired)", "stays archived (within grace)")
    else:
        outcome = (
            "purged, with a pre-image audit row (purge grace of 30 days expired)",
            "stays in purge_queue (within grace)",
        )
    for g, row in enumerate(rows):
        plan.add_truth(
            zone,
            groups.ns[g],
            [row],
            outcome[0] if due[g] else outcome[1],
            f"zone_since_days={zone_age[g]:.1f}; due={'yes' if due[g] else 'no'}",
        )


def _plant_archived(plan: _Plan, groups: _Groups) -> None:
    _plant_zoned(plan, groups, "archived")


def _plant_purge_queue(plan: _Plan, groups: _Groups) -> None:
    _plant_zoned(plan, groups, "purge_queue")


def _plant_pinned(plan: _Plan, groups: _Groups) -> None:
    """Old, never read, unimportant, some even tagged deprecated: the pin must still win everywhere."""
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["pinned"])
    plan.pinned[rows] = True
    plan.age[rows] = plan.uniform(100, 178, len(rows))
    plan.importance[rows] = np.round(plan.uniform(0.1, 0.3, len(rows)), 2)
    plan.tags[rows] = np.asarray(('["deprecated"]', "[]", '["important"]'), dtype=object)[
        np.arange(len(rows)) % 3
    ]
    for g, row in enumerate(rows):
        plan.add_truth(
            "pinned",
            groups.ns[g],
            [row],
            "survives everything: never marked stale, archived, purged, superseded or merged",
            f"age_days={plan.age[row]:.1f}; access=0; tags={plan.tags[row]}",
        )


def _plant_blocks(plan: _Plan, groups: _Groups) -> None:
    rows = groups.rows[:, 0]
    which = _single_content(plan, groups, SINGLES["block"])
    plan.kind[rows] = KINDS["block"]
    plan.source[rows] = SOURCES.index("block")
    plan.conv[rows] = -1
    plan.age[rows] = plan.uniform(60, 178, len(rows))
    plan.tags[rows] = np.where(np.arange(len(rows)) % 4 == 0, '["deprecated"]', "[]")
    plan.extra[rows] = [
        f'"block_name": "{BLOCK_NAMES[w]}-{n}"' for w, n in zip(which, groups.number, strict=True)
    ]
    for g, row in enumerate(rows):
        plan.add_truth(
            "block",
            groups.ns[g],
            [row],
            "exempt from decay, retention and merging (block)",
            f"age_days={plan.age[row]:.1f}; tags={plan.tags[row]}",
        )


def _plant_promotable(plan: _Plan, groups: _Groups) -> None:
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["promotable"])
    boundary = np.arange(len(rows)) % 4 == 0  # exactly at the thresholds (inclusive)
    plan.tier[rows] = TIERS["stm"]
    plan.age[rows] = plan.uniform(0.3, 6, len(rows))
    plan.importance[rows] = np.where(boundary, 0.5, np.round(plan.uniform(0.5, 0.9, len(rows)), 2))
    plan.accessed(rows, np.where(boundary, 3, plan.rng.integers(3, 10, len(rows))))
    for g, row in enumerate(rows):
        plan.add_truth(
            "promotable_stm",
            groups.ns[g],
            [row],
            "promoted stm -> ltm (access >= 3, importance >= 0.5)",
            f"access={plan.access[row]}; importance={plan.importance[row]:.2f}",
        )


def _inbound_links(plan: _Plan, rows: np.ndarray, ns: np.ndarray, count: int) -> None:
    """`count` associated links into each row from distinct background rows of its namespace."""
    lo, size = plan.bg_range[ns, 0], plan.bg_range[ns, 1] - plan.bg_range[ns, 0]
    first = (plan.rng.random(len(rows)) * size).astype(np.int64)
    for k in range(count):
        src = lo + (first + k) % size  # consecutive sources: distinct, so no accidental duplicate link
        created = np.minimum(plan.age[rows], plan.age[src]) * plan.uniform(0.1, 0.9, len(rows))
        plan.add_links(src, rows, "associated", plan.uniform(0.7, 0.9, len(rows)), "association", created)


def _plant_semantic_promotion(plan: _Plan, groups: _Groups) -> None:
    rows, ns = groups.rows[:, 0], groups.ns
    _single_content(plan, groups, SINGLES["semantic"])
    plan.age[rows] = plan.uniform(20, 120, len(rows))
    plan.importance[rows] = np.round(plan.uniform(0.82, 0.98, len(rows)), 2)
    plan.accessed(rows, plan.rng.integers(11, 41, len(rows)), recent_within=5.0)
    has_background = plan.bg_range[ns, 1] > plan.bg_range[ns, 0]
    via = np.where((np.arange(len(rows)) % 3 == 2) & has_background, "links", "tag")
    tag = np.where(np.arange(len(rows)) % 3 == 0, '["critical"]', '["permanent"]')
    plan.tags[rows] = np.where(via == "tag", tag, "[]")
    linked = via == "links"
    _inbound_links(plan, rows[linked], ns[linked], 2)
    for g, row in enumerate(rows):
        how = "inbound_links:2" if via[g] == "links" else f"tag:{json.loads(plan.tags[row])[0]}"
        plan.add_truth(
            "semantic_promotion",
            ns[g],
            [row],
            "episodic -> semantic (access > 10, importance > 0.8, critical/permanent tag or >= 2 links)",
            f"access={plan.access[row]}; importance={plan.importance[row]:.2f}; via={how}",
        )


BOUNDARY_CASES = (
    # (tier, access, importance, tags, inbound links, expected)
    ("stm", 2, 0.9, "[]", 0, "stays stm: access 2 < 3"),
    ("stm", 3, 0.49, "[]", 0, "stays stm: importance 0.49 < 0.5"),
    ("ltm", 10, 0.95, '["critical"]', 0, "stays episodic: access 10 is not > 10"),
    ("ltm", 25, 0.8, '["critical"]', 0, "stays episodic: importance 0.8 is not > 0.8"),
    ("ltm", 25, 0.9, "[]", 1, "stays episodic: 1 inbound link < 2 and no critical/permanent tag"),
)


def _plant_promotion_boundaries(plan: _Plan, groups: _Groups) -> None:
    rows, ns = groups.rows[:, 0], groups.ns
    _single_content(plan, groups, SINGLES["promotable"])
    case = np.arange(len(rows)) % len(BOUNDARY_CASES)
    for c, (tier, access, importance, tags, links, _) in enumerate(BOUNDARY_CASES):
        pick = rows[case == c]
        plan.tier[pick] = TIERS[tier]
        plan.age[pick] = (
            plan.uniform(0.3, 6, len(pick)) if tier == "stm" else plan.uniform(20, 120, len(pick))
        )
        plan.importance[pick] = importance
        plan.tags[pick] = tags
        plan.accessed(pick, np.full(len(pick), access), recent_within=5.0)
        with_bg = pick[plan.bg_range[ns[case == c], 1] > plan.bg_range[ns[case == c], 0]]
        if links and len(with_bg):
            _inbound_links(plan, with_bg, plan.ns[with_bg], links)
    for g, row in enumerate(rows):
        plan.add_truth(
            "promotion_boundary",
            ns[g],
            [row],
            "no promotion: " + BOUNDARY_CASES[case[g]][5],
            f"tier={BOUNDARY_CASES[case[g]][0]}; access={plan.access[row]}; "
            f"importance={plan.importance[row]:.2f}",
        )


def _plant_missing_embeddings(plan: _Plan, groups: _Groups) -> None:
    rows = groups.rows[:, 0]
    _single_content(plan, groups, SINGLES["no_vector"])
    plan.has_vector[rows] = False
    plan.age[rows] = plan.uniform(1, 60, len(rows))
    for g, row in enumerate(rows):
        plan.add_truth(
            "missing_embedding",
            groups.ns[g],
            [row],
            "skipped by every similarity analysis (no vector); decays like any row",
            "embedding=null",
        )


# -- the kinds and their share of the corpus ---------------------------------------------------------------


@dataclass(frozen=True)
class _KindSpec:
    name: str
    fraction: float  # of n rows
    sizes: tuple[int, int]  # members per group, inclusive
    plant: Callable[[_Plan, _Groups], None]
    cross_namespace: bool = False


KIND_SPECS = (
    _KindSpec("exact_duplicate", 0.015, (2, 4), _plant_exact_duplicates),
    _KindSpec("near_duplicate", 0.015, (2, 4), _plant_near_duplicates),
    _KindSpec("merge_cluster", 0.03, (2, 6), _plant_merge_clusters),
    _KindSpec("pinned_cluster_member", 0.002, (3, 3), _plant_pinned_cluster_members),
    _KindSpec("chain", 0.006, (3, 3), _plant_chains),
    _KindSpec("contradiction", 0.015, (2, 2), _plant_contradictions),
    _KindSpec("structural_contradiction", 0.005, (2, 2), _plant_structural_contradictions),
    _KindSpec("contradiction_control", 0.004, (2, 2), _plant_contradiction_controls),
    _KindSpec("stale", 0.02, (1, 1), _plant_stale),
    _KindSpec("deprecated", 0.005, (1, 1), _plant_deprecated),
    _KindSpec("archived", 0.01, (1, 1), _plant_archived),
    _KindSpec("purge_queue", 0.005, (1, 1), _plant_purge_queue),
    _KindSpec("pinned", 0.005, (1, 1), _plant_pinned),
    _KindSpec("block", 0.003, (1, 1), _plant_blocks),
    _KindSpec("semantic_pattern", 0.015, (3, 6), _plant_semantic_patterns),
    _KindSpec("single_conversation_pattern", 0.006, (3, 4), _plant_single_conversation_patterns),
    _KindSpec("compression_cluster", 0.006, (3, 5), _plant_compression_clusters),
    _KindSpec("promotable_stm", 0.015, (1, 1), _plant_promotable),
    _KindSpec("semantic_promotion", 0.005, (1, 1), _plant_semantic_promotion),
    _KindSpec("promotion_boundary", 0.003, (1, 1), _plant_promotion_boundaries),
    _KindSpec("cross_namespace_twin", 0.006, (2, 2), _plant_twins, cross_namespace=True),
    _KindSpec("cue_boost", 0.006, (2, 2), _plant_cue_pairs),
    _KindSpec("association", 0.008, (2, 2), _plant_associations),
    _KindSpec("superseded", 0.003, (2, 2), _plant_superseded),
    _KindSpec("missing_embedding", 0.001, (1, 1), _plant_missing_embeddings),
    _KindSpec("embedding_excluded", 0.002, (2, 2), _plant_embedding_excluded),
)
# ~0.216 of the rows are planted (a little more at small n, where every kind gets at least one group).
PLANTED_FRACTION = sum(spec.fraction for spec in KIND_SPECS)
ROW_KINDS = tuple(spec.name for spec in KIND_SPECS)
TRUTH_LINK_KINDS = ("temporal_missing", "temporal_boost", "temporal_prune", "dangling_link", "duplicate_link")


# -- layout: namespaces, groups, background ----------------------------------------------------------------


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Integer shares of `total` proportional to `weights` (largest remainder)."""
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(np.int64)
    remainder = total - counts.sum()
    counts[np.argsort(counts - exact, kind="stable")[:remainder]] += 1
    return counts


def _namespaces(n: int, namespaces: int | None, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Names and row counts: the four core namespaces, plus small tenants for large corpora."""
    count = namespaces if namespaces is not None else 4 + max(0, (n - 20_000) // TENANT_TARGET_ROWS)
    if count < 1:
        raise ValueError(f"namespaces must be at least 1, got {count}")
    core = min(count, len(CORE_NAMESPACES))
    names = list(CORE_NAMESPACES[:core]) + [f"tenant:{i:04d}" for i in range(1, count - core + 1)]
    weights = np.asarray(CORE_WEIGHTS[:core], np.float64)
    if count > core:
        core_share = 0.5 if n <= 20_000 else (20_000 + 0.1 * (n - 20_000)) / n
        tenants = rng.lognormal(0.0, 0.5, count - core)
        weights = np.concatenate(
            [weights / weights.sum() * core_share, tenants / tenants.sum() * (1 - core_share)]
        )
    return names, _apportion(n, weights)


def _layout(plan: _Plan, sizes: np.ndarray) -> list[tuple[_KindSpec, _Groups]]:
    """Decide every planted group (kind, size, namespace) and the plan rows it occupies."""
    rng, n, k = plan.rng, plan.n, len(sizes)
    p = sizes / sizes.sum()
    specs, counts, group_ns, group_ns2 = [], [], [], []
    for spec in KIND_SPECS:
        lo, hi = spec.sizes
        groups = 0 if spec.cross_namespace and k < 2 else max(1, round(n * spec.fraction / ((lo + hi) / 2)))
        ns = rng.choice(k, groups, p=p)
        ns2 = (ns + rng.integers(1, k, groups)) % k if spec.cross_namespace and groups else ns
        specs.append(spec)
        counts.append(rng.integers(lo, hi + 1, groups))
        group_ns.append(ns)
        group_ns2.append(ns2)
    layout, row, g0 = [], 0, 0
    for spec, size, ns, ns2 in zip(specs, counts, group_ns, group_ns2, strict=True):
        width = spec.sizes[1]
        rows = np.full((len(size), width), -1, np.int64)
        for s in range(width):
            present = size > s
            rows[present, s] = row + np.cumsum(present)[present] - 1
            row += int(present.sum())
            plan.ns[rows[present, s]] = ns2[present] if s == 1 else ns[present]
        ordinal = g0 + np.arange(len(size))
        layout.append((spec, _Groups(rows, size, ns, ns2, ordinal, FIRST_NUMBER + ordinal)))
        g0 += len(size)
    plan.next_number = FIRST_NUMBER + g0
    if row > n:
        raise ValueError(f"n={n} is too small for the planted structures ({row} rows); use n >= {MIN_ROWS}")
    return layout


def _background_counts(plan: _Plan, planted_rows: int, sizes: np.ndarray) -> np.ndarray:
    planted = np.bincount(plan.ns[:planted_rows], minlength=len(sizes))
    counts = np.maximum(sizes - planted, 0)
    counts[np.argmax(counts)] += plan.n - planted_rows - counts.sum()  # exactly n rows in total
    return counts


def _plant_background(plan: _Plan, start: int, counts: np.ndarray) -> None:
    """Conversation events (and a few reflections) filling each namespace up to its size."""
    rng, total = plan.rng, int(counts.sum())
    rows = np.arange(start, start + total)
    ns = np.repeat(np.arange(len(counts)), counts)
    bounds = np.concatenate([[0], np.cumsum(counts)]) + start
    plan.bg_range[:, 0], plan.bg_range[:, 1] = bounds[:-1], bounds[1:]
    plan.ns[rows] = ns
    # Conversations: runs of ~6 consecutive rows of one namespace, a few minutes apart.
    opens = (rng.random(total) < 1 / 6) | np.concatenate([[True], ns[1:] != ns[:-1]])
    conv_local = np.cumsum(opens) - 1
    first = np.flatnonzero(opens)
    position = np.arange(total) - first[conv_local]
    conv_size = np.diff(np.append(first, total))
    step = rng.uniform(2, 20, len(first)) / 1440.0
    conv_age = 0.05 + (HISTORY_DAYS - 2) * rng.random(len(first)) ** 1.3 + conv_size * step
    plan.age[rows] = conv_age[conv_local] - position * step[conv_local]
    kind = rng.choice(3, total, p=(0.85, 0.12, 0.03))
    plan.kind[rows] = np.asarray([KINDS["episodic"], KINDS["semantic"], KINDS["summary"]], np.int8)[kind]
    episodic = kind == 0
    plan.conv[rows] = np.where(episodic, plan.new_conversations(len(first))[conv_local], -1)
    plan.source[rows] = np.where(episodic, SOURCES.index("chat"), SOURCES.index("reflection"))
    stm = episodic & (plan.age[rows] < 7) & (rng.random(total) < 0.9)
    plan.tier[rows] = np.where(stm, TIERS["stm"], TIERS["ltm"])
    # STM rows stay below the promotion thresholds, LTM rows below the semantic ones: only planted rows cross.
    access = np.where(stm, rng.integers(0, 3, total), np.minimum(rng.geometric(0.3, total) - 1, 40))
    plan.importance[rows] = np.round(np.clip(rng.beta(2.2, 2.8, total), 0.05, 0.8), 2)
    plan.accessed(rows, access)
    plan.tags[rows] = np.asarray(BACKGROUND_TAGS, dtype=object)[
        rng.choice(len(BACKGROUND_TAGS), total, p=BACKGROUND_TAG_P)
    ]
    _background_content(plan, rows, ns, episodic)
    _background_stale_marks(plan, rows[~stm])


def _background_content(plan: _Plan, rows: np.ndarray, ns: np.ndarray, episodic: np.ndarray) -> None:
    rng, total = plan.rng, len(rows)
    templates = np.empty(total, dtype=object)
    flavor = np.asarray(plan.flavors, dtype=object)[ns]
    for name, groups in FLAVOR_BACKGROUND.items():
        pool = np.asarray([t for g in groups for t in BACKGROUND[g]], dtype=object)
        mask = (flavor == name) & episodic
        templates[mask] = pool[rng.integers(0, len(pool), int(mask.sum()))]
    reflections = np.asarray(BACKGROUND["reflection"], dtype=object)
    templates[~episodic] = reflections[rng.integers(0, len(reflections), int((~episodic).sum()))]
    words = {
        "P": [f"{f} {lst}" for f in FIRST for lst in LAST],
        "X": PROJECTS,
        "S": SERVICES,
        "T": TEAMS,
        "D": DATES,
        "W": WEEKDAYS,
        "C": CITIES,
        "K": RESEARCH_TOPICS,
    }
    slots = {
        key: np.asarray(pool, dtype=object)[rng.integers(0, len(pool), total)] for key, pool in words.items()
    }
    # Numbers continue after the planted groups': every background sentence is unique.
    slots["N"] = (plan.next_number + rows - rows[0]).astype(str)
    plan.content[rows] = _render(templates, slots)
    coder = np.isin(flavor, ("coder", "tenant"))
    plan.project[rows[coder]] = ["proj-" + x.lower() for x in slots["X"][coder]]


def _background_stale_marks(plan: _Plan, rows: np.ndarray) -> None:
    """Stale marks the previous nightly runs wrote: importance x 0.5^(days since last touch / 14) < 0.3."""
    touch = np.where(np.isnan(plan.last_age[rows]), plan.age[rows], plan.last_age[rows])
    importance = plan.importance[rows]
    crossing = 14.0 * np.log2(np.maximum(importance, 0.3) / 0.3)  # days after the touch the score reaches 0.3
    crossed_age = touch - crossing
    marked = crossed_age >= LAST_RUN_AGE
    run_age = LAST_RUN_AGE + np.floor(crossed_age - LAST_RUN_AGE)  # the first nightly run after the crossing
    score = importance * 0.5 ** ((touch - run_age) / 14.0)
    picked = rows[marked]
    _mark_stale(plan, picked, np.minimum(score[marked], 0.2999))
    plan.updated_age[picked] = run_age[marked]


def _planted_defaults(plan: _Plan, planted_rows: int) -> None:
    """Every planted row starts as an LTM episodic memory of its own conversation; planters override."""
    rows = np.arange(planted_rows)
    plan.conv[rows] = plan.new_conversations(planted_rows)
    plan.age[rows] = plan.uniform(5, 150, planted_rows)


# -- links -------------------------------------------------------------------------------------------------


def _conversation_runs(plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """Rows of multi-row conversations ordered by (conversation, creation), and each run's start offset."""
    rows = np.flatnonzero(plan.conv >= 0)
    rows = rows[np.lexsort((-plan.age[rows], plan.conv[rows]))]
    conv = plan.conv[rows]
    starts = np.flatnonzero(np.concatenate([[True], conv[1:] != conv[:-1]]))
    sizes = np.diff(np.append(starts, len(rows)))
    keep = np.repeat(sizes >= 2, sizes)
    rows, conv = rows[keep], conv[keep]
    starts = np.flatnonzero(np.concatenate([[True], conv[1:] != conv[:-1]]))
    return rows, starts


def _plant_temporal_links(plan: _Plan) -> None:
    """Forward (and weaker backward) edges for a quarter of the conversations; the rest lack them."""
    rng = plan.rng
    rows, starts = _conversation_runs(plan)
    if len(rows) == 0:
        return
    run = np.cumsum(np.isin(np.arange(len(rows)), starts)) - 1
    linked_run = rng.random(len(starts)) < 0.25
    ends = np.append(starts[1:], len(rows))
    for i in np.flatnonzero(~linked_run):
        members = rows[starts[i] : ends[i]]
        plan.add_truth(
            "temporal_missing",
            int(plan.ns[members[0]]),
            members,
            "forward temporal edges ids[i] -> ids[i+1] built (historical corpus)",
            f"conversation_edges={len(members) - 1}",
        )
    pair = np.flatnonzero((run[:-1] == run[1:]) & linked_run[run[:-1]])
    src, dst = rows[pair], rows[pair + 1]
    count = len(src)
    weight = rng.uniform(0.2, 1.0, count)
    created = plan.age[dst]
    updated = np.minimum(created, LAST_RUN_AGE)  # the last decay cycle touched every existing edge
    roll = rng.random(count)
    prune = roll < 0.03
    boost = (roll >= 0.03) & (roll < 0.06)
    weight[prune] = 0.051  # x 0.95 = 0.048 < 0.05: pruned
    traversed = np.full(count, np.nan)
    traversed[boost] = updated[boost] * rng.uniform(0.05, 0.95, int(boost.sum()))
    before = (roll >= 0.06) & (roll < 0.3)
    traversed[before] = created[before] - (created[before] - updated[before]) * rng.random(int(before.sum()))
    plan.add_links(src, dst, "temporal", weight, "encoder", created, traversed, updated)
    back_weight = np.where(prune, 0.4, 0.5 * weight)  # backward edges of pruned pairs survive
    plan.add_links(dst, src, "temporal", back_weight, "encoder", created, None, updated)
    for i in np.flatnonzero(prune):
        plan.add_truth(
            "temporal_prune",
            int(plan.ns[src[i]]),
            [src[i], dst[i]],
            "temporal edge pruned (weight x 0.95 < 0.05)",
            f"weight={weight[i]:.3f}",
        )
    for i in np.flatnonzero(boost):
        plan.add_truth(
            "temporal_boost",
            int(plan.ns[src[i]]),
            [src[i], dst[i]],
            "temporal edge weight x 0.95 x 1.2 (traversed since the last cycle)",
            f"weight={weight[i]:.4f}; expected_weight={weight[i] * 0.95 * 1.2:.4f}",
        )


def _plant_link_garbage(plan: _Plan) -> None:
    """Dangling links (an endpoint id that no memory has) and exact duplicate link rows, for gc."""
    rng, n = plan.rng, plan.n
    count = max(2, n // 5_000)
    real = rng.integers(0, n, count)
    ghosts = n + np.arange(count)
    plan.extra_ids = count
    missing_dst = np.arange(count) % 2 == 0
    src = np.where(missing_dst, real, ghosts)
    dst = np.where(missing_dst, ghosts, real)
    created = plan.age[real] * rng.uniform(0.1, 0.9, count)
    plan.add_links(src, dst, "associated", rng.uniform(0.7, 0.9, count), "association", created)
    for i in range(count):
        plan.add_truth(
            "dangling_link",
            int(plan.ns[real[i]]),
            [src[i], dst[i]],
            "gc removes the link (an endpoint does not exist)",
            f"missing={'dst' if missing_dst[i] else 'src'}",
        )
    existing = [batch for batch in plan.links if batch["kind"][0] in ("temporal", "associated")]
    if not existing:
        return
    pool = max(existing, key=lambda batch: len(batch["src"]))
    copies = rng.choice(len(pool["src"]), min(len(pool["src"]), max(1, n // 20_000)), replace=False)
    plan.links.append({key: value[copies] for key, value in pool.items()})
    for i in copies:
        plan.add_truth(
            "duplicate_link",
            int(plan.ns[pool["src"][i]]),
            [pool["src"][i], pool["dst"][i]],
            "gc keeps one of the identical links",
            f"kind={pool['kind'][i]}",
        )


# -- vectors -----------------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _noise(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Random directions, cheaply: random bytes as coordinates. Any i.i.d. coordinates give near-orthogonal
    directions in hundreds of dimensions (the bytes' mean of -0.5 against a spread of 74 adds a shared
    component worth ~5e-5 of cosine), and bytes cost a fifth of normal deviates at 1M x 384."""
    return np.frombuffer(rng.bytes(shape[0] * shape[1]), np.int8).reshape(shape).astype(np.float32)


def _topic_centroids(rng: np.random.Generator, namespaces: int, dim: int) -> np.ndarray:
    """(namespaces, topics, dim): topics of one namespace share a direction (cross-topic cosine ~0.3)."""
    base = _unit(rng.standard_normal((namespaces, dim)))
    own = rng.standard_normal((namespaces, TOPICS_PER_NAMESPACE, dim))
    own /= np.linalg.norm(own, axis=2, keepdims=True)
    topics = np.sqrt(TOPIC_SHARE) * base[:, None, :] + np.sqrt(1 - TOPIC_SHARE) * own
    return (topics / np.linalg.norm(topics, axis=2, keepdims=True)).astype(np.float32)


def _topic_mixture(
    rng: np.random.Generator, centroids: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """alpha * topic + beta * u, u the noise made orthogonal to the topic and unit (beta = sqrt(1 - alpha^2)).

    Orthogonal noise keeps same-topic cosines at alpha_1 * alpha_2 +- 0.04, with no tail towards 0.70. Closed
    form, to touch the big array few times: with p = noise . topic and r = sqrt(|noise|^2 - p^2), the vector
    is (alpha - beta * p / r) * topic + (beta / r) * noise.
    """
    noise = _noise(rng, centroids.shape)
    p = np.einsum("ij,ij->i", noise, centroids)
    r = np.sqrt(np.einsum("ij,ij->i", noise, noise) - p * p)
    alpha = rng.uniform(*TOPIC_ALPHA, len(centroids)).astype(np.float32)
    beta = np.sqrt(1 - alpha * alpha)
    out = np.multiply(centroids, (alpha - beta * p / r)[:, None], out=out)
    noise *= (beta / r)[:, None]
    out += noise
    out /= np.sqrt(np.einsum("ij,ij->i", out, out))[:, None]
    return out


def _vector_buffer(rows: int, dim: int) -> np.ndarray:
    """The (rows, dim) float32 matrix in an anonymous mapping advised to use huge pages where the OS allows.

    Writing 1.5 GB of fresh memory is dominated by first-touch page faults on small VMs: measured here, 5.1 s
    with numpy's allocation against 1.3 s with huge pages.
    """
    size = max(rows * dim, 1) * 4
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty((rows, dim), np.float32)
    buffer = mmap.mmap(-1, size)
    with contextlib.suppress(OSError):  # only advice: ordinary pages work the same, slower
        buffer.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(buffer, np.float32, count=rows * dim).reshape(rows, dim)


def _embed(plan: _Plan, order: np.ndarray, position: np.ndarray, dim: int) -> np.ndarray:
    """Vectors in final row order: topic mixtures, then planted members at exact cosines to their heads."""
    rng = plan.rng
    topics = _topic_centroids(rng, len(plan.ns_names), dim)
    emb = _vector_buffer(plan.n, dim)
    for start in range(0, plan.n, _CHUNK):
        rows = order[start : start + _CHUNK]
        _topic_mixture(rng, topics[plan.ns[rows], plan.topic[rows]], out=emb[start : start + len(rows)])
    for spec in plan.vector_groups:
        for g0 in range(0, len(spec.head), _CHUNK // 4):
            part = slice(g0, g0 + _CHUNK // 4)
            _place_members(
                rng, emb, position, topics, spec.head[part], spec.members[part], spec.cos[part], spec.ns[part]
            )
    emb[position[~plan.has_vector]] = 0.0
    return emb


def _place_members(
    rng: np.random.Generator,
    emb: np.ndarray,
    position: np.ndarray,
    topics: np.ndarray,
    head: np.ndarray,
    members: np.ndarray,
    cos: np.ndarray,
    ns: np.ndarray,
) -> None:
    """member = c * head + sqrt(1 - c^2) * w, the w orthonormal to the head and each other (Gram-Schmidt)."""
    latent = head < 0
    heads = np.empty((len(head), emb.shape[1]), np.float64)
    heads[~latent] = emb[position[head[~latent]]]
    if latent.any():
        t = rng.integers(0, TOPICS_PER_NAMESPACE, int(latent.sum()))
        heads[latent] = _topic_mixture(rng, topics[ns[latent], t])
    basis = [heads]
    for s in range(members.shape[1]):
        w = _noise(rng, heads.shape).astype(np.float64)
        for b in basis:
            w -= np.einsum("ij,ij->i", w, b)[:, None] * b
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        basis.append(w)
        present = members[:, s] >= 0
        c = np.nan_to_num(cos[:, s], nan=1.0)[:, None]
        vectors = c * heads + np.sqrt(np.maximum(1.0 - c * c, 0.0)) * w
        emb[position[members[present, s]]] = vectors[present].astype(np.float32)


# -- assembling the tables ---------------------------------------------------------------------------------


def _uuids(rng: np.random.Generator, count: int) -> pa.Array:
    """Random version-4 UUID strings, unique (redrawn in the astronomically unlikely case of a clash)."""
    while True:
        raw = rng.integers(0, 256, (count, 16), dtype=np.uint8)
        raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
        raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
        if len(np.unique(raw.view(np.dtype((np.void, 16))).ravel())) == count:
            break
    chars = np.empty((count, 32), np.uint8)
    chars[:, 0::2], chars[:, 1::2] = _HEX[raw >> 4], _HEX[raw & 0x0F]
    dashed = np.full((count, 36), ord("-"), np.uint8)
    for lo, hi, at in ((0, 8, 0), (8, 12, 9), (12, 16, 14), (16, 20, 19), (20, 32, 24)):
        dashed[:, at : at + hi - lo] = chars[:, lo:hi]
    return pa.array(dashed.view("S36").ravel(), pa.binary(36)).cast(pa.string())


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _hex8(values: np.ndarray) -> pa.Array:
    """uint32 values as 8 lower-case hex digits, without a Python loop."""
    chars = _HEX[
        (values.astype(np.uint64)[:, None] >> np.arange(28, -4, -4, dtype=np.uint64)) & np.uint64(15)
    ]
    return pa.array(np.ascontiguousarray(chars).view("S8").ravel(), pa.binary(8)).cast(pa.string())


@dataclass
class _Ids:
    """Ids of plan rows: memories' ids in final row order, then ids that only dangling links point to."""

    strings: pa.Array
    position: np.ndarray  # plan row -> final row
    n: int

    def of(self, rows: np.ndarray | Sequence[int], mask: np.ndarray | None = None) -> pa.Array:
        rows = np.asarray(rows, np.int64)
        index = np.where(rows < self.n, self.position[np.clip(rows, 0, self.n - 1)], rows)
        return self.strings.take(pa.array(index, mask=mask))


def _micros(anchor_us: int, age: np.ndarray) -> np.ndarray:
    return anchor_us - np.round(np.maximum(age, 1.0 / 86_400) * DAY_US).astype(np.int64)


def _timestamps(anchor_us: int, age: np.ndarray) -> pa.Array:
    """Ages (days before the as-of instant) as UTC timestamps; NaN is null."""
    missing = np.isnan(age)
    return pa.array(_micros(anchor_us, np.nan_to_num(age)), type=records.TIMESTAMP, mask=missing)


def _metadata(plan: _Plan, order: np.ndarray) -> pa.Array:
    """The metadata JSON text of every row (conversation, project, source, markers), joined in Arrow."""
    salt = np.uint64(plan.rng.integers(0, 2**32))
    conv = plan.conv[order]
    # Odd multiplier modulo 2^32: a bijection, so conversation ids stay distinct while looking random.
    hashed = (conv.astype(np.uint64) * np.uint64(2_654_435_761) + salt) % np.uint64(2**32)
    conv_part = pc.binary_join_element_wise('"conversation_id": "conv-', _hex8(hashed), '"', "")
    conv_part = pc.if_else(pa.array(conv >= 0), conv_part, pa.scalar(None, pa.string()))
    project = pa.array(plan.project[order], pa.string())
    project_part = pc.binary_join_element_wise('"project_id": "', project, '"', "")
    source_part = pa.array([f'"source": "{s}"' for s in SOURCES]).take(pa.array(plan.source[order]))
    extra = pa.array(plan.extra[order], pa.string())
    inner = pc.binary_join_element_wise(
        conv_part, project_part, source_part, extra, ", ", null_handling="skip"
    )
    return pc.binary_join_element_wise("{", inner, "}", "")


def _finish_times(plan: _Plan) -> None:
    """Make the timestamp invariants hold: created <= updated, zone_since, last access <= as-of."""
    plan.age = np.minimum(plan.age, HISTORY_DAYS - 0.01)
    plan.updated_age = np.where(np.isnan(plan.updated_age), plan.age, np.minimum(plan.updated_age, plan.age))
    last = np.where(np.isnan(plan.last_age), 0.5 * plan.age, np.minimum(plan.last_age, plan.age))
    plan.last_age = np.where(plan.access > 0, last, np.nan)
    plan.zone_age = np.minimum(plan.zone_age, plan.age)


def _categorical(values: Sequence[str], codes: np.ndarray) -> pa.Array:
    return pa.array(list(values), pa.string()).take(pa.array(codes))


def _memory_table(plan: _Plan, order: np.ndarray, ids: _Ids, emb: np.ndarray, anchor_us: int) -> pa.Table:
    dim = emb.shape[1]
    content = plan.content[order]
    has_vector = plan.has_vector[order]
    superseded = plan.superseded_row[order]
    score = plan.score[order]
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array(emb.reshape(-1)), type=pa.list_(pa.float32(), dim), mask=pa.array(~has_vector)
    )
    sha = [content_sha(c) for c in content]  # the hash the embedding step compares against
    columns = {
        "id": ids.strings.slice(0, plan.n),
        "namespace": _categorical(plan.ns_names, plan.ns[order]),
        "tier": _categorical(records.TIERS, plan.tier[order]),
        "kind": _categorical(records.KINDS, plan.kind[order]),
        "content": pa.array(content, pa.string()),
        "embedding": vectors,
        "embedding_model": _categorical([f"demo-synthetic-{dim}"], np.zeros(plan.n, np.int8)),
        "embedded_content_sha": pa.array(sha, pa.string()),
        "importance": pa.array(plan.importance[order]),
        "score": pa.array(score, mask=np.isnan(score)),
        "access_count": pa.array(plan.access[order]),
        "last_accessed_at": _timestamps(anchor_us, plan.last_age[order]),
        "created_at": _timestamps(anchor_us, plan.age[order]),
        "updated_at": _timestamps(anchor_us, plan.updated_age[order]),
        "version": pa.array(plan.version[order]),
        "pinned": pa.array(plan.pinned[order]),
        "zone": _categorical(records.ZONES, plan.zone[order]),
        "zone_since": _timestamps(anchor_us, plan.zone_age[order]),
        "superseded_by": ids.of(np.maximum(superseded, 0), mask=superseded < 0),
        "stale": pa.array(plan.stale[order]),
        "tags": pa.array(plan.tags[order], pa.string()),
        "metadata": _metadata(plan, order),
    }
    # A row without a vector has no model and no embedded-content hash either.
    no_vector = pa.array(~has_vector)
    for name in ("embedding_model", "embedded_content_sha"):
        columns[name] = pc.if_else(no_vector, pa.scalar(None, pa.string()), columns[name])
    return pa.Table.from_pydict(columns, schema=records.memory_schema(dim))


def _link_table(plan: _Plan, ids: _Ids, anchor_us: int) -> pa.Table:
    if not plan.links:
        return records.LINK_SCHEMA.empty_table()
    merged = {key: np.concatenate([batch[key] for batch in plan.links]) for key in plan.links[0]}
    src, dst = merged["src"], merged["dst"]
    owner = np.where(src < plan.n, src, dst)
    columns = {
        "namespace": _categorical(plan.ns_names, plan.ns[owner]),
        "src_id": ids.of(src),
        "dst_id": ids.of(dst),
        "kind": pa.array(merged["kind"], pa.string()),
        "weight": pa.array(np.round(merged["weight"], 6)),
        "origin": pa.array(merged["origin"], pa.string()),
        "created_at": _timestamps(anchor_us, merged["created_age"]),
        "updated_at": _timestamps(anchor_us, np.minimum(merged["updated_age"], merged["created_age"])),
        "traversed_at": _timestamps(anchor_us, merged["traversed_age"]),
    }
    return pa.Table.from_pydict(columns, schema=records.LINK_SCHEMA)


def _truth_table(plan: _Plan, ids: _Ids) -> pa.Table:
    flat = np.fromiter((r for entry in plan.truth for r in entry[2]), np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(entry[2]) for entry in plan.truth])]).astype(np.int32)
    id_lists = pa.ListArray.from_arrays(pa.array(offsets), ids.of(flat))
    return pa.Table.from_arrays(
        [
            pa.array([e[0] for e in plan.truth], pa.string()),
            pa.array([e[1] for e in plan.truth], pa.string()),
            id_lists,
            pa.array([e[3] for e in plan.truth], pa.string()),
            pa.array([e[4] for e in plan.truth], pa.string()),
        ],
        schema=TRUTH_SCHEMA,
    )


# -- the public API ----------------------------------------------------------------------------------------


def generate(
    n: int = 2_000,
    *,
    seed: int = 7,
    as_of: dt.date = DEFAULT_AS_OF,
    dim: int = 384,
    namespaces: int | None = None,
) -> DemoCorpus:
    """A deterministic corpus of exactly `n` memories with planted, known structures (see module doc)."""
    if n < MIN_ROWS:
        raise ValueError(f"n must be at least {MIN_ROWS} (the planted structures need room), got {n}")
    if dim < 16:
        raise ValueError(f"dim must be at least 16 to place orthogonal group members, got {dim}")
    rng = np.random.default_rng(seed)
    ns_names, sizes = _namespaces(n, namespaces, rng)
    plan = _Plan(n, rng, end_of_day(as_of), ns_names)
    layout = _layout(plan, sizes)
    planted_rows = int(max((groups.rows.max(initial=-1) for _, groups in layout), default=-1)) + 1
    _planted_defaults(plan, planted_rows)
    _plant_background(plan, planted_rows, _background_counts(plan, planted_rows, sizes))
    plan.topic[:] = rng.integers(0, TOPICS_PER_NAMESPACE, n)
    for spec, groups in layout:
        if len(groups):
            spec.plant(plan, groups)
    _finish_times(plan)
    _plant_temporal_links(plan)
    _plant_link_garbage(plan)
    # Final row order is creation order, as a live store lists its rows.
    order = np.lexsort((np.arange(n), -plan.age))
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    ids = _Ids(_uuids(rng, n + plan.extra_ids), position, n)
    emb = _embed(plan, order, position, dim)
    anchor_us = (plan.anchor - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    return DemoCorpus(
        memories=_memory_table(plan, order, ids, emb, anchor_us),
        links=_link_table(plan, ids, anchor_us),
        truth=_truth_table(plan, ids),
    )


def write_jsonl(corpus: DemoCorpus, path: Path) -> int:
    """Write the memories in the import format (one JSON object per line); returns the number of lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for batch in corpus.memories.to_batches(max_chunksize=JSONL_BATCH_ROWS):
            written += _write_batch(out, batch)
    return written


JSONL_BATCH_ROWS = 4_096


def _vector_texts(vectors: pa.FixedSizeListArray) -> list[str | None]:
    """Each vector as JSON array text. Nine significant digits round-trip a float32 exactly, and formatting
    them is ~3x faster than `json.dumps` of the float64 values (which spells out 17 digits)."""
    dim = vectors.type.list_size
    # `values` ignores the slice offset of a batch: cut this batch's part out explicitly.
    flat = vectors.values.slice(vectors.offset * dim, len(vectors) * dim)
    matrix = flat.to_numpy(zero_copy_only=False).reshape(len(vectors), dim)
    valid = np.asarray(vectors.is_valid())
    return [
        "[" + ",".join(map("{:.9g}".format, row.tolist())) + "]" if ok else None
        for row, ok in zip(matrix, valid, strict=True)
    ]


def _write_batch(out: TextIO, batch: pa.RecordBatch) -> int:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names if name != "embedding"}
    vectors = _vector_texts(batch.column("embedding"))
    for i in range(batch.num_rows):
        metadata = json.loads(columns["metadata"][i])
        before = {
            "id": columns["id"][i],
            "namespace": columns["namespace"][i],
            "tier": columns["tier"][i],
            "kind": columns["kind"][i],
            "content": columns["content"][i],
            "created_at": format_timestamp(columns["created_at"][i]),
            "last_accessed_at": format_timestamp(columns["last_accessed_at"][i]),
            "importance": columns["importance"][i],
            "access_count": columns["access_count"][i],
            "tags": json.loads(columns["tags"][i]),
            "pinned": columns["pinned"][i],
            "metadata": metadata,
        }
        after = {"embedding_model": columns["embedding_model"][i]}
        after.update({key: metadata[key] for key in ("conversation_id", "project_id") if key in metadata})
        # The embedding text is spliced in between: keys keep the documented order.
        head = json.dumps(before, ensure_ascii=False)[:-1]
        tail = json.dumps(after, ensure_ascii=False)[1:]
        out.write(f'{head}, "embedding": {vectors[i] or "null"}, {tail}\n')
    return batch.num_rows

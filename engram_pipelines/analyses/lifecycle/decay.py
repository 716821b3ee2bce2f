"""Decay scores (seeds 000, 001, 004), computed in bulk by DuckDB over the snapshot.

Three policies, chosen per namespace and per kind:
- `engram` (default): cue and access boosts times a recency half-life from the last access;
- `halflife`: importance x 0.5^(age_hours / half_life_hours), age from creation;
- `ebbinghaus`: max(S e^(-lambda t) x repetition bonus, S x floor), per-kind half-lives, age from creation.
Pinned rows never score below the pinned floor; `block` rows live outside every decay cycle (no score).
The stale mark is metadata only (the row still recalls) and is lifted when the score recovers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.changes.intents import intents_from_sql
from engram_pipelines.config.model import Config, DecayConfig
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.parquet import write_parquet

# Policy, outcome and reason take a handful of values over millions of rows: dictionary-encoded, they are
# built from the query's small integer codes without a string per row (read back as strings by DuckDB).
_CODED = pa.dictionary(pa.uint8(), pa.string())

DECAY_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("policy", _CODED, nullable=False),
        pa.field("age_days", pa.float64()),
        pa.field("score", pa.float64()),
        pa.field("previous_score", pa.float64()),
        pa.field("stale_before", pa.bool_(), nullable=False),
        pa.field("stale_after", pa.bool_(), nullable=False),
        pa.field(
            "outcome", _CODED, nullable=False
        ),  # ok | stale | recovered | became_stale | pinned | exempt
        pa.field("review_interval_days", pa.float64()),
        # Per day, an upper bound on how fast the score falls while the row's inputs stay: score(t + d) >=
        # score(t) * exp(-decline_rate * d) for every d >= 0 (0: it does not fall; NULL for blocks). Retention
        # dates the next crossing of its score threshold from it (`retention_due.py`).
        pa.field("decline_rate", pa.float64()),
        pa.field("reasons", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    ]
)

_COLUMNS = [
    "id",
    "namespace",
    "kind",
    "content",
    "importance",
    "score",
    "access_count",
    "last_accessed_at",
    "created_at",
    "pinned",
    "stale",
    "tags",
]


def _f(value: float) -> str:
    """A DOUBLE literal: a bare 0.35 is a DECIMAL in DuckDB, and decimal arithmetic is ~10x slower."""
    return f"{float(value)!r}::DOUBLE"


def _has_any_tag(tags: list[str]) -> str:
    """SQL: the JSON tags array holds one of `tags` (a quoted element is a whole tag; no parsing needed)."""
    return (
        "(" + " OR ".join(f"contains(tags, {quoted(json.dumps(t))})" for t in tags) + ")" if tags else "FALSE"
    )


def _word_regex(words: list[str]) -> str:
    # Case-insensitive word starts: "error" matches "Errors" but not "terror"; RE2 syntax.
    return quoted("(?i)\\b(" + "|".join(re.escape(w) for w in words) + ")")


def _content_cue_sql(cfg: DecayConfig) -> str:
    """SQL: the content cue boost of a row (one regex per rule: the costly part of a score).

    One regex over every cue word first: most contents hold none and are spared the per-rule passes (each pass
    over the text costs about the same, ~2 s per 10M rows here, so three rules cost ~3x one gate)."""
    rules = cfg.engram.cues
    if not rules:
        return "0.0"
    per_rule = " + ".join(
        f"CASE WHEN regexp_matches(content, {_word_regex(rule.words)}) THEN {_f(rule.weight)} ELSE 0.0 END"
        for rule in rules
    )
    any_word = _word_regex([word for rule in rules for word in rule.words])
    return f"CASE WHEN regexp_matches(content, {any_word}) THEN {per_rule} ELSE 0.0 END"


def _cue_sql(cfg: DecayConfig, *, content_cue_column: bool = False) -> str:
    """SQL: the content cue and tag cue boosts of a row (computed once per row, in the base CTE). With
    `content_cue_column` the content part is read from a `content_cue` column (looked up in a CueCache)."""
    p = cfg.engram
    # Most rows have no tags: one short comparison spares them the per-tag searches (measured: 0.06 of 0.33 s).
    tag_cue = (
        f"CASE WHEN tags <> '[]' AND {_has_any_tag(p.cue_tags)} THEN {_f(p.cue_tag_weight)} ELSE 0.0 END"
    )
    return f"{'content_cue' if content_cue_column else _content_cue_sql(cfg)} + {tag_cue}"


def _engram_sql(cfg: DecayConfig) -> str:
    p = cfg.engram
    raw = (
        f"({_f(p.base)} + least({_f(p.access_boost_cap)}, {_f(p.access_boost_per_log2)} * log2(access_count + 1)) "
        f"+ cue_boost + CASE WHEN pinned THEN {_f(p.pin_boost)} ELSE 0.0 END)"
        f" * CASE WHEN pinned THEN 1.0 ELSE exp({_f(-math.log(2) / p.half_life_days)} * age_access_days) END"
    )
    return f"least(1.0, greatest(0.0, {raw}))"


def _halflife_sql(cfg: DecayConfig) -> str:
    return f"importance * pow(0.5, age_created_days * 24.0 / {_f(cfg.halflife.half_life_hours)})"


def _lambda(half_life: float) -> float:
    return math.log(2) / half_life if half_life > 0 and math.isfinite(half_life) else 0.0


def _ebbinghaus_lambda_sql(cfg: DecayConfig) -> str:
    p = cfg.ebbinghaus
    cases = " ".join(
        f"WHEN kind = {quoted(kind)} THEN {_f(_lambda(half_life))}"
        for kind, half_life in sorted(p.kind_half_life_days.items())
    )
    return f"(CASE {cases} ELSE {_f(_lambda(p.half_life_days))} END)"


def _ebbinghaus_sql(cfg: DecayConfig) -> str:
    p = cfg.ebbinghaus
    bonus = f"CASE WHEN access_count > 0 THEN 1.0 + log10(access_count + 1) * {_f(p.repetition_boost - 1)} ELSE 1.0 END"
    raw = f"greatest(importance * exp(-lam * age_created_days) * ({bonus}), importance * {_f(p.floor_multiplier)})"
    return f"least(1.0, {raw})"


# Policy and outcome leave the query as small integer codes into these lists, decoded in Arrow (see
# _assemble): DuckDB copying a string per row into its result was a third of the query.
_POLICIES = ["exempt", "engram", "halflife", "ebbinghaus"]
_OUTCOMES = ["exempt", "pinned", "ok", "stale", "recovered", "became_stale"]


def _policy_case(cfg: DecayConfig) -> tuple[str, str]:
    """SQL for (policy code, score) of a row, honouring per-kind policy overrides."""
    scores = {"engram": _engram_sql(cfg), "halflife": _halflife_sql(cfg), "ebbinghaus": _ebbinghaus_sql(cfg)}
    if not cfg.kind_policy:
        return str(_POLICIES.index(cfg.policy)), scores[cfg.policy]
    code_cases = " ".join(
        f"WHEN kind = {quoted(k)} THEN {_POLICIES.index(v)}" for k, v in sorted(cfg.kind_policy.items())
    )
    score_cases = " ".join(
        f"WHEN kind = {quoted(k)} THEN {scores[v]}" for k, v in sorted(cfg.kind_policy.items())
    )
    return (
        f"CASE {code_cases} ELSE {_POLICIES.index(cfg.policy)} END",
        f"CASE {score_cases} ELSE {scores[cfg.policy]} END",
    )


def _uses_engram(cfg: DecayConfig) -> bool:
    return "engram" in {cfg.policy, *cfg.kind_policy.values()}


def _decline_rate_sql(cfg: DecayConfig) -> str:
    """SQL: the decline rate of a scored row (DECAY_SCHEMA). Each policy is its decay factor exp(-rate * age)
    times terms that do not depend on time, then clamped to [0, 1] or raised to a floor; a clamp or a floor only
    slows the fall, so the factor's rate bounds it: an engram score's from the half-life (a pinned row's does not
    decay), a halflife score's from its hours, an ebbinghaus score's lambda (per kind)."""
    engram, halflife = _POLICIES.index("engram"), _POLICIES.index("halflife")
    return f"""CASE WHEN kind = 'block' THEN NULL
        WHEN policy_code = {engram} THEN CASE WHEN pinned THEN 0.0 ELSE {_f(math.log(2) / cfg.engram.half_life_days)} END
        WHEN policy_code = {halflife} THEN {_f(math.log(2) * 24.0 / cfg.halflife.half_life_hours)}
        ELSE lam END"""


def _group_sql(cfg: Config, source: str, as_of: dt.datetime, *, content_cue_column: bool = False) -> str:
    d = cfg.decay
    policy, score = _policy_case(d)
    floor = _f(d.engram.pinned_floor)
    threshold = _f(d.stale_threshold)
    review = _f(d.ebbinghaus.review_threshold)
    as_of_us = int(as_of.timestamp() * 1_000_000)
    engram = _POLICIES.index("engram")
    outcome = {name: code for code, name in enumerate(_OUTCOMES)}
    return f"""
    WITH base AS (
        SELECT *,
            greatest(0.0, ({as_of_us} - epoch_us(coalesce(last_accessed_at, created_at))) / 86400e6)
                AS age_access_days,
            greatest(0.0, ({as_of_us} - epoch_us(created_at)) / 86400e6) AS age_created_days,
            {_ebbinghaus_lambda_sql(d)} AS lam,
            -- A column, not an inline expression: the score is referenced several times downstream, and the
            -- regexes inlined there ran once per reference (measured: 2.3x the whole query at 2M rows).
            {_cue_sql(d, content_cue_column=content_cue_column) if _uses_engram(d) else "0.0"} AS cue_boost
        FROM {source}
    ),
    scored AS (
        SELECT *, {policy} AS policy_code,
            CASE WHEN kind = 'block' THEN NULL
                 WHEN pinned THEN greatest({floor}, {score})
                 ELSE {score} END AS final_score
        FROM base
    ),
    judged AS (
        SELECT *,
            CASE WHEN policy_code = {engram} THEN age_access_days ELSE age_created_days END AS age_days,
            (final_score IS NOT NULL AND NOT pinned AND final_score < {threshold}) AS stale_after,
            CASE WHEN kind = 'block' THEN {outcome["exempt"]}
                 WHEN pinned THEN {outcome["pinned"]}
                 WHEN final_score < {threshold} AND NOT stale THEN {outcome["became_stale"]}
                 WHEN final_score < {threshold} THEN {outcome["stale"]}
                 WHEN stale THEN {outcome["recovered"]}
                 ELSE {outcome["ok"]} END AS outcome_code
        FROM scored
    )
    SELECT pos,
        (CASE WHEN kind = 'block' THEN 0 ELSE policy_code END)::UTINYINT AS policy_code,
        age_days, final_score AS score, stale_after, outcome_code::UTINYINT AS outcome_code,
        CASE WHEN lam > 0 AND final_score > {review} THEN -ln({review} / final_score) / lam END
            AS review_interval_days,
        {_decline_rate_sql(d)} AS decline_rate
    FROM judged
    """


def _transition_reasons(found: pa.Table, cfg: Config) -> pa.Array:
    """The reasons of the rows whose stale mark changes (few a night), spelled out, in their order. Apart from
    the main query: a string column over every row, even a NULL one, cost half of that query at 10M rows."""
    policy_names = "[" + ", ".join(quoted(name) for name in _POLICIES) + "]"
    with duck() as con:
        con.register("transitions", found.append_column("ordinal", pa.array(np.arange(found.num_rows))))
        return (
            con.sql(
                f"""
                SELECT ({policy_names}[policy_code + 1]) || ' score ' || round(score, 4) || ' after '
                    || round(age_days, 1) || ' days'
                    || CASE WHEN stale_after THEN ' < stale threshold ' ELSE ' >= stale threshold ' END
                    || {cfg.decay.stale_threshold!r} AS reason
                FROM transitions ORDER BY ordinal
                """
            )
            .to_arrow_table()["reason"]
            .combine_chunks()
        )


def _constant_reasons(cfg: Config) -> pa.Array:
    """The reason of each outcome where nothing changes, indexed like _OUTCOMES (transitions: spelled out by
    _transition_reasons). Rendered by DuckDB like those, so a threshold like 1e-05 reads the same in both."""
    t = cfg.decay.stale_threshold
    ((ok, stale),) = duckdb.execute(f"SELECT 'score >= ' || {t!r}, 'score < ' || {t!r}").fetchall()
    return pa.array(["block", "pinned floor", ok, stale, "", ""])


def _coded(codes: pa.ChunkedArray, names: pa.Array) -> pa.ChunkedArray:
    """A dictionary column of `names` from a column of indices into them (no string per row)."""
    return pa.chunked_array(
        [pa.DictionaryArray.from_arrays(chunk, names) for chunk in codes.chunks],
        pa.dictionary(codes.type, pa.string()),
    )


_TRANSITIONS = [_OUTCOMES.index("recovered"), _OUTCOMES.index("became_stale")]


def _assemble(rows: pa.Table, found: pa.Table, cfg: Config) -> pa.Table:
    """DECAY_SCHEMA rows from the query's numbers and codes plus the input's own columns: id, namespace, kind,
    previous score and stale mark are the input's Arrow arrays, not copies made by DuckDB."""
    pos = found["pos"].to_numpy()
    if not np.array_equal(pos, np.arange(rows.num_rows)):
        # DuckDB keeps insertion order for this query (preserve_insertion_order); should it ever not, follow pos.
        rows = rows.take(pa.array(pos))
    # Reasons: each row indexes its outcome's constant reason or, on a transition, its own spelled-out one
    # appended after the constants.
    index = found["outcome_code"].to_numpy().astype(np.int32)
    constants = _constant_reasons(cfg)
    transition = np.isin(index, _TRANSITIONS)
    spelled = pa.array([], pa.string())
    if transition.any():
        spelled = _transition_reasons(found.filter(pa.array(transition)), cfg)
        index[transition] = len(constants) + np.arange(len(spelled), dtype=np.int32)
    reasons = pa.DictionaryArray.from_arrays(pa.array(index), pa.concat_arrays([constants, spelled]))
    return pa.table(
        {
            "id": rows["id"],
            "namespace": rows["namespace"],
            "kind": rows["kind"],
            "policy": _coded(found["policy_code"], pa.array(_POLICIES)),
            "age_days": found["age_days"],
            "score": found["score"],
            "previous_score": rows["score"],
            "stale_before": rows["stale"],
            "stale_after": found["stale_after"],
            "outcome": _coded(found["outcome_code"], pa.array(_OUTCOMES)),
            "review_interval_days": found["review_interval_days"],
            "decline_rate": found["decline_rate"],
            "reasons": reasons,
        }
    ).cast(DECAY_SCHEMA)


# Bump when the content cue computation changes: boosts cached by an older version must not be reused.
CUE_CACHE_VERSION = 1

_CUE_CACHE_SCHEMA = pa.schema(
    [pa.field("id_key", pa.uint64()), pa.field("content_key", pa.uint64()), pa.field("cue", pa.float64())]
)


def cue_fingerprint(cfg: DecayConfig) -> str:
    """What a cached content cue boost depends on besides the content: the cue rules (words and weights), the
    cache version, and DuckDB's version (its `hash()` makes the keys and is not promised stable across releases;
    a new one only turns every lookup into a miss, the fingerprint makes that explicit)."""
    payload = {
        "version": CUE_CACHE_VERSION,
        "duckdb": duckdb.__version__,
        "cues": [rule.model_dump(mode="json") for rule in cfg.engram.cues],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class _Pending:
    """One cache directory's lookups tonight: what was there, what missed, and every live entry."""

    cached_rows: int = 0
    parts: list[Path] = field(default_factory=list)
    misses: list[pa.Table] = field(default_factory=list)
    live: list[pa.Table] = field(default_factory=list)


class CueCache:
    """Content cue boosts kept across nights as Parquet parts under <root>/<cue fingerprint>/.

    A row's content cue boost depends only on its content and the cue rules, but costs one case-insensitive regex
    per rule over the whole text: nearly all of a night's scoring. Cached, a quiet night runs the regexes only on
    new or edited contents. An entry is keyed by (hash(id), hash(content)), DuckDB's 64-bit hashes: a stale hit
    needs an edit to keep the same 64-bit content hash under the same id (odds 2^-64 per edit), or another row to
    collide on both hashes at once. The content hash alone would give birthday odds across the whole store (about
    3e-6 that some two of 10M contents collide) to save a tenth of the lookup (measured at 2M rows: the join on
    both keys 0.45 s, on the content hash alone 0.41 s).
    Parts only grow by tonight's misses; when dead entries (edited or deleted rows) pile up, the directory is
    rewritten as one part of tonight's entries. A part that vanishes under a concurrent reader (another night
    compacting) makes that reader compute everything: the cache only ever saves work, it never decides a score.
    """

    # Rewrite the directory when it holds this many parts, or this many entries per live row.
    MAX_PARTS = 16
    MAX_ENTRIES_PER_ROW = 1.5

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def directory(self, cfg: DecayConfig) -> Path:
        return self.root / cue_fingerprint(cfg)

    def read(self, directory: Path) -> tuple[pa.Table | None, list[Path]]:
        parts = sorted(directory.glob("*.parquet"))
        if not parts:
            return None, []
        try:
            known = pq.read_table(parts, schema=_CUE_CACHE_SCHEMA)
        except (OSError, pa.ArrowInvalid):
            # Compacted away under us: compute everything; tonight's entries then go in as a new part (an
            # entry held twice is harmless, see _content_cues).
            return None, []
        return known, parts

    def write(self, directory: Path, pending: _Pending) -> None:
        misses = pa.concat_tables(pending.misses) if pending.misses else _CUE_CACHE_SCHEMA.empty_table()
        live_rows = sum(t.num_rows for t in pending.live)
        entries = pending.cached_rows + misses.num_rows
        if len(pending.parts) + 1 > self.MAX_PARTS or entries > self.MAX_ENTRIES_PER_ROW * live_rows + 10_000:
            # Distinct: an entry held twice (two nights writing the same misses) is not carried over twice.
            with duck() as con:
                con.register("live", pa.concat_tables(pending.live))
                live = con.sql("SELECT DISTINCT * FROM live").to_arrow_table().cast(_CUE_CACHE_SCHEMA)
            write_parquet(live, directory / f"part-{uuid.uuid4().hex}.parquet")
            # Only after the new part is in place: a reader always finds the rows.
            for part in pending.parts:
                part.unlink(missing_ok=True)
        elif misses.num_rows:
            # A fresh name per write: concurrent nights never write the same file.
            write_parquet(misses, directory / f"part-{uuid.uuid4().hex}.parquet")


def _content_cues(
    table: pa.Table, cfg: DecayConfig, cache: CueCache, pending: dict[Path, _Pending]
) -> pa.Array:
    """The content cue boost of each row of `table`, in its order: cached ones looked up, only misses run the
    regexes (DuckDB's COALESCE evaluates its second argument only on rows where the first is NULL)."""
    directory = cache.directory(cfg)
    known, parts = cache.read(directory)
    state = pending.setdefault(directory, _Pending())
    if parts and not state.parts:
        state.cached_rows, state.parts = known.num_rows if known is not None else 0, parts
    with duck() as con:
        n = table.num_rows
        con.register(
            "cue_input",
            pa.table(
                {
                    "pos": pa.array(np.arange(n, dtype=np.int64)),
                    "id": table["id"],
                    "content": table["content"],
                }
            ),
        )
        keyed = "SELECT pos, hash(id) AS id_key, hash(content) AS content_key, content FROM cue_input"
        if known is None:
            query = f"SELECT pos, id_key, content_key, {_content_cue_sql(cfg)} AS cue, TRUE AS missed FROM ({keyed})"
        else:
            con.register("cue_known", known)
            query = (
                f"SELECT m.pos, m.id_key, m.content_key, coalesce(k.cue, {_content_cue_sql(cfg)}) AS cue, "
                f"k.cue IS NULL AS missed FROM ({keyed}) m LEFT JOIN cue_known k USING (id_key, content_key)"
            )
        found = con.sql(query).to_arrow_table()
        # The join does not keep the input's order; put each boost back at its row (a duplicated cache entry,
        # from two nights writing the same misses, lands twice on the same row with the same value).
        cues = np.zeros(n, dtype=np.float64)
        cues[found["pos"].to_numpy()] = found["cue"].to_numpy()
        entries = found.select(["id_key", "content_key", "cue"]).cast(_CUE_CACHE_SCHEMA)
        state.live.append(entries)
        state.misses.append(entries.filter(found["missed"]))
        return pa.array(cues)


def decay_scores(
    memories: pa.Table, config: Config, as_of: dt.datetime, *, cue_cache: CueCache | None = None
) -> pa.Table:
    """One row per memory: policy, age, score, stale before/after, outcome, review interval, reasons.

    With `cue_cache`, content cue boosts are reused across nights (the same scores, without rerunning the cue
    regexes on unchanged contents) and tonight's new ones are added to it; None computes every boost."""
    with duck() as con:
        table = memories.select(_COLUMNS)
        groups: list[tuple[Config, list[str]]] = [(config, [])]
        if any(policy.decay for policy in config.namespaces.values()):
            # Only then are the namespaces needed (listing them costs ~0.2 s per 10M rows).
            groups = config.namespace_groups(pc.unique(memories["namespace"]).to_pylist(), "decay")
        pending: dict[Path, _Pending] = {}

        def scored(effective: Config, rows: pa.Table, name: str) -> pa.Table:
            cached = cue_cache is not None and _uses_engram(effective.decay)
            if cue_cache is not None and cached:
                rows = rows.append_column(
                    "content_cue", _content_cues(rows, effective.decay, cue_cache, pending)
                )
            con.register(name, rows.append_column("pos", pa.array(np.arange(rows.num_rows, dtype=np.int64))))
            found = con.sql(_group_sql(effective, name, as_of, content_cue_column=cached)).to_arrow_table()
            return _assemble(rows, found, effective)

        if len(groups) == 1:  # the usual case: no namespace overrides decay, one pass over everything
            result = scored(groups[0][0], table, "memories")
        else:
            parts = []
            for index, (effective, group) in enumerate(groups):
                subset = table.filter(pc.is_in(table["namespace"], pa.array(group, pa.string())))
                parts.append(scored(effective, subset, f"group_{index}"))
            result = pa.concat_tables(parts).sort_by("id") if parts else DECAY_SCHEMA.empty_table()
        if cue_cache is not None:
            for directory, state in pending.items():
                cue_cache.write(directory, state)
        return result


def decay_intents(scores: pa.Table) -> pa.Table:
    """Only transitions: mark rows that became stale, lift the mark from rows that recovered or are pinned."""
    with duck() as con:
        con.register("scores", scores)
        return intents_from_sql(
            con,
            """
            SELECT namespace, 'memory' AS target_kind, id AS target_id,
                CASE WHEN stale_after THEN 'mark_stale' ELSE 'clear_stale' END AS op,
                to_json({'score': round(score, 6)}) AS params, reasons AS reason,
                to_json({'age_days': age_days, 'decay_score': score, 'policy': policy, 'rule': 'decay'}) AS evidence,
                'decay_scores' AS source, 'auto' AS review_class, NULL AS cluster_id
            FROM scores WHERE stale_after <> stale_before ORDER BY id
            """,
        )

"""Decision quality of the real pipeline on real conversations (LoCoMo, development half), run as a user runs it.

    .venv/bin/python bench/quality_real.py [--corpus facts|turns|both] [--data DIR] [--json PATH]
        [--keep DIR] [--sample 100] [--labels TSV] [--print-unlabelled] [--config FILE] [--verbose]

Data: --data, else $ENGRAM_LOCOMO_DEV, else ../shared/data/locomo_dev beside the repository (CC BY-NC: read
in place, never copied into the repository). Its README.md says how the memories are built and judged.

Per corpus ("facts": one memory per LoCoMo observation; "turns": one per dialogue turn, "Speaker: text"), in a
fresh temporary SQLite store and warehouse:

1. the memories are written as JSON Lines in the import format and imported by the product's importer;
2. the nightly job, then the consolidate job; every proposed change set is approved (gated ones) and applied,
   oldest first, as `changes list`, `approve` and `apply` would;
3. a second nightly and consolidate on the same day: the changes they propose (a converged store proposes none);
4. the final store is read back and measured:
   - merges (rows superseded, chains followed to the final canonical); on the labelled pairs (gold: the two
     annotators agree at the coarse level mergeable / DIFF / CONFLICT): precision, "nothing lost" (the hidden
     side is the contained one) and recall; merges per 1,000 memories; beside recall, the mergeable pairs
     resolved: merged into each other, or the side the label lets go merged into a third row while the other
     stays visible (what the user then sees is what the label asks for);
   - contradictions (`contradicts` links and `metadata.contradictionWith`): flags per 1,000 memories,
     precision and recall on the labelled pairs;
   - semantic nodes (kind 'semantic'): nodes per 1,000 memories; the share of chit-chat among a deterministic
     sample of nodes, judged by hand labels (bench/quality_real_labels/semantic_nodes.tsv, keyed by the id of
     the memory whose text the node carries; --print-unlabelled lists the sampled nodes still without one);
   - QA evidence recall@10 (categories 1, 2, 4): a question is answered when one of the 10 visible memories of
     its conversation closest to it by cosine (default embedder) carries an evidence turn (turns) or an
     observation whose evidence overlaps the question's (facts). A row carries a memory when it is the memory,
     a row it was superseded into (through chains), a semantic node derived from it or a summary it was
     compressed into. "Before" is the imported store (every row visible), "after" the final store. Also the
     share of top-10 slots that are near-copies (cosine >= 0.95) of a higher-ranked result.

Vectors are the product's own (engram_pipelines.vectors.comparable.partition_vectors): the store's vector where current,
else the warehouse's embedding cache, filled by the nightly's `embeddings` step. Config: --config, else the
product's usual lookup ($ENGRAM_CONFIG, ./engram.yaml, the seeds' environment variables); the default config
is what the figures are meant to describe, so the bench warns when an override is active.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engram_pipelines.changes.apply import apply_change_set  # noqa: E402
from engram_pipelines.changes.registry import load_change_set, ops_by  # noqa: E402
from engram_pipelines.changes.revert import approve_change_set  # noqa: E402
from engram_pipelines.config.model import ENV_OVERRIDES, ENV_SECONDS_TO_DAYS, Config, load_config  # noqa: E402
from engram_pipelines.core import records  # noqa: E402
from engram_pipelines.ingest.load import import_jsonl  # noqa: E402
from engram_pipelines.orchestration.runner import execute_job  # noqa: E402
from engram_pipelines.store import Store, open_store  # noqa: E402
from engram_pipelines.vectors.comparable import VECTOR_INPUT_COLUMNS, partition_vectors  # noqa: E402
from engram_pipelines.vectors.embeddings import Embedder, embed_in_batches, load_embedder  # noqa: E402
from engram_pipelines.warehouse.tables import Warehouse  # noqa: E402

TOP_K = 10
NEAR_COPY = 0.95
QA_CATEGORIES = (1, 2, 4)  # multi-hop, temporal, single-hop
MERGEABLE = frozenset({"DUP", "A_IN_B", "B_IN_A"})
CORPORA = ("facts", "turns")
LABELS = REPO / "bench" / "quality_real_labels" / "semantic_nodes.tsv"
# Our own labelled fact pairs (ids and two annotators' labels; README there), beside the 102 LoCoMo's dev half has.
OUR_PAIRS = REPO / "bench" / "quality_real_labels" / "labelled_pairs.tsv"
LABEL_VALUES = ("KNOWLEDGE", "CHITCHAT")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")  # "D8:6; D9:17" and "D:11:26" occur in the QA evidence


# -- the data ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    sample_id: str
    text: str
    category: int
    evidence: frozenset[str]  # dialogue ids, "D<session>:<turn>"


@dataclass(frozen=True)
class LabelledPair:
    a_id: str
    b_id: str
    label_1: str
    label_2: str

    @property
    def coarse(self) -> tuple[str, str]:
        return coarse(self.label_1), coarse(self.label_2)

    @property
    def is_gold(self) -> bool:
        return self.coarse[0] == self.coarse[1]

    @property
    def exact(self) -> str | None:
        return self.label_1 if self.label_1 == self.label_2 else None


@dataclass(frozen=True)
class Locomo:
    conversations: list[dict[str, Any]]
    observations: list[dict[str, Any]]
    pairs: list[LabelledPair]  # the dev half's labelled pairs
    questions: list[Question]
    our_pairs: list[LabelledPair] = field(default_factory=list)  # OUR_PAIRS


def coarse(label: str) -> str:
    return "MERGEABLE" if label in MERGEABLE else label


def default_data_dir() -> Path:
    env = os.environ.get("ENGRAM_LOCOMO_DEV")
    return Path(env) if env else REPO.parent / "shared" / "data" / "locomo_dev"


def load_locomo(root: Path) -> Locomo:
    conversations = json.loads((root / "conversations.json").read_text())
    observations = [
        json.loads(line) for line in (root / "observations.jsonl").read_text().splitlines() if line
    ]
    pairs = [
        LabelledPair(p["a_id"], p["b_id"], p["label_1"], p["label_2"])
        for p in map(json.loads, (root / "labelled_pairs.jsonl").read_text().splitlines())
    ]
    questions = [
        Question(c["sample_id"], q["question"], q["category"], evidence_ids(q.get("evidence", [])))
        for c in conversations
        for q in c["qa"]
        if q["category"] in QA_CATEGORIES
    ]
    return Locomo(
        conversations, observations, pairs, [q for q in questions if q.evidence], read_our_pairs(OUR_PAIRS)
    )


def read_our_pairs(path: Path) -> list[LabelledPair]:
    """`a_id<TAB>b_id<TAB>label_1<TAB>label_2` lines; `#` lines are comments."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [LabelledPair(*line.split("\t")) for line in lines]


def evidence_ids(evidence: Sequence[str]) -> frozenset[str]:
    return frozenset(f"D{s}:{t}" for item in evidence for s, t in _EVIDENCE.findall(item))


def session_time(text: str) -> dt.datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", read as UTC."""
    return dt.datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def sessions(conversation: dict[str, Any]) -> Iterator[tuple[str, dt.datetime, list[dict[str, Any]]]]:
    """(session key, its time, its turns) for every session that has turns."""
    talk = conversation["conversation"]
    for key, turns in talk.items():
        if re.fullmatch(r"session_\d+", key) and turns:
            yield key, session_time(talk[f"{key}_date_time"]), turns


# -- the memories, as the locomo README builds them ------------------------------------------------------------


def fact_memories(data: Locomo) -> list[dict[str, Any]]:
    """One memory per observation; a few minutes apart within a session; accessed 3 times the day before."""
    seen: Counter[tuple[str, str]] = Counter()
    rows = []
    for o in data.observations:
        order = seen[(o["sample_id"], o["session"])]
        seen[(o["sample_id"], o["session"])] += 1
        rows.append(
            {
                "id": o["id"],
                "namespace": o["sample_id"],
                "content": o["fact"],
                "conversation_id": o["session"],
                "kind": "episodic",
                "tier": "ltm",
                "importance": 0.5,
                "created_at": session_time(o["session_date_time"]) + dt.timedelta(minutes=order),
                "access_count": 3,
            }
        )
    # Accessed late on the day before the as-of: after every created_at of the last session.
    accessed = dt.datetime.combine(as_of_for(rows), dt.time(), dt.UTC) - dt.timedelta(minutes=1)
    for row in rows:
        row["last_accessed_at"] = accessed
    return rows


def turn_memories(data: Locomo) -> list[dict[str, Any]]:
    """One memory per dialogue turn, "Speaker: text", one minute apart; never accessed."""
    return [
        {
            "id": f"{c['sample_id']}:{turn['dia_id']}",
            "namespace": c["sample_id"],
            "content": f"{turn['speaker']}: {turn['text']}",
            "conversation_id": key,
            "kind": "episodic",
            "importance": 0.5,
            "created_at": start + dt.timedelta(minutes=i),
        }
        for c in data.conversations
        for key, start, turns in sessions(c)
        for i, turn in enumerate(turns)
    ]


def as_of_for(rows: list[dict[str, Any]]) -> dt.date:
    """The run's as-of date: the day after the corpus's last session (LoCoMo's run from 2022 to 2024; the
    as-of partitions start at the store's earliest memory, so the corpus runs on its own dates)."""
    return max(row["created_at"] for row in rows).date() + dt.timedelta(days=1)


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """The import format: ISO 8601 timestamps with their zone."""
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            line = {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in row.items()}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


# -- running the product ---------------------------------------------------------------------------------------


class Steps:
    """A progress line per step and its time."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        print(f"[{time.perf_counter() - self.started:7.1f}s] {name} ...", flush=True)
        began = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - began, 2)
        print(f"[{time.perf_counter() - self.started:7.1f}s] {name}: {self.seconds[name]:.1f}s", flush=True)


@dataclass(frozen=True)
class Workspace:
    root: Path
    config_path: str | None
    log_level: str
    as_of: dt.date

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.root / 'engram.db'}"

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse(self.root / "warehouse")

    @contextmanager
    def store(self, *, migrate: bool = False) -> Iterator[Store]:
        store = open_store(self.store_url, migrate=migrate)
        try:
            yield store
        finally:
            store.close()

    def run(self, job: str) -> dict[str, Any]:
        """What `engram-pipelines run --job JOB --as-of DATE` runs, in-process."""
        summary = execute_job(
            job,
            self.as_of,
            store=self.store_url,
            warehouse=str(self.warehouse.root),
            config_path=self.config_path,
            log_level=self.log_level,
        )
        failed = [name for name, passed in summary["checks"].items() if not passed]
        if failed:
            print(f"  warning: {job}: checks failed: {', '.join(failed)}")
        if not summary["success"]:
            raise RuntimeError(f"{job} failed: {summary.get('error', 'unknown error')}")
        return summary

    def proposed(self, job: str) -> dict[str, str]:
        """The change sets (class -> id) the job's last run proposed."""
        return self.warehouse.read_run_pointer(self.as_of, job)


def import_corpus(ws: Workspace, rows: list[dict[str, Any]], config: Config) -> int:
    """What `engram-pipelines import FILE` does."""
    path = ws.root / "corpus.jsonl"
    write_jsonl(rows, path)
    with ws.store(migrate=True) as store:
        summary = import_jsonl(
            store,
            path,
            default_namespace=None,
            embedding_dim=config.snapshot.embedding_dim,
            rejects_path=path.with_suffix(".rejects.jsonl"),
        )
    if summary.rejected_lines or summary.imported != len(rows):
        raise RuntimeError(f"import: {summary.as_dict()}")
    return summary.imported


def apply_every_proposed(ws: Workspace, config: Config) -> list[dict[str, Any]]:
    """`changes list`, then `approve` (gated sets) and `apply` for every proposed set, oldest first; a set the
    volume guard held (`held`: a night that would hide much of a conversation) is left waiting, as a reviewer
    who reads "night would hide 95% of conv-26" would leave it."""
    results = []
    with ws.store() as store:
        pending = sorted(
            (r for r in store.list_change_sets() if r.status == "proposed"),
            key=lambda r: (r.created_at, r.change_set_id),
        )
        for record in pending:
            if record.review_class == "held":
                held = record.counts.get("held_for_review", [])
                results.append(
                    {"job": record.job, "class": "held", "total": record.total, "not_approved": held}
                )
                continue
            if record.review_class == "gated":
                approve_change_set(store, record.change_set_id, actor="bench:quality_real")
            result = apply_change_set(
                store, record.change_set_id, actor="bench:quality_real", batch_size=config.apply.batch_size
            )
            results.append({"job": record.job, "class": record.review_class, **result.as_dict()})
    return results


def second_night(ws: Workspace) -> dict[str, Any]:
    """A second nightly and consolidate on the same day: what they propose, per job, class, source and op."""
    proposed: dict[str, dict[str, str]] = {}
    for job in ("nightly", "consolidate"):
        ws.run(job)
        proposed[job] = ws.proposed(job)
    per_set: dict[str, Any] = {}
    change_ids: set[str] = set()
    by_source: dict[str, Counter[str]] = {}
    with ws.store() as store:
        for job, sets in proposed.items():
            for klass, change_set_id in sets.items():
                _, table = load_change_set(store, change_set_id)
                per_set[f"{job}/{klass}"] = {"change_set_id": change_set_id, "changes": table.num_rows}
                if klass == "held":  # the first night's held set, proposed again while it waits: nothing new
                    continue
                change_ids.update(table.column("change_id").to_pylist())
                for source, ops in ops_by(table, "source").items():
                    by_source.setdefault(source, Counter()).update(ops)
    return {
        "distinct_changes": len(change_ids),
        "per_set": per_set,
        "by_source_op": {s: dict(sorted(c.items())) for s, c in sorted(by_source.items())},
    }


def read_store(store: Store, dim: int) -> tuple[pa.Table, pa.Table]:
    """Every memory and link, as the snapshot reads them."""
    memories = pa.Table.from_batches(
        list(store.iter_memory_batches(10_000, dim)), schema=records.memory_schema(dim)
    )
    links = pa.Table.from_batches(list(store.iter_link_batches(10_000)), schema=records.LINK_SCHEMA)
    return memories, links


# -- merges and contradictions ------------------------------------------------------------------------------------


def connect(memories: pa.Table, links: pa.Table) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("memories", memories.drop_columns(["embedding"]))
    con.register("links", links)
    # (id, a row it was superseded into, directly or through a chain)
    con.execute(
        """
        CREATE TABLE chain AS
        WITH RECURSIVE walk(id, hop, depth) AS (
            SELECT id, superseded_by, 1 FROM memories WHERE superseded_by IS NOT NULL
            UNION ALL
            SELECT w.id, m.superseded_by, w.depth + 1 FROM walk w JOIN memories m ON m.id = w.hop
            WHERE m.superseded_by IS NOT NULL AND w.depth < 64
        )
        SELECT id, hop, depth FROM walk
        """
    )
    return con


def contradiction_pairs(con: duckdb.DuckDBPyConnection) -> set[frozenset[str]]:
    rows = con.sql(
        """
        SELECT least(src_id, dst_id), greatest(src_id, dst_id) FROM links WHERE kind = 'contradicts'
        UNION
        SELECT least(id, other), greatest(id, other) FROM (
            SELECT id, unnest(from_json(json_extract(metadata, '$.contradictionWith'), '["VARCHAR"]')) AS other
            FROM memories WHERE json_type(json_extract(metadata, '$.contradictionWith')) = 'ARRAY'
        )
        """
    ).fetchall()
    return {frozenset(r) for r in rows}


def contradiction_rules(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Flagged pairs by the rule named in `metadata.contradictionReasons` ("value swap: ..."), each pair once."""
    rows = con.sql(
        """
        SELECT split_part(e.value, ':', 1) AS rule, count(*) AS pairs FROM (
            SELECT id, unnest(map_entries(from_json(
                json_extract(metadata, '$.contradictionReasons'), '"MAP(VARCHAR, VARCHAR)"'))) AS e
            FROM memories WHERE json_type(json_extract(metadata, '$.contradictionReasons')) = 'OBJECT'
        )
        WHERE id < e.key GROUP BY 1 ORDER BY pairs DESC, rule
        """
    ).fetchall()
    return dict(rows)


def superseded_into(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    return {(a, b) for a, b in con.sql("SELECT id, hop FROM chain").fetchall()}


def ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def merge_metrics(con: duckdb.DuckDBPyConnection, pairs: list[LabelledPair], imported: int) -> dict[str, Any]:
    into = superseded_into(con)
    superseded = con.sql("SELECT count(*) FROM memories WHERE superseded_by IS NOT NULL").fetchall()[0][0]
    hidden_by_pair: list[tuple[LabelledPair, str]] = []  # gold pairs merged, with the side hidden
    third = 0
    finals = dict(con.sql("SELECT id, arg_max(hop, depth) FROM chain GROUP BY id").fetchall())
    for p in (p for p in pairs if p.is_gold):
        if (p.a_id, p.b_id) in into:
            hidden_by_pair.append((p, "A"))
        elif (p.b_id, p.a_id) in into:
            hidden_by_pair.append((p, "B"))
        elif p.a_id in finals and finals.get(p.a_id) == finals.get(p.b_id):
            third += 1
    right = [p for p, side in hidden_by_pair if contained(p, side)]
    exact = [(p, side) for p, side in hidden_by_pair if p.exact]
    mergeable = [p for p in pairs if p.is_gold and p.coarse[0] == "MERGEABLE"]
    # A mergeable pair's redundancy is also gone when the side its label lets go was merged into a third row
    # (that contains it) and the other side stays visible: the user sees one of the two, as the label asks.
    direct = {(p.a_id, p.b_id) for p, _ in hidden_by_pair}
    via_third = sum(
        (p.a_id in finals) != (p.b_id in finals) and contained(p, "A" if p.a_id in finals else "B")
        for p in mergeable
        if (p.a_id, p.b_id) not in direct
    )
    return {
        "superseded": superseded,
        "merges_per_1000": round(1000 * superseded / imported, 1),
        "gold_pairs": sum(p.is_gold for p in pairs),
        "gold_mergeable": len(mergeable),
        "merged_gold_pairs": len(hidden_by_pair),
        "merged_gold_mergeable": sum(p.coarse[0] == "MERGEABLE" for p, _ in hidden_by_pair),
        "precision": ratio(len(right), len(hidden_by_pair)),
        "precision_coarse": ratio(
            sum(p.coarse[0] == "MERGEABLE" for p, _ in hidden_by_pair), len(hidden_by_pair)
        ),
        "nothing_lost": ratio(sum(contained(p, side) for p, side in exact), len(exact)),
        "nothing_lost_of": len(exact),
        "recall": ratio(sum(p.coarse[0] == "MERGEABLE" for p, _ in hidden_by_pair), len(mergeable)),
        "both_into_a_third_row": third,
        "resolved_via_third_row": via_third,
        "recall_resolved": ratio(
            sum(p.coarse[0] == "MERGEABLE" for p, _ in hidden_by_pair) + via_third, len(mergeable)
        ),
        "wrong": [
            {"a_id": p.a_id, "b_id": p.b_id, "hidden": side, "labels": [p.label_1, p.label_2]}
            for p, side in hidden_by_pair
            if not contained(p, side)
        ],
    }


def contained(pair: LabelledPair, hidden: str) -> bool:
    """The README's right merge: DUP, or A_IN_B with A hidden, or B_IN_A with B hidden. When the annotators
    agree only at the coarse level, the merge is right when it is right under either one's label."""
    right = {"DUP", f"{hidden}_IN_{'B' if hidden == 'A' else 'A'}"}
    return bool({pair.label_1, pair.label_2} & right) if pair.is_gold else False


def contradiction_metrics(
    con: duckdb.DuckDBPyConnection, pairs: list[LabelledPair], imported: int
) -> dict[str, Any]:
    flagged = contradiction_pairs(con)
    gold = [p for p in pairs if p.is_gold]
    hit = [p for p in gold if frozenset((p.a_id, p.b_id)) in flagged]
    conflicts = [p for p in gold if p.coarse[0] == "CONFLICT"]
    return {
        "flagged_pairs": len(flagged),
        "flags_per_1000": round(1000 * len(flagged) / imported, 1),
        "rows_flagged": len({i for pair in flagged for i in pair}),
        "gold_conflicts": len(conflicts),
        "flagged_gold_pairs": len(hit),
        "precision": ratio(sum(p.coarse[0] == "CONFLICT" for p in hit), len(hit)),
        "recall": ratio(sum(frozenset((p.a_id, p.b_id)) in flagged for p in conflicts), len(conflicts)),
        "flagged_gold_labels": dict(Counter(f"{p.label_1}/{p.label_2}" for p in hit)),
        "by_rule": contradiction_rules(con),
    }


# -- semantic nodes ------------------------------------------------------------------------------------------


def semantic_nodes(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every semantic row: id, content, visibility and the id of the memory whose text it carries (its
    representative when the text is the representative's, else a source with the same text, else its first
    source), from `metadata.semantic` (sources, representative) and the `derived-from` links."""
    return [
        dict(zip(("id", "content", "visible", "sources", "label_key"), row, strict=True))
        for row in con.sql(
            """
            WITH node AS (
                SELECT id, content, superseded_by IS NULL AND zone = 'active' AS visible,
                    json_extract_string(metadata, '$.semantic.representative') AS representative,
                    coalesce(from_json(json_extract(metadata, '$.semantic.sources'), '["VARCHAR"]'), []) AS listed
                FROM memories WHERE kind = 'semantic'
            ),
            source AS (
                SELECT id AS node_id, unnest(listed) AS source_id FROM node
                UNION SELECT src_id, dst_id FROM links WHERE kind = 'derived-from'
            ),
            same_text AS (
                SELECT s.node_id, min(s.source_id) AS source_id FROM source s
                JOIN node n ON n.id = s.node_id JOIN memories m ON m.id = s.source_id
                WHERE m.content = n.content GROUP BY s.node_id
            )
            SELECT n.id, n.content, n.visible, list_sort(list(DISTINCT s.source_id)) AS sources,
                coalesce(
                    CASE WHEN r.content = n.content THEN n.representative END,
                    any_value(t.source_id), min(s.source_id), n.id
                ) AS label_key
            FROM node n
            LEFT JOIN source s ON s.node_id = n.id
            LEFT JOIN memories r ON r.id = n.representative
            LEFT JOIN same_text t ON t.node_id = n.id
            GROUP BY n.id, n.content, n.visible, n.representative, r.content
            ORDER BY n.id
            """
        ).fetchall()
    ]


def sample_nodes(nodes: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Deterministic: the first `size` nodes by the hash of their id."""
    return sorted(nodes, key=lambda n: hashlib.sha256(n["id"].encode()).hexdigest())[:size]


def read_labels(path: Path) -> dict[str, str]:
    labels: dict[str, str] = {}
    if not path.is_file():
        return labels
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, _, label = line.partition("\t")
        if label.strip() not in LABEL_VALUES:
            raise ValueError(f"{path}:{number}: label {label!r} is not one of {LABEL_VALUES}")
        labels[key.strip()] = label.strip()
    return labels


def semantic_metrics(
    nodes: list[dict[str, Any]], labels: dict[str, str], imported: int, size: int
) -> dict[str, Any]:
    sample = sample_nodes(nodes, size)
    judged = [labels[n["label_key"]] for n in sample if n["label_key"] in labels]
    chit = judged.count("CHITCHAT")
    return {
        "nodes": len(nodes),
        "visible_nodes": sum(n["visible"] for n in nodes),
        "nodes_per_1000": round(1000 * len(nodes) / imported, 1),
        "sources_per_node": round(float(np.mean([len(n["sources"]) for n in nodes])), 2) if nodes else None,
        "sampled": len(sample),
        "labelled": len(judged),
        "unlabelled": len(sample) - len(judged),
        "chitchat": chit,
        "chitchat_share": ratio(chit, len(judged)),
    }


# -- QA evidence recall ------------------------------------------------------------------------------------------


@dataclass
class Ranking:
    """The visible memories of each conversation and their unit vectors."""

    ids: dict[str, list[str]] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)


def recalled_ids(store: Store) -> pa.Array:
    """The rows of the recall contract, read through the store's own view `recall_memories`."""
    return pa.array([r[0] for r in store.query("SELECT id FROM recall_memories")], pa.string())


def ranking_of(memories: pa.Table, recalled: pa.Array, embedder: Embedder, warehouse: Warehouse) -> Ranking:
    """The recall contract's rows (`recalled`) with the product's vectors for them."""
    visible = memories.filter(pc.is_in(memories["id"], recalled))
    vectors, _ = partition_vectors(visible.select(VECTOR_INPUT_COLUMNS), embedder, warehouse.root)
    matrix = np.asarray(vectors["vector"].combine_chunks().values.to_numpy(), dtype=np.float32).reshape(
        vectors.num_rows, -1
    )
    namespaces = np.asarray(vectors["namespace"].to_pylist())
    ids = np.asarray(vectors["id"].to_pylist())
    out = Ranking()
    for namespace in np.unique(namespaces):
        chosen = namespaces == namespace
        out.ids[str(namespace)] = ids[chosen].tolist()
        out.vectors[str(namespace)] = matrix[chosen]
    return out


def carried_by(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """id -> every row that carries it: rows it was superseded or compressed into, nodes derived from it (and,
    transitively, what carries those)."""
    edges = con.sql(
        """
        WITH RECURSIVE edge(x, y) AS (
            SELECT id, hop FROM chain
            UNION SELECT src_id, dst_id FROM links WHERE kind IN ('duplicate-of', 'summarized-into')
            UNION SELECT dst_id, src_id FROM links WHERE kind = 'derived-from'
            UNION SELECT unnest(from_json(json_extract(metadata, '$.semantic.sources'), '["VARCHAR"]')), id
                FROM memories WHERE kind = 'semantic'
        ),
        reach(x, y) AS (
            SELECT x, y FROM edge
            UNION SELECT r.x, e.y FROM reach r JOIN edge e ON e.x = r.y
        )
        SELECT x, list(DISTINCT y) FROM reach GROUP BY x
        """
    ).fetchall()
    return {x: set(ys) for x, ys in edges}


def evidence_memories(corpus: str, data: Locomo) -> list[set[str]]:
    """Per question, the memories that hold its evidence: its turns, or the observations citing one of them."""
    if corpus == "turns":
        return [{f"{q.sample_id}:{e}" for e in q.evidence} for q in data.questions]
    citing: dict[tuple[str, str], set[str]] = {}
    for o in data.observations:
        for e in evidence_ids(o["evidence"]):
            citing.setdefault((o["sample_id"], e), set()).add(o["id"])
    return [set().union(*(citing.get((q.sample_id, e), set()) for e in q.evidence)) for q in data.questions]


def qa_metrics(
    ranking: Ranking,
    questions: list[Question],
    question_vectors: np.ndarray,
    holders_of: list[set[str]],
    carriers: dict[str, set[str]],
) -> dict[str, Any]:
    """Questions whose evidence no memory holds are left out (facts: no observation cites that turn)."""
    answered = near_copies = slots = asked = 0
    by_category: dict[int, list[int]] = {c: [0, 0] for c in QA_CATEGORIES}
    for q, vector, holders in zip(questions, question_vectors, holders_of, strict=True):
        if not holders or q.sample_id not in ranking.ids:
            continue
        vectors = ranking.vectors[q.sample_id]
        top = np.argsort(-(vectors @ vector), kind="stable")[:TOP_K]
        wanted = holders.union(*(carriers.get(h, set()) for h in holders))
        hit = any(ranking.ids[q.sample_id][i] in wanted for i in top)
        among = vectors[top] @ vectors[top].T
        near_copies += int((np.tril(among, k=-1) >= NEAR_COPY).any(axis=1).sum())
        slots += len(top)
        asked += 1
        answered += hit
        by_category[q.category][0] += hit
        by_category[q.category][1] += 1
    return {
        "questions": asked,
        "recall_at_10": ratio(answered, asked),
        "by_category": {str(c): ratio(hit, n) for c, (hit, n) in by_category.items()},
        "near_copy_share": ratio(near_copies, slots),
    }


# -- one corpus ---------------------------------------------------------------------------------------------------


@dataclass
class CorpusResult:
    corpus: str
    memories: int
    as_of: str
    seconds: dict[str, float]
    applied: list[dict[str, Any]]
    second_night: dict[str, Any]
    final_state: dict[str, int]
    merges: dict[str, Any]
    contradictions: dict[str, Any]
    merges_all: dict[str, Any]  # over the dev half's labelled pairs and ours together
    contradictions_all: dict[str, Any]
    semantic: dict[str, Any]
    qa_before: dict[str, Any]
    qa_after: dict[str, Any]
    unlabelled: list[dict[str, str]] = field(default_factory=list)


def corpus_rows(corpus: str, data: Locomo) -> list[dict[str, Any]]:
    return fact_memories(data) if corpus == "facts" else turn_memories(data)


def run_corpus(
    corpus: str,
    rows: list[dict[str, Any]],
    data: Locomo,
    ws: Workspace,
    config: Config,
    embedder: Embedder,
    question_vectors: np.ndarray,
    labels: dict[str, str],
    sample_size: int,
) -> CorpusResult:
    steps = Steps()
    dim = config.snapshot.embedding_dim
    with steps.step(f"{corpus}: import {len(rows):,} memories (as of {ws.as_of})"):
        imported = import_corpus(ws, rows, config)
        with ws.store() as store:
            before, _ = read_store(store, dim)
            recalled_before = recalled_ids(store)
    with steps.step(f"{corpus}: nightly"):
        ws.run("nightly")
    with steps.step(f"{corpus}: consolidate"):
        ws.run("consolidate")
    with steps.step(f"{corpus}: approve and apply every proposed change set"):
        applied = apply_every_proposed(ws, config)
    with steps.step(f"{corpus}: second nightly + consolidate"):
        again = second_night(ws)
    with steps.step(f"{corpus}: read the final store and measure"):
        with ws.store() as store:
            memories, links = read_store(store, dim)
            recalled = recalled_ids(store)
        con = connect(memories, links)
        pairs = data.pairs if corpus == "facts" else []
        nodes = semantic_nodes(con)
        carriers = carried_by(con)
        state = dict(
            con.sql(
                """
                SELECT CASE WHEN superseded_by IS NOT NULL THEN 'superseded' ELSE zone END || ' ' || kind, count(*)
                FROM memories GROUP BY ALL ORDER BY 1
                """
            ).fetchall()
        )
        merges = merge_metrics(con, pairs, imported)
        contradictions = contradiction_metrics(con, pairs, imported)
        ours = pairs + data.our_pairs if corpus == "facts" else []
        merges_all = merge_metrics(con, ours, imported)
        contradictions_all = contradiction_metrics(con, ours, imported)
        semantic = semantic_metrics(nodes, labels, imported, sample_size)
    with steps.step(f"{corpus}: QA evidence recall@{TOP_K} before and after"):
        holders = evidence_memories(corpus, data)
        qa_before = qa_metrics(
            ranking_of(before, recalled_before, embedder, ws.warehouse),
            data.questions,
            question_vectors,
            holders,
            {},
        )
        qa_after = qa_metrics(
            ranking_of(memories, recalled, embedder, ws.warehouse),
            data.questions,
            question_vectors,
            holders,
            carriers,
        )
    unlabelled = [
        {"id": n["label_key"], "node": n["id"], "text": n["content"]}
        for n in sample_nodes(nodes, sample_size)
        if n["label_key"] not in labels
    ]
    return CorpusResult(
        corpus=corpus,
        memories=imported,
        as_of=ws.as_of.isoformat(),
        seconds=steps.seconds,
        applied=applied,
        second_night=again,
        final_state=state,
        merges=merges,
        contradictions=contradictions,
        merges_all=merges_all,
        contradictions_all=contradictions_all,
        semantic=semantic,
        qa_before=qa_before,
        qa_after=qa_after,
        unlabelled=unlabelled,
    )


# -- output ------------------------------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_result(r: CorpusResult) -> None:
    m, c, s, b, a = r.merges, r.contradictions, r.semantic, r.qa_before, r.qa_after
    ma, ca = r.merges_all, r.contradictions_all
    print(f"\n## {r.corpus}: {r.memories:,} memories, as of {r.as_of}\n")
    print("| measure | value |")
    print("|---|---:|")
    table = [
        ("merges (rows superseded)", m["superseded"]),
        ("merges per 1,000 memories", m["merges_per_1000"]),
        (
            "merge precision, labelled (merged gold pairs)",
            f"{fmt(m['precision'])} ({m['merged_gold_pairs']})",
        ),
        ("merge precision, coarse (mergeable)", fmt(m["precision_coarse"])),
        ("merge nothing lost (exact agreed labels)", f"{fmt(m['nothing_lost'])} ({m['nothing_lost_of']})"),
        ("merge recall of mergeable gold pairs", f"{fmt(m['recall'])} (of {m['gold_mergeable']})"),
        ("labelled pairs both merged into a third row", m["both_into_a_third_row"]),
        (
            "mergeable pairs resolved: merged, or the side its label lets go merged into a third row",
            f"{fmt(m['recall_resolved'])} ({m['resolved_via_third_row']} via a third row)",
        ),
        ("contradiction pairs flagged", c["flagged_pairs"]),
        ("contradiction flags per 1,000 memories", c["flags_per_1000"]),
        (
            "contradiction precision, labelled (flagged gold pairs)",
            f"{fmt(c['precision'])} ({c['flagged_gold_pairs']})",
        ),
        ("contradiction recall of gold CONFLICT", f"{fmt(c['recall'])} (of {c['gold_conflicts']})"),
        *(
            (f"{name}, with our labelled pairs ({ma['gold_pairs']} agreed)", value)
            for name, value in (
                ("merge precision", f"{fmt(ma['precision'])} ({ma['merged_gold_pairs']})"),
                ("merge nothing lost", f"{fmt(ma['nothing_lost'])} ({ma['nothing_lost_of']})"),
                ("merge recall of mergeable pairs", f"{fmt(ma['recall'])} (of {ma['gold_mergeable']})"),
                ("contradiction precision", f"{fmt(ca['precision'])} ({ca['flagged_gold_pairs']})"),
                ("contradiction recall of CONFLICT", f"{fmt(ca['recall'])} (of {ca['gold_conflicts']})"),
            )
            if ma["gold_pairs"]
        ),
        ("semantic nodes (visible)", f"{s['nodes']} ({s['visible_nodes']})"),
        ("semantic nodes per 1,000 memories", s["nodes_per_1000"]),
        ("sources per node (mean)", fmt(s["sources_per_node"])),
        (
            "semantic chit-chat share (labelled / sampled)",
            f"{fmt(s['chitchat_share'])} ({s['labelled']} / {s['sampled']}, {s['unlabelled']} unlabelled)",
        ),
        ("QA questions with evidence memories", a["questions"]),
        ("QA evidence recall@10 before -> after", f"{fmt(b['recall_at_10'])} -> {fmt(a['recall_at_10'])}"),
        *(
            (f"  category {k} before -> after", f"{fmt(b['by_category'][k])} -> {fmt(a['by_category'][k])}")
            for k in b["by_category"]
        ),
        (
            "top-10 near-copy share before -> after",
            f"{fmt(b['near_copy_share'])} -> {fmt(a['near_copy_share'])}",
        ),
        ("second night: changes proposed (distinct)", r.second_night["distinct_changes"]),
    ]
    for name, value in table:
        print(f"| {name} | {value} |")
    print("\nfinal store: " + ", ".join(f"{k} {v}" for k, v in r.final_state.items()))
    print(
        "applied: "
        + "; ".join(
            f"{x['job']}/{x['class']} {x['change_set_id']}: {x['applied']} applied, "
            f"{x['skipped_concurrent_edit']} skipped, {x['ineligible']} ineligible of {x['total']}"
            for x in r.applied
            if x["class"] != "held"
        )
    )
    for x in r.applied:
        for held in x.get("not_approved", []):
            print(f"left for review ({x['job']}/held, {x['total']} changes): {held['message']}")
    sets = r.second_night["per_set"]
    print("second night: " + ", ".join(f"{k} {v['changes']}" for k, v in sets.items()))
    for source, ops in r.second_night["by_source_op"].items():
        print(f"  {source}: " + ", ".join(f"{op} {n}" for op, n in ops.items()))
    if ma.get("wrong"):
        print(
            "wrong merges (labelled, ours included): "
            + ", ".join(
                f"{w['a_id']}/{w['b_id']} hid {w['hidden']} {'/'.join(w['labels'])}" for w in ma["wrong"]
            )
        )
    print("contradiction pairs by rule: " + ", ".join(f"{k} {v}" for k, v in c["by_rule"].items()))
    if c["flagged_gold_labels"]:
        print("flagged labelled pairs: " + ", ".join(f"{k} {v}" for k, v in c["flagged_gold_labels"].items()))
    print(
        "step seconds: "
        + ", ".join(f"{k.split(': ', 1)[1].split(' (')[0]} {v}" for k, v in r.seconds.items())
    )


def provenance(config: Config, embedder: Embedder) -> dict[str, Any]:
    import engram_pipelines

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {
        "repo": str(REPO),
        "engram_pipelines": str(Path(engram_pipelines.__file__).parent),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--porcelain", "--", "engram_pipelines", "assets").splitlines(),
        "config_fingerprint": config.fingerprint(),
        "embedder": embedder.name,
    }


def warn_overrides(config_path: str | None) -> None:
    names = [*ENV_OVERRIDES, *ENV_SECONDS_TO_DAYS, "ENGRAM_CONFIG"]
    active = [n for n in names if n in os.environ]
    if config_path or active or Path("engram.yaml").exists():
        print(
            f"warning: not the default config: {config_path or ''} {' '.join(active)} "
            f"{'./engram.yaml' if Path('engram.yaml').exists() else ''}".rstrip()
        )


@contextmanager
def workspace(
    keep: Path | None, corpus: str, config_path: str | None, log_level: str, as_of: dt.date
) -> Iterator[Workspace]:
    if keep is not None:
        root = keep / corpus
        if root.exists() and any(root.iterdir()):
            raise SystemExit(f"--keep: {root} is not empty (each run needs a fresh store)")
        root.mkdir(parents=True, exist_ok=True)
        yield Workspace(root, config_path, log_level, as_of)
        return
    root = Path(tempfile.mkdtemp(prefix=f"engram-quality-real-{corpus}-"))
    try:
        yield Workspace(root, config_path, log_level, as_of)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=None, help="locomo_dev folder")
    parser.add_argument("--corpus", choices=[*CORPORA, "both"], default="both")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--keep", type=Path, default=None, help="keep the stores and warehouses under DIR")
    parser.add_argument("--sample", type=int, default=100, help="semantic nodes sampled per corpus")
    parser.add_argument("--labels", type=Path, default=LABELS, help="hand labels of semantic nodes")
    parser.add_argument("--print-unlabelled", action="store_true", help="list sampled nodes without a label")
    parser.add_argument("--config", default=None, help="engram config YAML (default: the product's lookup)")
    parser.add_argument("--verbose", action="store_true", help="Dagster's INFO log lines")
    args = parser.parse_args()

    started = time.perf_counter()
    data_dir = args.data or default_data_dir()
    data = load_locomo(data_dir)
    config = load_config(args.config)
    warn_overrides(args.config)
    embedder = load_embedder(config.embeddings.embedder)
    origin = provenance(config, embedder)
    print(
        f"# quality on LoCoMo dev ({data_dir}), code {origin['engram_pipelines']} at {origin['commit']}"
        f"{' + local changes' if origin['dirty'] else ''}, embedder {embedder.name}"
    )
    labels = read_labels(args.labels)
    print(f"embedding {len(data.questions)} questions (categories {QA_CATEGORIES}) ...", flush=True)
    question_vectors = embed_in_batches(embedder, [q.text for q in data.questions])
    results = []
    for corpus in CORPORA if args.corpus == "both" else (args.corpus,):
        rows = corpus_rows(corpus, data)
        level = "INFO" if args.verbose else "WARNING"
        with workspace(args.keep, corpus, args.config, level, as_of_for(rows)) as ws:
            results.append(
                run_corpus(corpus, rows, data, ws, config, embedder, question_vectors, labels, args.sample)
            )
    for result in results:
        print_result(result)
    total = round(time.perf_counter() - started, 1)
    print(f"\ntotal {total}s")
    if args.print_unlabelled:
        print("\n# unlabelled sampled semantic nodes: <id to label>\t<node>\t<text>")
        for result in results:
            for node in result.unlabelled:
                print(f"{node['id']}\t{node['node']}\t{node['text']}")
    if args.json:
        payload = {
            **origin,
            "data": str(data_dir),
            "seconds": total,
            "labels": str(args.labels),
            "corpora": {
                r.corpus: {k: v for k, v in dataclasses.asdict(r).items() if k != "unlabelled"}
                for r in results
            },
        }
        args.json.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

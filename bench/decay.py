"""Benchmark decay scoring: N rows from Parquet with DuckDB, next to a per-row Python loop over a sample.

    .venv/bin/python bench/decay.py                 # 10M rows (generates /tmp/engram-decay-bench.parquet once)
    .venv/bin/python bench/decay.py --rows 1000000 --path /tmp/engram-decay-1m.parquet

Both methods compute the `engram` policy (seed 000) as of the same instant; the loop is the shape of the seeds'
services (one score per row in Python). DuckDB runs three ways: without the cue cache (every cue regex over every
row), with it cold (the first night) and warm (the next night, 1% of contents edited). The cold result must equal
the uncached one, and the warm scores are compared with the loop's on the sample, so the speed-up is for the same
answer. Then the `halflife` and `ebbinghaus` policies over the same rows (no content cues: the arithmetic and the
outputs alone). Rows/s for each; the aim is >= 5M rows/s for the nightly (warm) path.

The data: a unique content per row, 70-150 characters, a quarter of them with cue words, and
`score`/`stale` as the previous night's scoring left them, so only rows crossing the threshold in one day
transition. Files written by older versions of this script (8 repeated contents, `stale` at random) are
regenerated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.analyses.lifecycle.decay import CueCache, decay_scores  # noqa: E402
from engram_pipelines.config.model import Config  # noqa: E402
from engram_pipelines.core.records import TIMESTAMP  # noqa: E402

AS_OF = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)

# Contents are unique per row (a template, row-specific words and a ticket number), 60-150 characters, and a
# minority (4 of 16 templates, about a quarter of the rows) hold cue words: a store of 8 repeated 35-character
# strings, as earlier versions of this bench had, flattered string work and overstated the cue share.
TEMPLATES = [
    "User prefers {w} mode in the {w} editor and asked us to keep {w} settings",
    "The {w} team meets on {w} mornings to review {w} and {w} work",
    "{w} lives in {w} and works remotely with the {w} group",
    "Standup moved to {w}; {w} will host it while {w} is away",
    "Notes from the {w} sync: {w} owns the {w} migration, {w} reviews",
    "The {w} service reads its {w} settings from the {w} store at startup",
    "{w} asked for a summary of the {w} thread about {w} and {w}",
    "Reminder: rotate the {w} credentials for {w} before the {w} audit",
    "The {w} dashboard shows {w} usage per {w} and per {w}",
    "Prefers short answers about {w}; link the {w} docs when asked about {w}",
    "Meeting with {w} about the {w} budget and the {w} hiring plan",
    "Onboarding checklist for {w}: laptop, {w} access, {w} channel, {w} buddy",
    "We decided to move the {w} API to {w} after the {w} review",
    "Incident: the nightly {w} import failed with an error in the {w} step",
    "Release of {w} ships on {w}; the deadline is firm per {w}",
    "Bug in the {w} retry loop of the {w} uploader, reported by {w}",
]
# Filler words: none starts with a cue word, so only the templates above carry cues.
WORDS = np.array(
    [
        "alpha",
        "amber",
        "apollo",
        "aspen",
        "atlas",
        "aurora",
        "basil",
        "beacon",
        "birch",
        "blue",
        "bramble",
        "breeze",
        "cedar",
        "citrus",
        "clover",
        "cobalt",
        "comet",
        "coral",
        "cosmos",
        "crimson",
        "cypress",
        "dahlia",
        "delta",
        "ember",
        "falcon",
        "fern",
        "fjord",
        "flint",
        "forest",
        "garnet",
        "ginger",
        "glacier",
        "granite",
        "harbor",
        "hazel",
        "heron",
        "indigo",
        "iris",
        "ivory",
        "jade",
        "jasmine",
        "juniper",
        "kestrel",
        "lagoon",
        "laurel",
        "lemon",
        "lilac",
        "linen",
        "lotus",
        "lunar",
        "magnet",
        "maple",
        "marble",
        "meadow",
        "mercury",
        "mist",
        "monday",
        "nebula",
        "nickel",
        "north",
        "oak",
        "ocean",
        "olive",
        "onyx",
        "orbit",
        "orchid",
        "pebble",
        "pepper",
        "pine",
        "pixel",
        "plum",
        "polar",
        "poplar",
        "quartz",
        "rain",
        "raven",
        "reef",
        "river",
        "robin",
        "ruby",
        "saffron",
        "sage",
        "sapphire",
        "sierra",
        "silver",
        "slate",
        "sparrow",
        "spruce",
        "storm",
        "summit",
        "sunday",
        "thistle",
        "thunder",
        "topaz",
        "tulip",
        "tundra",
        "umber",
        "valley",
        "velvet",
        "violet",
        "willow",
        "winter",
        "zephyr",
        "zinc",
        "friday",
        "tuesday",
        "berlin",
        "lisbon",
        "oslo",
        "nairobi",
        "quito",
        "kyoto",
        "alice",
        "bob",
        "carol",
        "dave",
        "erin",
        "frank",
        "grace",
        "heidi",
        "ivan",
        "judy",
        "mallory",
        "niaj",
        "olivia",
        "peggy",
        "rupert",
        "sybil",
        "trent",
        "victor",
        "walter",
        "oauth2",
        "grpc",
        "kafka",
        "postgres",
        "redis",
        "sqlite",
        "parquet",
        "duckdb",
        "dagster",
        "python",
        "rust",
        "golang",
    ]
)


def _contents(rng: np.random.Generator, first: int, n: int) -> pa.Array:
    """Unique contents: a template filled with random words, plus the row's ticket number (all in Arrow)."""
    which = rng.integers(0, len(TEMPLATES), n)
    out = pa.nulls(n, pa.string()).fill_null("")
    for t, template in enumerate(TEMPLATES):
        pieces = template.split("{w}")
        parts: list[pa.Array | str] = [pieces[0]]
        for piece in pieces[1:]:
            parts += [pa.array(WORDS[rng.integers(0, len(WORDS), n)]), piece]
        filled = pc.binary_join_element_wise(*parts, "")
        out = pc.if_else(pa.array(which == t), filled, out)
    # Half the rows carry a follow-up clause, so lengths spread over about 70-150 characters.
    words = [pa.array(WORDS[rng.integers(0, len(WORDS), n)]) for _ in range(3)]
    tail = pc.binary_join_element_wise(
        ". Follow up with ", words[0], " about ", words[1], " next ", words[2], ""
    )
    tail = pc.if_else(pa.array(rng.random(n) < 0.5), tail, "")
    ticket = pc.cast(pa.array(np.arange(first, first + n)), pa.string())
    return pc.binary_join_element_wise(out, tail, " (ticket ", ticket, ")", "")


# Written into the file's metadata: a file from another generator version is regenerated, not reused.
GENERATOR_KEY, GENERATOR = b"engram_decay_bench", b"3"


def _current(path: Path, rows: int) -> bool:
    if not path.exists():
        return False
    meta = pq.ParquetFile(path)
    return (
        meta.metadata.num_rows == rows and (meta.schema_arrow.metadata or {}).get(GENERATOR_KEY) == GENERATOR
    )


def generate(path: Path, rows: int, config: Config, seed: int = 1) -> None:
    """Write `rows` memories; `score`/`stale` are what the previous night left (decay as of AS_OF - 1 day), so
    the rows that transition tonight are those crossing the threshold in one day, as in a real store."""
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("namespace", pa.string()),
            ("kind", pa.string()),
            ("content", pa.string()),
            ("importance", pa.float64()),
            ("score", pa.float64()),
            ("access_count", pa.int64()),
            ("last_accessed_at", TIMESTAMP),
            ("created_at", TIMESTAMP),
            ("pinned", pa.bool_()),
            ("stale", pa.bool_()),
            ("tags", pa.string()),
        ]
    )
    base = int(AS_OF.timestamp() * 1e6)
    schema = schema.with_metadata({GENERATOR_KEY: GENERATOR})
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            created = base - rng.integers(0, 200 * 86_400_000_000, n)
            has_access = rng.random(n) < 0.6
            accessed = np.where(has_access, created + (base - created) * rng.random(n), 0).astype(np.int64)
            ids = pc.binary_join_element_wise(
                "m", pc.utf8_lpad(pc.cast(pa.array(np.arange(start, start + n)), pa.string()), 9, "0"), ""
            )
            table = pa.table(
                {
                    "id": ids,
                    "namespace": pa.array(np.char.add("ns", (rng.integers(0, 100, n)).astype(str))),
                    "kind": pa.array(np.where(rng.random(n) < 0.01, "block", "episodic")),
                    "content": _contents(rng, start, n),
                    "importance": pa.array(rng.random(n)),
                    "score": pa.nulls(n, pa.float64()),
                    "access_count": pa.array(np.where(has_access, rng.integers(1, 30, n), 0)),
                    "last_accessed_at": pa.array(accessed, type=pa.int64(), mask=~has_access).cast(TIMESTAMP),
                    "created_at": pa.array(created, type=pa.int64()).cast(TIMESTAMP),
                    "pinned": pa.array(rng.random(n) < 0.02),
                    "stale": pa.array(np.zeros(n, dtype=bool)),
                    "tags": pa.array(np.where(rng.random(n) < 0.1, '["critical"]', "[]")),
                },
                schema=schema,
            )
            # The previous night's scoring, once per chunk (rows are independent): its score and stale mark.
            yesterday = decay_scores(table, config, AS_OF - dt.timedelta(days=1))
            table = table.set_column(5, "score", yesterday["score"]).set_column(
                10, "stale", yesterday["stale_after"]
            )
            writer.write_table(table.cast(schema))


def loop_score(row: dict, config: Config) -> float | None:
    """The per-row method: the engram policy in plain Python, one row at a time."""
    p = config.decay.engram
    if row["kind"] == "block":
        return None
    last = row["last_accessed_at"] or row["created_at"]
    age = max(0.0, (AS_OF - last).total_seconds() / 86400)
    recency = 1.0 if row["pinned"] else math.exp(-math.log(2) * age / p.half_life_days)
    text = row["content"].lower()
    cues = 0.0
    for rule in p.cues:
        if any(f" {w}" in f" {text}" for w in rule.words):
            cues += rule.weight
    tags = row["tags"]
    tag_cue = p.cue_tag_weight if any(f'"{t}"' in tags for t in p.cue_tags) else 0.0
    boost = min(p.access_boost_cap, p.access_boost_per_log2 * math.log2(row["access_count"] + 1))
    raw = (p.base + boost + cues + tag_cue + (p.pin_boost if row["pinned"] else 0.0)) * recency
    score = min(1.0, max(0.0, raw))
    return max(p.pinned_floor, score) if row["pinned"] else score


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--sample", type=int, default=200_000)
    parser.add_argument("--path", type=Path, default=Path("/tmp/engram-decay-bench.parquet"))
    args = parser.parse_args()
    config = Config()
    if not _current(args.path, args.rows):
        started = time.perf_counter()
        generate(args.path, args.rows, config)
        print(f"generated {args.rows:,} rows in {time.perf_counter() - started:.1f}s -> {args.path}")

    started = time.perf_counter()
    table = pq.read_table(args.path)
    read_s = time.perf_counter() - started
    timings: list[tuple[str, float]] = []

    def timed(label: str, run: Callable[[], pa.Table]) -> pa.Table:
        started = time.perf_counter()
        result = run()
        timings.append((label, time.perf_counter() - started))
        return result

    uncached = timed(
        "DuckDB decay_scores, no cue cache (every regex)", lambda: decay_scores(table, config, AS_OF)
    )
    with tempfile.TemporaryDirectory() as directory:
        cache = CueCache(Path(directory))
        cold = timed(
            "DuckDB decay_scores, cue cache cold (first night: every regex, cache written)",
            lambda: decay_scores(table, config, AS_OF, cue_cache=cache),
        )
        # The next night: 1% of the contents edited (their boosts must be recomputed), the rest as before.
        edited = rng_edit(table, fraction=0.01)
        warm = timed(
            "DuckDB decay_scores, cue cache warm (next night, 1% of contents edited)",
            lambda: decay_scores(edited, config, AS_OF, cue_cache=cache),
        )
        # The same call again: on a machine shared with other benchmarks, the spread of two identical calls
        # shows how far to trust one figure.
        timed(
            "the same warm call again, same process",
            lambda: decay_scores(edited, config, AS_OF, cue_cache=cache),
        )
        cache_mb = sum(f.stat().st_size for f in Path(directory).rglob("*.parquet")) / 1e6
    # The policies without content cues: the same query and outputs, no text read. Their rate against the
    # engram policy's says how much of a night's scoring is the cue boosts' text work. Each starts from the
    # marks its own scoring left the night before (untimed), as a store run under that policy would hold:
    # the engram policy's marks would make a million rows transition (a policy switch, not a night).
    for policy in ("halflife", "ebbinghaus"):
        other = Config.model_validate({"decay": {"policy": policy}})
        before = decay_scores(table, other, AS_OF - dt.timedelta(days=1))
        own = table.set_column(
            table.schema.get_field_index("stale"), "stale", before["stale_after"]
        ).set_column(table.schema.get_field_index("score"), "score", before["score"])
        del before
        timed(
            f"DuckDB decay_scores, policy {policy} (no content cues)",
            lambda c=other, t=own: decay_scores(t, c, AS_OF),
        )
        del own
    assert cold.equals(uncached), "the cold cached path must give the uncached result"

    sample = edited.slice(0, args.sample).to_pylist()
    started = time.perf_counter()
    loop = [loop_score(row, config) for row in sample]
    loop_s = time.perf_counter() - started
    head = warm.slice(0, args.sample * 2)
    ours = dict(zip(head["id"].to_pylist(), head["score"].to_pylist(), strict=True))
    diffs = [abs(ours[r["id"]] - s) for r, s in zip(sample, loop, strict=True) if s is not None]
    edited_in_sample = sum(r["content"].endswith(EDIT) for r in sample)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load = os.getloadavg()

    print(
        f"# decay benchmark, {dt.date.today()}, {platform.machine()} x {os.cpu_count()} cores, {args.rows:,} rows, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print("| method | rows | seconds | rows/s |")
    print("|---|---|---|---|")
    print(f"| Parquet read (pyarrow) | {args.rows:,} | {read_s:.2f} | {args.rows / read_s:,.0f} |")
    for label, seconds in timings:
        print(f"| {label} | {args.rows:,} | {seconds:.2f} | {args.rows / seconds:,.0f} |")
    print(f"| per-row Python loop (sample) | {len(sample):,} | {loop_s:.2f} | {len(sample) / loop_s:,.0f} |")
    warm_s = timings[2][1]  # the order of the timed() calls above
    print(
        f"\nwarm speed-up over the loop: {(args.rows / warm_s) / (len(sample) / loop_s):.0f}x; cold result == "
        f"uncached result; max |score difference| warm vs loop on the sample ({edited_in_sample:,} edited rows "
        f"in it): {max(diffs):.2e}; cue cache {cache_mb:,.0f} MB on disk; peak RSS {peak_mb:,.0f} MB"
    )


EDIT = " (edited: resolved)"


def rng_edit(table: pa.Table, fraction: float, seed: int = 2) -> pa.Table:
    """`table` with `fraction` of its contents edited (a cue word appended, so a stale cached boost would show)."""
    mask = pa.array(np.random.default_rng(seed).random(table.num_rows) < fraction)
    content = pc.if_else(mask, pc.binary_join_element_wise(table["content"], EDIT, ""), table["content"])
    return table.set_column(table.schema.get_field_index("content"), "content", content)


if __name__ == "__main__":
    main()

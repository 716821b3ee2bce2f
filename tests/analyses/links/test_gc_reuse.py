"""Link garbage collection that judges only what was written since finds what a judgement of every link finds."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.links.gc import garbage_links
from engram_pipelines.analyses.links.gc_reuse import gc_reusing
from engram_pipelines.warehouse.written import Written
from tests.support.lifecycle import AS_OF, snapshot
from tests.support.world import link, links_table

KEY = ("src_id", "dst_id", "kind")
KINDS = ("associated", "contradicts", "temporal", "derived-from")


def _written(ids: set[str], keys: set[tuple[str, str, str]], night: int, since: str | None = None) -> Written:
    ordered = sorted(keys)
    return Written(
        ids=pa.array(sorted(ids), pa.string()),
        link_keys=pa.table({name: [k[i] for k in ordered] for i, name in enumerate(KEY)}),
        marks=f"night {night}",
        since=f"night {night - 1}" if since is None else since,
    )


def _links(links: dict[tuple[str, str, str], dict]) -> pa.Table:
    return links_table([links[k] for k in sorted(links)])


def _link(src: str, dst: str, kind: str, namespace: str, created: dt.datetime) -> dict:
    return link(src, dst, kind, namespace=namespace, created_at=created, updated_at=created)


def test_findings_judged_from_what_was_written_equal_a_judgement_of_every_link(tmp_path: Path):
    rng = random.Random(7)
    ids = [f"m{i:02d}" for i in range(40)]
    rows = {i: {"id": i, "namespace": "ns1" if n % 3 else "ns2"} for n, i in enumerate(ids)}
    quarantined: set[str] = set()
    links: dict[tuple[str, str, str], dict] = {}

    def add_link(at: dt.datetime) -> tuple[str, str, str]:
        src = rng.choice([*ids, "gone1"])
        dst = rng.choice([*ids, "gone2"]) if rng.random() < 0.9 else src
        kind = rng.choice(KINDS)
        created = at - dt.timedelta(hours=rng.choice([1, 30, 200]))
        namespace = rows.get(src, {"namespace": "ns1"})["namespace"]
        links[(src, dst, kind)] = _link(src, dst, kind, namespace, created)
        if kind in ("associated", "contradicts") and rng.random() < 0.3:  # its twin, stated the other way
            links[(dst, src, kind)] = _link(dst, src, kind, namespace, created)
            return (dst, src, kind)
        return (src, dst, kind)

    for _ in range(120):
        add_link(AS_OF)
    judged_fewer = 0
    for night in range(7):
        at = AS_OF + dt.timedelta(days=night)
        written_ids: set[str] = set(rng.sample(ids, 2))  # a superset: writes that changed nothing
        written_keys: set[tuple[str, str, str]] = set(rng.sample(sorted(links), 2))
        if night:
            for _ in range(3):  # rows deleted, moved to the purge queue, moved to another namespace
                victim = rng.choice(ids)
                written_ids.add(victim)
                change = rng.random()
                if change < 0.3:
                    rows.pop(victim, None)
                elif change < 0.6 and victim in rows:
                    rows[victim]["zone"] = "purge_queue"
                elif victim in rows:
                    rows[victim]["namespace"] = "ns3"
            back = rng.choice(ids)  # restored, or quarantined, or out of quarantine
            written_ids.add(back)
            if back in quarantined:
                quarantined.discard(back)
            elif back in rows and rng.random() < 0.5:
                quarantined.add(back)
                rows.pop(back)
            else:
                rows[back] = {"id": back, "namespace": "ns1"}
            for _ in range(6):
                written_keys.add(add_link(at))
            for key in rng.sample(sorted(links), 4):  # deleted, among them last night's findings
                del links[key]
                written_keys.add(key)
            # A symmetric link gets a twin older than itself (a revert, a sync): the link, not written, is the
            # duplicate now.
            single = [
                k
                for k in sorted(links)
                if k[2] in ("associated", "contradicts")
                and k[:2][::-1] + (k[2],) not in links
                and k[0] != k[1]
            ]
            src, dst, kind = rng.choice(single)
            older = links[(src, dst, kind)]["created_at"] - dt.timedelta(hours=1)
            links[(dst, src, kind)] = _link(dst, src, kind, links[(src, dst, kind)]["namespace"], older)
            written_keys.add((dst, src, kind))
        # A link to nothing created after tonight's instant (the night runs after its day): not judged tonight,
        # an orphan tomorrow although nothing writes it again.
        late = at + dt.timedelta(hours=2)
        links[(ids[night], f"gone-{night}", "temporal")] = _link(
            ids[night], f"gone-{night}", "temporal", "ns1", late
        )
        written_keys.add((ids[night], f"gone-{night}", "temporal"))
        memories = snapshot(list(rows.values()))
        table = _links(links)
        held = pa.table({"id": pa.array(sorted(quarantined), pa.string())})
        everything = garbage_links(memories, table, at, quarantined=held)
        reused = gc_reusing(
            memories,
            table,
            at,
            quarantined=held,
            written=_written(written_ids, written_keys, night),
            cache_root=tmp_path,
        )
        assert reused.result.table.equals(everything.table), f"night {night}"
        assert reused.result.intents.equals(everything.intents), f"night {night}"
        judged_fewer += reused.judged < table.num_rows
        # Last night's findings did not all land: half of them stay in the store.
        for row in everything.table.to_pylist()[::2]:
            links.pop((row["src_id"], row["dst_id"], row["kind"]), None)
            written_keys.add((row["src_id"], row["dst_id"], row["kind"]))
    assert judged_fewer >= 5, "the later nights should judge fewer links than all"


def test_every_link_is_judged_when_the_kept_findings_are_not_of_last_nights_snapshot(tmp_path: Path):
    memories = snapshot([{"id": "a"}, {"id": "b"}])
    table = _links(
        {
            ("a", "b", "associated"): link("a", "b", "associated"),
            ("a", "gone", "temporal"): link("a", "gone", "temporal"),
        }
    )
    first = gc_reusing(
        memories,
        table,
        AS_OF,
        quarantined=pa.table({"id": pa.array([], pa.string())}),
        written=_written(set(), set(), 1),
        cache_root=tmp_path,
    )
    assert first.judged == 2  # nothing kept yet
    nothing = pa.table({"id": pa.array([], pa.string())})
    for since, at, judged in (
        ("night 1", AS_OF + dt.timedelta(days=1), 1),  # last night's: only its finding is judged again
        ("night 0", AS_OF + dt.timedelta(days=2), 2),  # a snapshot between: another base
    ):
        again = gc_reusing(
            memories,
            table,
            at,
            quarantined=nothing,
            written=_written(set(), set(), 2, since=since),
            cache_root=tmp_path,
        )
        assert again.judged == judged
        assert again.result.table.equals(first.result.table)
    replay = gc_reusing(
        memories,
        table,
        AS_OF - dt.timedelta(days=1),
        quarantined=nothing,
        written=_written(set(), set(), 3, since="night 2"),
        cache_root=tmp_path,
    )
    assert replay.judged == 2  # an earlier day than the kept one: judged whole
    whole = gc_reusing(
        memories,
        table,
        AS_OF + dt.timedelta(days=3),
        quarantined=nothing,
        written=_written(set(), set(), 4, since=""),
        cache_root=tmp_path,
    )
    assert whole.judged == 2  # a full read: nothing to go by

"""Work computed once per distinct content, across nights."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.core.digests import content_sha
from engram_pipelines.warehouse.content_cache import ContentCache, computed_by_content


def test_each_distinct_content_is_computed_once_and_results_follow_the_input_rows(tmp_path):
    computed: list[list[str]] = []

    def lengths(texts: list[str]) -> pa.Table:
        computed.append(texts)
        return pa.table({"length": pa.array([len(t) for t in texts], pa.int64())})

    cache = ContentCache(tmp_path / "lengths")
    first = computed_by_content(["abc", None, "abc", "hello"], lengths, cache)
    assert first["length"].to_pylist() == [3, 0, 3, 5]
    assert sorted(computed[0]) == ["", "abc", "hello"]
    # The next night: only the new text is computed; the known ones come from the cache, in the input's order.
    again = computed_by_content(["hello", "new text", "abc"], lengths, ContentCache(tmp_path / "lengths"))
    assert again["length"].to_pylist() == [5, 8, 3] and computed[1] == ["new text"]
    # Without a cache everything is computed, once per distinct content.
    assert computed_by_content(["x", "x"], lengths, None)["length"].to_pylist() == [1, 1] and computed[2] == [
        "x"
    ]


def test_an_arrow_column_is_keyed_and_computed_as_its_python_strings(tmp_path):
    """The keys are `content_sha` of each text (caches written before keep answering), whether the contents
    come as Python strings or as an Arrow column in several chunks, non-ASCII text included."""
    texts = ["café au lait", None, "naïve", "café au lait", ""]

    def lengths(batch: list[str]) -> pa.Table:
        return pa.table({"length": pa.array([len(t) for t in batch], pa.int64())})

    column = pa.chunked_array([pa.array(texts[:2], pa.string()), pa.array(texts[2:], pa.string())])
    from_arrow = computed_by_content(column, lengths, ContentCache(tmp_path / "arrow"))
    assert from_arrow.equals(computed_by_content(texts, lengths, ContentCache(tmp_path / "python")))
    assert from_arrow["length"].to_pylist() == [12, 0, 5, 12, 0]
    stored = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "arrow").glob("*.parquet")))
    assert sorted(stored["sha"].to_pylist()) == sorted({content_sha(t or "") for t in texts})


def test_a_key_two_parts_hold_is_found_once(tmp_path):
    """Two shard steps that computed the same new content at once each wrote a part holding it: a lookup
    still answers one row per key (and a lookup of disjoint parts answers every key found)."""
    cache = ContentCache(tmp_path / "lengths")
    cache.add(pa.table({"sha": ["a", "b"], "length": pa.array([1, 2], pa.int64())}))
    cache.add(pa.table({"sha": ["b", "c"], "length": pa.array([2, 3], pa.int64())}))
    found = cache.lookup(["a", "b", "c", "d"])
    assert found is not None
    assert sorted(found.to_pylist(), key=lambda r: r["sha"]) == [
        {"sha": "a", "length": 1},
        {"sha": "b", "length": 2},
        {"sha": "c", "length": 3},
    ]
    only = cache.lookup(["a", "c"])
    assert only is not None and sorted(only["sha"].to_pylist()) == ["a", "c"]


def test_a_narrow_lookup_answers_its_columns_and_the_cache_keeps_every_column(tmp_path):
    """With `columns`, only those are answered (and read from the parts); what is computed is still kept
    whole, so a later lookup of other columns finds it without computing it again."""
    computed: list[list[str]] = []

    def measures(texts: list[str]) -> pa.Table:
        computed.append(texts)
        return pa.table(
            {
                "length": pa.array([len(t) for t in texts], pa.int64()),
                "upper": pa.array([t.upper() for t in texts], pa.string()),
            }
        )

    cache = ContentCache(tmp_path / "measures")
    narrow = computed_by_content(["bb", "a", "bb"], measures, cache, columns=["length"])
    assert narrow.column_names == ["length"] and narrow["length"].to_pylist() == [2, 1, 2]
    found = cache.lookup([content_sha("a")])
    assert found is not None and found.column_names == ["sha", "length", "upper"]
    other = computed_by_content(["ccc", "a"], measures, cache, columns=["upper"])
    assert other.column_names == ["upper"] and other["upper"].to_pylist() == ["CCC", "A"]
    assert [sorted(texts) for texts in computed] == [["a", "bb"], ["ccc"]]
    only = cache.lookup([content_sha("a"), content_sha("ccc")], ["upper"])
    assert only is not None and only.column_names == ["sha", "upper"]

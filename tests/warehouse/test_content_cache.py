"""Work computed once per distinct content, across nights."""

from __future__ import annotations

import pyarrow as pa

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

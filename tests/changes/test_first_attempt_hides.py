"""Whether a change hides its row, read from its ops where they decide it (`hides_by_ops`, the apply's first
attempt): the same answer as its intents give, for every op and both directions of a move."""

from __future__ import annotations

import itertools

from engram_pipelines.changes.apply import _first_attempt_hides
from engram_pipelines.changes.intents import Intent, Op, hides
from engram_pipelines.core import jsontext


def _change(op: str, intents: list[Intent]) -> dict[str, object]:
    return {
        "op": op,
        "ops": [i.op for i in intents],
        "intents": jsontext.dumps(
            [{"op": i.op, "params": i.params, "reason": "", "source": "t"} for i in intents]
        ),
    }


def test_hides_from_the_ops_is_hides_from_the_intents() -> None:
    candidates = [Intent(op, {}) for op in Op if op != Op.MOVE_ZONE]
    candidates += [Intent(Op.MOVE_ZONE, {"to": zone}) for zone in ("active", "archive", "purge_queue")]
    for size in (1, 2):
        for intents in itertools.combinations(candidates, size):
            change = _change("update", list(intents))
            assert _first_attempt_hides(change) == hides(list(intents)), [i.op for i in intents]
    assert _first_attempt_hides(_change("delete", [Intent(Op.PURGE, {})]))

"""The contradiction rules written plainly for one pair (`rule_for_pair`): the readable reference the tests
hold the vectorised `detect` to, and the per-pair baseline of bench/contradictions.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_pipelines.analyses.contradictions.rules import RuleBook


def _values_compatible(older: Mapping[str, Any], newer: Mapping[str, Any]) -> bool:
    """Same value, or one value's tokens contained in the other's (an elaboration)."""
    if older["value"] == newer["value"]:
        return True
    a, b = set(older["value_tokens"]), set(newer["value_tokens"])
    return a <= b or b <= a


def _opposite_poles(
    older: Mapping[str, Any], newer: Mapping[str, Any], rules: RuleBook
) -> tuple[str, str] | None:
    def sides(row: Mapping[str, Any]) -> dict[int, set[int]]:
        found: dict[int, set[int]] = {}
        for label in row["poles"]:
            for pair, side in rules.poles_of_label.get(label, ()):
                found.setdefault(pair, set()).add(side)
        return found

    older_sides, newer_sides = sides(older), sides(newer)
    for pair in sorted(older_sides.keys() & newer_sides.keys()):
        o, n = older_sides[pair], newer_sides[pair]
        if len(o) == 1 and len(n) == 1 and o != n:
            labels = rules.pair_labels[pair]
            return labels[next(iter(o))], labels[next(iter(n))]
    return None


def rule_for_pair(
    older: Mapping[str, Any], newer: Mapping[str, Any], rules: RuleBook, explicit: bool = False
) -> tuple[str, str] | None:
    """(rule, reason) for one pair of `memory_row` dicts, or None. Slow; `detect` does the same in bulk."""
    found = _heuristic_rule(older, newer, rules)
    if found is None and explicit:
        return "explicit", "explicit: metadata link"
    return found


def _claim_key(row: Mapping[str, Any]) -> tuple[str, str] | None:
    return None if row["subject"] is None else (row["subject"], row["relation"])


def _guarded(older: Mapping[str, Any], newer: Mapping[str, Any]) -> bool:
    """The never-fires cases: a pronoun subject, two different claims, two denials, two changes, and an
    utterance that does not make the other row's claim."""
    different_claims = None not in (_claim_key(older), _claim_key(newer)) and _claim_key(older) != _claim_key(
        newer
    )
    same_claim = _claim_key(older) is not None and _claim_key(older) == _claim_key(newer)
    return (
        older["pronoun_subject"]
        or newer["pronoun_subject"]
        or different_claims
        or (older["negated"] and newer["negated"])
        or (older["change_word"] and newer["change_word"])
        or ((older["utterance"] or newer["utterance"]) and not same_claim)
    )


def _heuristic_rule(
    older: Mapping[str, Any], newer: Mapping[str, Any], rules: RuleBook
) -> tuple[str, str] | None:
    if _guarded(older, newer):
        return None
    same_claim = _claim_key(older) is not None and _claim_key(older) == _claim_key(newer)
    compatible = same_claim and _values_compatible(older, newer)
    same_slot = same_claim and older["single_valued"] and newer["single_valued"]
    unnegated = not (older["negated"] or newer["negated"])
    same_frame = older["quantity_key"] is not None and older["quantity_key"] == newer["quantity_key"]
    # Without a shared claim, a denial must deny what the other row says (the rest of one sentence contained in
    # the other's), and a change must keep most of the other row's words: on real facts about people, a
    # negation or a "started" anywhere in a similar sentence was a different fact, not a conflict.
    if older["negated"] != newer["negated"] and (
        compatible if same_claim else _content_contained(older, newer)
    ):
        side, cue = ("newer", newer["negation_cue"]) if newer["negated"] else ("older", older["negation_cue"])
        return "negation", f"negation: only the {side} row is negated ('{cue}')"
    if (
        newer["change_word"]
        and not compatible
        and (same_slot or (not same_claim and _content_overlap(older, newer)))
    ):
        return "change", f"change: the newer row says '{newer['change_cue']}'"
    poles = _opposite_poles(older, newer, rules)
    if poles and _content_contained(older, newer):
        return "polar", f"polar: '{poles[0]}' vs '{poles[1]}'"
    if same_slot and not compatible and unnegated and not same_frame:
        return "value_swap", f"value swap: {newer['claim_label']} '{older['value']}' vs '{newer['value']}'"
    if not (same_frame and unnegated):
        return None
    label = newer["quantity_label"]
    if older["numbers"] != newer["numbers"]:
        return "numeric", f"numeric: {label} '{older['numbers_text']}' vs '{newer['numbers_text']}'"
    maybe_same_day = older["temporals_loose"] == newer["temporals_loose"] and (
        older["yearless_date"] or newer["yearless_date"]
    )
    if older["temporals"] != newer["temporals"] and not maybe_same_day:
        return "temporal", f"temporal: {label} '{older['temporals_text']}' vs '{newer['temporals_text']}'"
    return None


def _content_contained(older: Mapping[str, Any], newer: Mapping[str, Any]) -> bool:
    a, b = set(older["content_tokens"]), set(newer["content_tokens"])
    return a <= b or b <= a


def _content_overlap(older: Mapping[str, Any], newer: Mapping[str, Any]) -> bool:
    """The two rows share at least half the content words of the longer one."""
    a, b = set(older["content_tokens"]), set(newer["content_tokens"])
    return 2 * len(a & b) >= max(len(a), len(b))

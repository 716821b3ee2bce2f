"""Contradiction detection over candidate pairs (seed 000 "Contradiction policy", issue 6).

Deterministic and lexical, no model. Each memory is parsed ONCE into features (`memory_features`): a negation
flag, a change-indicator flag, the polar words present, a claim (subject, relation, value) where an arrangement
(a plan for a named occasion on a coming weekday), relational, copular or assignment pattern applies, and its numbers, clock times and dates. `detect` then evaluates the
rules over pairs with a few vectorised comparisons of those per-memory columns, so its cost per pair does not
depend on sentence length or on how many words the rule file lists.

Rules, in order; the first that fires gives `rule` and `reason` (values read older -> newer):

1. negation: exactly one side negated ("not", "n't", "never", "no longer", ...), and it denies what the other
   says: the same claim with the same (or an elaborated) value, or, without a shared claim, the rest of one
   sentence contained in the other ("Alice lives in Berlin" vs "Alice doesn't live in Paris" is consistent).
2. change: a change indicator ("switched to", "now", "no longer", ...) in the newer row and not in the older,
   about the same single-valued slot with another value ("I use vim" -> "I switched to emacs"), or, without a
   shared claim, with at least half the longer row's content words in common. Not when both are the same claim
   with the same (or an elaborated) value ("I use vim" -> "I now use vim").
3. polar: one side has only the first pole of a pair (like, enable, ...) and the other only the second
   (dislike, disable, ...), and the rest of one sentence is contained in the rest of the other.
4. value_swap: the same single-valued slot on both sides (relational "X prefers|uses|lives in|works at ... Y";
   copular "X is Y" and assignment "X = Y" / "X: Y" only for a slot subject such as "my editor" or "favorite
   color", or a value that starts with a number; short values only), values that differ and neither a token
   subset of the other ("vim" vs "vim with plugins" is elaboration). What a person is, does, likes or feels is
   many-valued and never swaps. Quantity-only differences are left to the next two rules.
5. numeric / 6. temporal: the same claim (or, without a claim, the same sentence) with every number, clock time
   and date replaced by a placeholder, and different numbers ("5 people" vs "7 people") or times/dates
   ("9am" vs "10am"; "March 3" is any year's, so it never contradicts "2026-03-03"). Only a claim's value is
   scanned: a number in its subject names a thing ("room 5 is free" vs "room 7 is free").
7. explicit: the pair carries `explicit = true` (from `metadata.contradicts`, see `explicit_candidates`).
   Reported only when no heuristic fired, and exempt from the guards: a person or agent asserted it.

Guards (rules 1-6 never fire): either subject is only a pronoun ("this is fine" vs "this is terrible"), both
sides parse into claims with different subjects or relations, both sides are negated (two denials assert no
value), both sides carry a change word (two reported changes: "switched to vim" vs "switched to emacs" is left
to review, not flagged), or a transcript line ("Speaker: text", an utterance: its claims are the speaker's)
does not make the other row's claim. Value-swap and quantity rules also need both sides
unnegated; identical and elaborated values are handled per rule above.

Word lists and patterns live in data/contradiction_rules.yaml; `load_rules(path)` reads a user's own copy.
Candidates: the cosine band (the caller's), `structural_candidates` (same parsed subject and relation, any
cosine) and `explicit_candidates` (metadata links).

Where the parts live: the rule book (`rules.py`), per-memory parsing (`features.py`), the same rules written
plainly for one pair (`reference.py`, `rule_for_pair`: what the tests hold `detect` to, and the per-pair
baseline of bench/contradictions.py), candidates beyond the cosine band (`candidates.py`), this module's
vectorised evaluation over pairs, and the policy's intents (`policy.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.contradictions.rules import RULE_ORDER, RuleBook

DETECT_COLUMNS = ("left_id", "right_id", "newer_id", "older_id", "rule", "reason")


@dataclass(frozen=True)
class _TokenLists:
    """A list<string> column as CSR arrays of integer token codes (one vocabulary per column)."""

    offsets: np.ndarray  # int64, n + 2 (a trailing empty list for the missing-memory sentinel)
    codes: np.ndarray  # int64
    vocabulary: int

    @classmethod
    def of(cls, column: pa.ChunkedArray | pa.Array) -> _TokenLists:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths), [lengths.sum()]]).astype(np.int64)
        flat = pc.list_flatten(array)
        encoded = pc.dictionary_encode(flat)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        return cls(offsets, codes, max(len(encoded.dictionary), 1))

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in `rows`, token code) of every token of the listed memories."""
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        owner = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
        first_of_owner = np.repeat(np.cumsum(lengths) - lengths, lengths)
        positions = np.repeat(starts, lengths) + (np.arange(len(owner), dtype=np.int64) - first_of_owner)
        return owner, self.codes[positions]

    def contained(self, inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
        """Per pair: is every token of memory `inner[i]` among the tokens of memory `outer[i]`?"""
        return self.misses(inner, outer) == 0

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        return self.offsets[rows + 1] - self.offsets[rows]

    def misses(self, inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
        """Per pair: how many tokens of memory `inner[i]` are not among the tokens of memory `outer[i]`."""
        if len(inner) == 0:
            return np.zeros(0, dtype=np.int64)
        outer_owner, outer_codes = self.gather(outer)
        inner_owner, inner_codes = self.gather(inner)
        outer_keys = np.sort(outer_owner * self.vocabulary + outer_codes)
        inner_keys = inner_owner * self.vocabulary + inner_codes
        found = np.searchsorted(outer_keys, inner_keys)
        hit = np.zeros(len(inner_keys), dtype=bool)
        in_range = found < len(outer_keys)
        hit[in_range] = outer_keys[found[in_range]] == inner_keys[in_range]
        return np.bincount(inner_owner[~hit], minlength=len(inner))


@dataclass(frozen=True)
class _MemoryArrays:
    """Feature columns as numpy arrays; index n is a sentinel for pair ids missing from the features."""

    size: int
    negated: np.ndarray
    change: np.ndarray
    pronoun: np.ndarray
    utterance: np.ndarray
    single_valued: np.ndarray
    subject: np.ndarray  # int codes, -1 = no claim
    relation: np.ndarray
    value: np.ndarray
    quantity_key: np.ndarray
    numbers: np.ndarray
    temporals: np.ndarray
    temporals_loose: np.ndarray
    yearless: np.ndarray
    first_pole_only: np.ndarray  # (n + 1, words) uint64: bit k = only the first side of polar pair k
    second_pole_only: np.ndarray
    value_tokens: _TokenLists
    content_tokens: _TokenLists

    @classmethod
    def of(cls, features: pa.Table, rules: RuleBook) -> _MemoryArrays:
        first, second = _pole_masks(features["poles"], rules)
        return cls(
            size=features.num_rows,
            negated=_flags(features["negated"]),
            change=_flags(features["change_word"]),
            pronoun=_flags(features["pronoun_subject"]),
            utterance=_flags(features["utterance"]),
            single_valued=_flags(features["single_valued"]),
            subject=_codes(features["subject"]),
            relation=_codes(features["relation"]),
            value=_codes(features["value"]),
            quantity_key=_codes(features["quantity_key"]),
            numbers=_codes(features["numbers"]),
            temporals=_codes(features["temporals"]),
            temporals_loose=_codes(features["temporals_loose"]),
            yearless=_flags(features["yearless_date"]),
            first_pole_only=first,
            second_pole_only=second,
            value_tokens=_TokenLists.of(features["value_tokens"]),
            content_tokens=_TokenLists.of(features["content_tokens"]),
        )


def _flags(column: pa.ChunkedArray) -> np.ndarray:
    values = pc.fill_null(column, False).to_numpy(zero_copy_only=False).astype(bool)
    return np.append(values, False)


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """Equal strings -> equal integer codes; null -> -1 (never equal to anything once guarded)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.append(codes, -1)


def _pole_masks(poles: pa.ChunkedArray, rules: RuleBook) -> tuple[np.ndarray, np.ndarray]:
    """Bit sets per memory: which polar pairs it takes only the first side of, and only the second."""
    words = max(1, math.ceil(rules.polar_pair_count / 64))
    size = len(poles)
    sides = np.zeros((2, size + 1, words), dtype=np.uint64)
    array = poles.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    encoded = pc.dictionary_encode(pc.list_flatten(array))
    label_codes = encoded.indices.to_numpy(zero_copy_only=False)
    owners = np.repeat(np.arange(size), lengths)
    for code, label in enumerate(encoded.dictionary.to_pylist()):
        holders = owners[label_codes == code]
        for pair, side in rules.poles_of_label.get(label, ()):
            sides[side, holders, pair // 64] |= np.uint64(1) << np.uint64(pair % 64)
    return sides[0] & ~sides[1], sides[1] & ~sides[0]


def _row_index(ids: pa.ChunkedArray, feature_ids: pa.ChunkedArray, missing: int) -> np.ndarray:
    found = pc.index_in(ids, value_set=feature_ids.combine_chunks())
    return pc.fill_null(found, missing).to_numpy(zero_copy_only=False).astype(np.int64)


def _epoch_micros(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        return pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())
    if pa.types.is_date(column.type):
        return pc.cast(pc.cast(column, pa.timestamp("us")), pa.int64())
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        return column
    return pc.cast(pc.cast(column, pa.timestamp("us")), pa.int64())


def _right_is_newer(pairs: pa.Table) -> np.ndarray:
    """The newer row by created_at; a tie or a missing left time makes the right side newer."""
    for name in ("left_created_at", "right_created_at"):
        if name not in pairs.column_names:
            raise ValueError(f"detect: pairs need a {name!r} column to tell the newer row")
    left, right = _epoch_micros(pairs["left_created_at"]), _epoch_micros(pairs["right_created_at"])
    newer = pc.if_else(
        pc.is_null(left), True, pc.if_else(pc.is_null(right), False, pc.greater_equal(right, left))
    )
    return newer.to_numpy(zero_copy_only=False).astype(bool)


@dataclass
class _PairMasks:
    """The rule masks over all pairs, older/newer oriented."""

    negation: np.ndarray
    change: np.ndarray
    polar: np.ndarray
    value_swap: np.ndarray
    numeric: np.ndarray
    temporal: np.ndarray
    explicit: np.ndarray


def _values_compatible_mask(
    m: _MemoryArrays, older: np.ndarray, newer: np.ndarray, same_claim: np.ndarray
) -> np.ndarray:
    """Same claim and the same value or one value contained in the other; subset checks only where needed."""
    compatible = same_claim & (m.value[older] == m.value[newer])
    todo = np.flatnonzero(same_claim & ~compatible)
    if len(todo):
        o, n = older[todo], newer[todo]
        compatible[todo] = m.value_tokens.contained(o, n) | m.value_tokens.contained(n, o)
    return compatible


def _opposite_pole_mask(m: _MemoryArrays, older: np.ndarray, newer: np.ndarray) -> np.ndarray:
    opposite = np.zeros(len(older), dtype=bool)
    for word in range(m.first_pole_only.shape[1]):
        bits = (m.first_pole_only[older, word] & m.second_pole_only[newer, word]) | (
            m.second_pole_only[older, word] & m.first_pole_only[newer, word]
        )
        opposite |= bits != 0
    return opposite


def _rule_masks(
    m: _MemoryArrays, older: np.ndarray, newer: np.ndarray, known: np.ndarray, explicit: np.ndarray
) -> _PairMasks:
    subject_o, subject_n = m.subject[older], m.subject[newer]
    both_claims = (subject_o >= 0) & (subject_n >= 0)
    same_claim = both_claims & (subject_o == subject_n) & (m.relation[older] == m.relation[newer])
    neg_o, neg_n = m.negated[older], m.negated[newer]
    both_changed = m.change[older] & m.change[newer]
    utterance = (m.utterance[older] | m.utterance[newer]) & ~same_claim
    open_ = known & ~(
        m.pronoun[older]
        | m.pronoun[newer]
        | (both_claims & ~same_claim)
        | (neg_o & neg_n)
        | both_changed
        | utterance
    )
    compatible = _values_compatible_mask(m, older, newer, same_claim)
    same_slot = same_claim & m.single_valued[older] & m.single_valued[newer]
    unnegated = ~neg_o & ~neg_n
    key_o = m.quantity_key[older]
    same_quantity_key = (key_o >= 0) & (key_o == m.quantity_key[newer])

    # Rows whose content words one rule needs compared (the lexical checks cost a gather each: only these).
    negation = open_ & (neg_o != neg_n) & np.where(same_claim, compatible, True)
    change = open_ & m.change[newer] & ~compatible & (same_slot | ~same_claim)
    polar = open_ & _opposite_pole_mask(m, older, newer)
    contained = np.zeros(len(older), dtype=bool)
    todo = np.flatnonzero((negation & ~same_claim) | polar)
    if len(todo):
        o, n = older[todo], newer[todo]
        contained[todo] = m.content_tokens.contained(o, n) | m.content_tokens.contained(n, o)
    negation &= same_claim | contained
    polar &= contained
    todo = np.flatnonzero(change & ~same_slot)
    if len(todo):
        o, n = older[todo], newer[todo]
        shared = m.content_tokens.lengths(o) - m.content_tokens.misses(o, n)
        change[todo] = 2 * shared >= np.maximum(m.content_tokens.lengths(o), m.content_tokens.lengths(n))
    quantity_open = open_ & unnegated & same_quantity_key
    return _PairMasks(
        negation=negation,
        change=change,
        polar=polar,
        value_swap=open_ & same_slot & ~compatible & unnegated & ~same_quantity_key,
        numeric=quantity_open & (m.numbers[older] != m.numbers[newer]),
        temporal=quantity_open
        & (m.temporals[older] != m.temporals[newer])
        & ~((m.temporals_loose[older] == m.temporals_loose[newer]) & (m.yearless[older] | m.yearless[newer])),
        explicit=explicit,
    )


def _first_rule(masks: _PairMasks) -> np.ndarray:
    """Index into RULE_ORDER of the first rule that fires, -1 for none."""
    conditions = [getattr(masks, name) for name in RULE_ORDER]
    return np.select(conditions, list(range(len(RULE_ORDER))), default=-1)


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _polar_labels(
    m: _MemoryArrays, older: np.ndarray, newer: np.ndarray, rules: RuleBook
) -> tuple[pa.Array, pa.Array]:
    """(older label, newer label) arrays for polar pairs: the lowest-numbered opposite pair decides."""
    pair_index = np.full(len(older), -1, dtype=np.int64)
    older_first = np.zeros(len(older), dtype=bool)
    for word in reversed(range(m.first_pole_only.shape[1])):
        first_then_second = m.first_pole_only[older, word] & m.second_pole_only[newer, word]
        second_then_first = m.second_pole_only[older, word] & m.first_pole_only[newer, word]
        bits = first_then_second | second_then_first
        lowest = bits & (~bits + np.uint64(1))
        has = bits != 0
        index = np.log2(lowest[has].astype(np.float64)).astype(np.int64) + 64 * word
        pair_index[has] = index
        older_first[has] = (first_then_second[has] & lowest[has]) != 0
    labels = np.array(rules.pair_labels, dtype=object).reshape(-1, 2)
    older_labels = labels[pair_index, np.where(older_first, 0, 1)]
    newer_labels = labels[pair_index, np.where(older_first, 1, 0)]
    return pa.array(older_labels, pa.string()), pa.array(newer_labels, pa.string())


def _reasons(
    rule: str, f: pa.Table, older: np.ndarray, newer: np.ndarray, m: _MemoryArrays, rules: RuleBook
) -> pa.Array:
    """The reason strings of the pairs one rule fired for (older/newer are feature row indices)."""

    def take(column: str, rows: np.ndarray) -> pa.Array:
        return pc.take(f[column], pa.array(rows)).combine_chunks()

    if rule == "negation":
        newer_side = m.negated[newer]
        cue = pc.if_else(pa.array(newer_side), take("negation_cue", newer), take("negation_cue", older))
        side = pa.array(np.where(newer_side, "newer", "older"), pa.string())
        return _join("negation: only the ", side, " row is negated ('", cue, "')")
    if rule == "change":
        return _join("change: the newer row says '", take("change_cue", newer), "'")
    if rule == "polar":
        older_label, newer_label = _polar_labels(m, older, newer, rules)
        return _join("polar: '", older_label, "' vs '", newer_label, "'")
    if rule == "value_swap":
        return _join(
            "value swap: ",
            take("claim_label", newer),
            " '",
            take("value", older),
            "' vs '",
            take("value", newer),
            "'",
        )
    if rule in ("numeric", "temporal"):
        text = "numbers_text" if rule == "numeric" else "temporals_text"
        label = take("quantity_label", newer)
        return _join(f"{rule}: ", label, " '", take(text, older), "' vs '", take(text, newer), "'")
    return pa.array(["explicit: metadata link"] * len(older), pa.string())


def detect(pairs: pa.Table, features: pa.Table, rules: RuleBook) -> pa.Table:
    """The pairs that contradict, with newer/older ids, the rule and its reason; other pair columns pass through.

    `pairs`: left_id, right_id, left_created_at, right_created_at (timestamps; on a tie the right row is the
    newer), optionally `explicit` (bool), anything else. `features`: `memory_features` of (at least) every id in
    the pairs; a pair with an unknown id only fires on `explicit`. The caller guarantees both sides share a
    namespace. Output rows keep the order of `pairs`.
    """
    m = _MemoryArrays.of(features, rules)
    left = _row_index(pairs["left_id"], features["id"], m.size)
    right = _row_index(pairs["right_id"], features["id"], m.size)
    right_newer = _right_is_newer(pairs)
    newer, older = np.where(right_newer, right, left), np.where(right_newer, left, right)
    known = (left < m.size) & (right < m.size)
    explicit = (
        _flags(pairs["explicit"])[:-1]
        if "explicit" in pairs.column_names
        else np.zeros(len(left), dtype=bool)
    )
    winner = _first_rule(_rule_masks(m, older, newer, known, explicit))
    fired = np.flatnonzero(winner >= 0)
    order = fired[np.argsort(winner[fired], kind="stable")]  # grouped by rule, pair order within a rule
    reason_parts, rule_parts = [], []
    for index, rule in enumerate(RULE_ORDER):
        rows = order[winner[order] == index]
        if len(rows):
            reason_parts.append(_reasons(rule, features, older[rows], newer[rows], m, rules))
            rule_parts.append(pa.array([rule] * len(rows), pa.string()))
    back = np.argsort(order, kind="stable")  # grouped-by-rule position -> pair order
    reasons = (
        pa.concat_arrays(reason_parts).take(pa.array(back)) if reason_parts else pa.array([], pa.string())
    )
    rules_fired = (
        pa.concat_arrays(rule_parts).take(pa.array(back)) if rule_parts else pa.array([], pa.string())
    )
    chosen = pairs.take(pa.array(fired))
    newer_id = pc.if_else(pa.array(right_newer[fired]), chosen["right_id"], chosen["left_id"])
    older_id = pc.if_else(pa.array(right_newer[fired]), chosen["left_id"], chosen["right_id"])
    passthrough = [c for c in pairs.column_names if c not in DETECT_COLUMNS]
    columns = [chosen["left_id"], chosen["right_id"], newer_id, older_id, rules_fired, reasons]
    columns += [chosen[c] for c in passthrough]
    return pa.table(columns, names=[*DETECT_COLUMNS, *passthrough])

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

`rule_for_pair` is the same rules written plainly for one pair: the readable reference that the tests hold
`detect` to, and the per-pair baseline of bench/contradictions.py.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from engram_pipelines.changes.intents import content_sha
from engram_pipelines.warehouse.content_cache import ContentCache

DEFAULT_RULES_PATH = Path(__file__).resolve().parents[2] / "data" / "contradiction_rules.yaml"

# Rule names in firing order (explicit last: it is reported only when no heuristic explains the pair).
RULE_ORDER = ("negation", "change", "polar", "value_swap", "numeric", "temporal", "explicit")

# Structural candidates: at most this many most-recent memories per (namespace, subject, relation), so one
# subject repeated in 10k memories yields at most K*(K-1)/2 pairs instead of 50M.
STRUCTURAL_GROUP_LIMIT = 50

# The relation of an arrangement claim: a plan for an occasion holds one day at a time.
ARRANGEMENT_RELATION = "is planned for"

# Copular and assignment claims share one relation, so "editor is vim" and "editor: emacs" are comparable.
COPULAR_RELATION = "is"

# Words keep inner dots, dashes, slashes, apostrophes and colons ("node.js", "gpt-4", "don't", "9:30") and
# thousands separators ("5,000"); a currency sign stays on its amount.
_TOKEN = re.compile(r"[$€£]?[\w+#%]+(?:[.'\-/:][\w+#%]+|,\d{3}(?!\d))*")
_PLACEHOLDERS = {
    "time": "<time>",
    "date": "<date>",
    "monthday": "<date>",  # same frame as a dated day; yearless_date decides whether they can differ
    "weekday": "<weekday>",
    "number": "<num>",
}

FEATURES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("negated", pa.bool_(), nullable=False),
        pa.field("negation_cue", pa.string()),  # the first negation found, for reasons
        pa.field("change_word", pa.bool_(), nullable=False),
        pa.field("change_cue", pa.string()),
        pa.field("poles", pa.list_(pa.string())),  # polar labels present (the first form of a pair side)
        pa.field("content_tokens", pa.list_(pa.string())),  # sentence minus poles and function words
        pa.field("subject", pa.string()),  # normalised: lowercase, no articles or possessives
        pa.field("relation", pa.string()),  # relation name, "is" for copular and assignment claims
        pa.field("value", pa.string()),  # normalised value
        pa.field("form", pa.string()),  # relational | copular | assignment
        pa.field("value_tokens", pa.list_(pa.string())),  # value minus function words (subset checks)
        pa.field("single_valued", pa.bool_(), nullable=False),
        pa.field("pronoun_subject", pa.bool_(), nullable=False),
        pa.field("utterance", pa.bool_(), nullable=False),  # a "Speaker: text" transcript line
        pa.field("claim_label", pa.string()),  # "editor" / "alice lives in", for reasons
        pa.field("quantity_key", pa.string()),  # claim or sentence with quantities as placeholders
        pa.field("quantity_label", pa.string()),
        pa.field("numbers", pa.string()),  # canonical numbers, "|"-joined ("5", "2.5")
        pa.field("numbers_text", pa.string()),  # as written, for reasons
        pa.field("temporals", pa.string()),  # canonical times and dates ("09:00", "2026-03-01", "monday")
        pa.field("temporals_text", pa.string()),
        pa.field("temporals_loose", pa.string()),  # dates without their year
        pa.field("yearless_date", pa.bool_(), nullable=False),  # "March 3": any year's March 3
        pa.field("number", pa.float64()),  # the first number
        pa.field("unit", pa.string()),  # the word after the first number
        pa.field("time_minutes", pa.int32()),  # the first clock time, minutes after midnight
        pa.field("date", pa.string()),  # the first date, "YYYY-MM-DD" ("--MM-DD" without a year)
    ]
)

DETECT_COLUMNS = ("left_id", "right_id", "newer_id", "older_id", "rule", "reason")


# ---------------------------------------------------------------------------------------------------------
# Rule book


@dataclass(frozen=True)
class Phrases:
    """Stop words and phrases as token tuples, indexed by first and last token (longest first): stripping them
    from either end of a subject or value costs a dictionary lookup, not a regex over the whole list."""

    by_first: Mapping[str, tuple[tuple[str, ...], ...]]
    by_last: Mapping[str, tuple[tuple[str, ...], ...]]

    @classmethod
    def of(cls, phrases: Iterable[str]) -> Phrases:
        split = sorted({tuple(p.split()) for p in phrases if p.split()}, key=len, reverse=True)
        by_first: dict[str, list[tuple[str, ...]]] = {}
        by_last: dict[str, list[tuple[str, ...]]] = {}
        for phrase in split:
            by_first.setdefault(phrase[0], []).append(phrase)
            by_last.setdefault(phrase[-1], []).append(phrase)
        return cls({k: tuple(v) for k, v in by_first.items()}, {k: tuple(v) for k, v in by_last.items()})

    def strip(self, tokens: list[str], *, leading: bool) -> list[str]:
        """Drop phrases from one end, repeatedly ("no longer really" -> nothing)."""
        while tokens:
            edge = tokens[0] if leading else tokens[-1]
            for phrase in (self.by_first if leading else self.by_last).get(edge, ()):
                size = len(phrase)
                if size <= len(tokens) and tuple(tokens[:size] if leading else tokens[-size:]) == phrase:
                    tokens = tokens[size:] if leading else tokens[:-size]
                    break
            else:
                return tokens
        return tokens


# Cue categories found in one pass over a memory's tokens. Relation operators need a subject before them.
NEGATION, CHANGE, STRONG_RELATION, WEAK_RELATION, COPULA = "negation", "change", "strong", "weak", "copula"
_NEEDS_SUBJECT = frozenset({STRONG_RELATION, WEAK_RELATION, COPULA})


@dataclass(frozen=True)
class CueIndex:
    """Every cue phrase of every category, indexed by its first token (longest first): one dictionary lookup
    per token finds the first negation, change word, relation and copula of a memory together."""

    by_first: Mapping[str, tuple[tuple[tuple[str, ...], str], ...]]

    @classmethod
    def of(cls, phrases_by_category: Mapping[str, Iterable[str]]) -> CueIndex:
        entries = {
            (tuple(p.split()), c) for c, phrases in phrases_by_category.items() for p in phrases if p.split()
        }
        by_first: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for phrase, category in sorted(entries, key=lambda e: (-len(e[0]), e)):
            by_first.setdefault(phrase[0], []).append((phrase, category))
        return cls({k: tuple(v) for k, v in by_first.items()})

    def first_hits(self, tokens: Sequence[str]) -> dict[str, tuple[int, int]]:
        """category -> (token index, length) of its leftmost (then longest) occurrence."""
        hits: dict[str, tuple[int, int]] = {}
        lookup = self.by_first
        for index, token in enumerate(tokens):
            candidates = lookup.get(token)
            if candidates is None:
                continue
            for phrase, category in candidates:
                if category in hits or (index == 0 and category in _NEEDS_SUBJECT):
                    continue
                size = len(phrase)
                if size == 1 or tuple(tokens[index : index + size]) == phrase:
                    hits[category] = (index, size)
        return hits


@dataclass(frozen=True)
class RuleBook:
    """The compiled contents of a rules YAML file."""

    source: str
    cues: CueIndex = field(repr=False)
    negation_pattern: re.Pattern[str] | None = field(repr=False)  # raw patterns ("\\w+n't") beside the words
    change_pattern: re.Pattern[str] | None = field(repr=False)
    pole_labels_of_form: Mapping[str, tuple[str, ...]] = field(repr=False)  # "dislikes" -> ("dislike",)
    poles_of_label: Mapping[str, tuple[tuple[int, int], ...]] = field(repr=False)  # label -> (pair, side)
    pair_labels: tuple[tuple[str, str], ...] = field(repr=False)
    assignment: re.Pattern[str] = field(repr=False)
    assignment_chars: frozenset[str] = field(repr=False)  # no such character, no assignment to try
    relation_of_form: Mapping[tuple[str, ...], str] = field(repr=False)  # ("lived", "in") -> "lives in"
    single_valued: frozenset[str] = field(repr=False)  # relations; copular claims also need a slot subject
    pronouns: frozenset[str] = field(repr=False)
    possessives: frozenset[str] = field(repr=False)
    subject_stop_phrases: Phrases = field(repr=False)
    value_stop_phrases: Phrases = field(repr=False)
    value_terminator: re.Pattern[str] = field(repr=False)
    function_words: frozenset[str] = field(repr=False)
    ignored_content_words: frozenset[str] = field(repr=False)
    max_subject_tokens: int = 8
    slot_nouns: frozenset[str] = field(repr=False, default=frozenset())
    slot_prefixes: frozenset[str] = field(repr=False, default=frozenset())
    slot_modifiers: frozenset[str] = field(repr=False, default=frozenset())
    relational_terminator: re.Pattern[str] | None = field(repr=False, default=None)
    max_value_tokens: int = 4
    descriptive_starts: frozenset[str] = field(repr=False, default=frozenset())
    utterance: re.Pattern[str] | None = field(repr=False, default=None)
    first_person: frozenset[str] = field(repr=False, default=frozenset())
    quantity: re.Pattern[str] = field(repr=False, default=re.compile(r"(?!)"))
    quantity_kinds: Mapping[str, str] = field(repr=False, default_factory=dict)  # outer group -> kind
    quantity_words: frozenset[str] = field(repr=False, default=frozenset())  # quantities without a digit
    number_words: Mapping[str, float] = field(repr=False, default_factory=dict)
    month_number: Mapping[str, int] = field(repr=False, default_factory=dict)
    weekday_name: Mapping[str, str] = field(repr=False, default_factory=dict)
    explicit_keys: tuple[str, ...] = ("contradicts",)
    arrangement_cues: frozenset[str] = field(repr=False, default=frozenset())  # inflected planning words
    arrangement_occasion: re.Pattern[str] | None = field(repr=False, default=None)  # "a coffee date"
    arrangement_day: re.Pattern[str] | None = field(
        repr=False, default=None
    )  # a weekday, with its past marker
    contractions: Mapping[str, str] = field(repr=False, default_factory=dict)
    contraction_pattern: re.Pattern[str] | None = field(repr=False, default=None)
    fingerprint: str = ""  # digest of the rules' contents: features parsed under other rules are not reused

    @property
    def polar_pair_count(self) -> int:
        return len(self.pair_labels)


def load_rules(path: str | Path | None = None) -> RuleBook:
    """Read and compile a rules file (the packaged default when `path` is None)."""
    source = Path(path) if path is not None else DEFAULT_RULES_PATH
    with source.open(encoding="utf-8") as handle:
        raw = yaml.safe_load(handle) or {}
    return _compile_rules(raw, str(source))


def _require(raw: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in raw:
        raise ValueError(f"contradiction rules {source}: missing key {key!r}")
    return raw[key]


def _words(values: Any, key: str, source: str) -> list[str]:
    """A list of words or phrases, lowercased; booleans from bare yes/no/on/off are reported, not matched."""
    if not isinstance(values, list):
        raise ValueError(f"contradiction rules {source}: {key} must be a list")
    odd = [v for v in values if not isinstance(v, str)]
    if odd:
        raise ValueError(
            f"contradiction rules {source}: {key} has non-text entries {odd!r} "
            "(quote yes/no/on/off/true/false: YAML reads them bare as booleans)"
        )
    return [v.lower() for v in values]


def _optional_pattern(patterns: Iterable[str]) -> re.Pattern[str] | None:
    patterns = list(patterns)
    return re.compile("|".join(patterns)) if patterns else None


def _inflections(word: str) -> set[str]:
    """Regular English inflections of a single word; wrong guesses ("fulled") are harmless, they never occur."""
    forms = {word}
    if not word.isalpha():
        return forms
    if word.endswith("e"):
        forms |= {word + "s", word + "d", word[:-1] + "ing"}
    else:
        forms |= {word + "s", word + "es", word + "ed", word + "ing"}
    if len(word) > 2 and word.endswith("y") and word[-2] not in "aeiou":
        forms |= {word[:-1] + "ies", word[:-1] + "ied"}
    if len(word) >= 3 and word[-1] not in "aeiouwxy" and word[-2] in "aeiou" and word[-3] not in "aeiou":
        forms |= {word + word[-1] + "ed", word + word[-1] + "ing"}
    return forms


def _side_forms(side: str, inflect: bool) -> tuple[str, set[str]]:
    """'sit|sat' -> label 'sit', forms {sit, sits, sitting, sat, ...}."""
    written = [w.strip() for w in side.split("|") if w.strip()]
    forms: set[str] = set()
    for word in written:
        forms |= _inflections(word) if inflect else {word}
    return written[0], forms


def _compile_polar(raw: Mapping[str, Any], source: str):
    inflect = bool(raw.get("inflect", True))
    labels_of_form: dict[str, set[str]] = {}
    poles_of_label: dict[str, list[tuple[int, int]]] = {}
    pair_labels = []
    for index, pair in enumerate(_require(raw, "pairs", source)):
        if len(pair) != 2:
            raise ValueError(f"contradiction rules {source}: polar pair {pair!r} needs exactly two sides")
        labels = []
        for side_index, side in enumerate(_words(pair, f"polar_pairs.pairs[{index}]", source)):
            label, forms = _side_forms(side, inflect)
            labels.append(label)
            poles_of_label.setdefault(label, []).append((index, side_index))
            for form in forms:
                if " " in form:
                    raise ValueError(f"contradiction rules {source}: polar word {form!r} must be one word")
                labels_of_form.setdefault(form, set()).add(label)
        pair_labels.append((labels[0], labels[1]))
    return (
        {f: tuple(sorted(ls)) for f, ls in labels_of_form.items()},
        {label: tuple(ps) for label, ps in poles_of_label.items()},
        tuple(pair_labels),
    )


def _relation_alternation(forms: Iterable[str]) -> str:
    return "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))


def _compile_claims(raw: Mapping[str, Any], source: str):
    """Relation surface forms (strong, then weak), copular verbs and the assignment regex."""
    relations = _require(raw, "relations", source)
    default_inflect = bool(relations.get("inflect", True))
    relation_of_form: dict[tuple[str, ...], str] = {}
    strong: list[str] = []
    weak: list[str] = []
    single_valued: set[str] = set()
    for name, entry in _require(relations, "entries", source).items():
        inflect = bool(entry.get("inflect", default_inflect))
        forms: set[str] = set()
        for written in _words(entry["forms"], f"relations.entries.{name}.forms", source):
            forms |= _inflections(written) if inflect and " " not in written else {written}
        for form in forms:
            relation_of_form[tuple(form.split())] = name
        (weak if entry.get("weak") else strong).extend(forms)
        if entry.get("single_valued", True):
            single_valued.add(name)
    copular = _words(_require(raw, "copular", source)["verbs"], "copular.verbs", source)
    if raw["copular"].get("single_valued", True):
        single_valued.add(COPULAR_RELATION)
    operators = _words(_require(raw, "assignment", source)["operators"], "assignment.operators", source)
    operators_by_category = {STRONG_RELATION: strong, WEAK_RELATION: weak, COPULA: copular}
    # A colon needs a space after it ("9:30" and URLs are not assignments); "=" and arrows may be tight.
    alternation = "|".join(
        re.escape(op) + (r"\s+" if op == ":" else r"\s*") for op in sorted(operators, key=len, reverse=True)
    )
    assignment = re.compile(rf"^(?P<subject>.+?)\s*(?:{alternation})(?P<value>.+)$")
    return (
        operators_by_category,
        assignment,
        frozenset("".join(operators)),
        relation_of_form,
        frozenset(single_valued),
    )


def _compile_quantities(raw: Mapping[str, Any], source: str):
    """One alternation of dates, times and numbers (in that priority), each pattern's groups renamed apart."""
    months = _require(raw, "months", source)
    weekdays = _require(raw, "weekdays", source)
    month_number = {name.lower(): index + 1 for index, names in enumerate(months) for name in names}
    weekday_name = {name.lower(): names[0].lower() for names in weekdays for name in names}
    expansions = {
        "{month}": _relation_alternation(month_number),
        "{weekday}": _relation_alternation(weekday_name),
    }
    number_words = {k.lower(): float(v) for k, v in _require(raw, "numbers", source).get("words", {}).items()}
    sections = [("date", raw["dates"]["patterns"]), ("time", raw["times"]["patterns"])]
    number_patterns = list(raw["numbers"]["patterns"])
    if number_words:
        number_patterns.append(r"\b(?:" + _relation_alternation(number_words) + r")\b")
    sections.append(("number", number_patterns))
    alternatives: list[str] = []
    kinds: dict[str, str] = {}
    for kind, patterns in sections:
        for pattern in patterns:
            for placeholder, alternation in expansions.items():
                pattern = pattern.replace(placeholder, alternation)
            outer = f"q{len(alternatives)}"
            renamed = re.sub(r"\(\?P<(\w+)>", rf"(?P<{outer}_\1>", pattern)
            alternatives.append(f"(?P<{outer}>{renamed})")
            kinds[outer] = kind
    # Text without a digit is only scanned when it has one of these words (most memories have neither).
    words_without_digits = set(month_number) | set(weekday_name) | set(number_words)
    words_without_digits |= set(_words(raw["times"].get("words", []), "times.words", source))
    words_without_digits |= set(_words(raw["dates"].get("words", []), "dates.words", source))
    return (
        re.compile("|".join(alternatives)),
        kinds,
        frozenset(words_without_digits),
        number_words,
        month_number,
        weekday_name,
    )


def _compile_arrangements(
    raw: Mapping[str, Any], source: str, weekday_name: Mapping[str, str]
) -> tuple[frozenset[str], re.Pattern[str] | None, re.Pattern[str] | None]:
    """Planning words (inflected), the occasion pattern and the weekday pattern of `arrangements`."""
    section = raw.get("arrangements") or {}
    if not section:
        return frozenset(), None, None
    cues: set[str] = set()
    for cue in _words(section.get("cues", []), "arrangements.cues", source):
        cues |= _side_forms(cue, inflect=True)[1]
    determiners = _relation_alternation(
        _words(section.get("determiners", []), "arrangements.determiners", source)
    )
    occasions = _relation_alternation(_words(section.get("occasions", []), "arrangements.occasions", source))
    past = _relation_alternation(_words(section.get("past_markers", []), "arrangements.past_markers", source))
    occasion = re.compile(rf"\b(?:{determiners})\s+(?:(?P<modifier>[\w'-]+)\s+)?(?P<occasion>{occasions})\b")
    day = re.compile(
        (rf"(?:\b(?P<past>{past})\s+)?" if past else "")
        + rf"\b(?P<weekday>{_relation_alternation(weekday_name)})(?P<plural>s)?\b"
    )
    return frozenset(cues), occasion, day


def _compile_rules(raw: Mapping[str, Any], source: str) -> RuleBook:
    def words(key: str, sub: str | None = None) -> list[str]:
        value = _require(raw, key, source)
        return _words(value.get(sub, []) if sub else value, f"{key}.{sub}" if sub else key, source)

    negation_words, change_words = words("negation", "words"), words("change", "words")
    subject_stops, value_stops = words("subject_stop_words"), words("value_stop_words")
    labels_of_form, poles_of_label, pair_labels = _compile_polar(_require(raw, "polar_pairs", source), source)
    operators, assignment, assignment_chars, relation_of_form, single_valued = _compile_claims(raw, source)
    quantity, kinds, quantity_words, number_words, month_number, weekday_name = _compile_quantities(
        raw, source
    )
    function_words = frozenset(words("function_words"))
    arrangement_cues, arrangement_occasion, arrangement_day = _compile_arrangements(raw, source, weekday_name)
    slots = raw.get("slots") or {}
    utterance = raw.get("utterance") or {}
    contractions = {str(k).lower(): str(v).lower() for k, v in (raw.get("contractions") or {}).items()}
    single_token_cues = {
        w for w in [*negation_words, *change_words, *subject_stops, *value_stops] if " " not in w
    }
    return RuleBook(
        source=source,
        cues=CueIndex.of({NEGATION: negation_words, CHANGE: change_words, **operators}),
        negation_pattern=_optional_pattern(raw["negation"].get("patterns", ())),
        change_pattern=_optional_pattern(raw["change"].get("patterns", ())),
        pole_labels_of_form=labels_of_form,
        poles_of_label=poles_of_label,
        pair_labels=pair_labels,
        assignment=assignment,
        assignment_chars=assignment_chars,
        relation_of_form=relation_of_form,
        single_valued=single_valued,
        slot_nouns=frozenset(_words(slots.get("nouns", []), "slots.nouns", source)),
        slot_prefixes=frozenset(_words(slots.get("prefixes", []), "slots.prefixes", source)),
        slot_modifiers=frozenset(_words(slots.get("modifiers", []), "slots.modifiers", source)),
        max_value_tokens=int(raw.get("max_value_tokens", 4)),
        descriptive_starts=frozenset(
            _words(raw.get("descriptive_value_starts", []), "descriptive_value_starts", source)
        ),
        utterance=re.compile(utterance["pattern"]) if utterance.get("pattern") else None,
        first_person=frozenset(_words(utterance.get("first_person", []), "utterance.first_person", source)),
        pronouns=frozenset(words("pronouns")),
        possessives=frozenset(words("possessives")),
        subject_stop_phrases=Phrases.of(subject_stops),
        value_stop_phrases=Phrases.of(value_stops),
        value_terminator=re.compile("|".join(_require(raw, "value_terminators", source)["patterns"])),
        relational_terminator=_optional_pattern(
            _require(raw, "value_terminators", source).get("relational", [])
        ),
        function_words=function_words,
        ignored_content_words=function_words | single_token_cues | set(labels_of_form),
        max_subject_tokens=int(raw.get("max_subject_tokens", 8)),
        quantity=quantity,
        quantity_kinds=kinds,
        quantity_words=quantity_words,
        number_words=number_words,
        month_number=month_number,
        weekday_name=weekday_name,
        explicit_keys=tuple(raw.get("explicit_keys", ["contradicts"])),
        arrangement_cues=arrangement_cues,
        arrangement_occasion=arrangement_occasion,
        arrangement_day=arrangement_day,
        contractions=contractions,
        contraction_pattern=_optional_pattern([r"\b(?:" + _relation_alternation(contractions) + r")\b"])
        if contractions
        else None,
        fingerprint=hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16],
    )


# ---------------------------------------------------------------------------------------------------------
# Per-memory parsing (a Python loop over memories, never over pairs)


class Claim(NamedTuple):  # NamedTuples: built for every memory, and cheaper to build than frozen dataclasses
    subject: str
    relation: str
    value: str
    form: str
    single_valued: bool

    @property
    def label(self) -> str:
        return self.subject if self.relation == COPULAR_RELATION else f"{self.subject} {self.relation}"


class Quantities(NamedTuple):
    template: str  # the text with every quantity replaced by its placeholder, without function words
    label: str  # the same with function words, for reasons
    numbers: tuple[str, ...]
    numbers_text: tuple[str, ...]
    temporals: tuple[str, ...]
    temporals_text: tuple[str, ...]
    yearless: bool  # a date without a year: it may be the same day as any year's
    first_number: float | None
    unit: str | None
    time_minutes: int | None
    date: str | None


def normalise(text: str) -> str:
    """Lowercase, straight apostrophes, single spaces, no trailing sentence punctuation."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").lower()
    return " ".join(text.split()).rstrip(" .!?;")


def expand_contractions(text: str, rules: RuleBook) -> str:
    """ "i'm" -> "i am" (on `normalise`d text), as the rules file lists them."""
    if rules.contraction_pattern is None or "'" not in text:
        return text
    return rules.contraction_pattern.sub(lambda m: rules.contractions[m.group(0)], text)


def tokens_of(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _clean_subject(tokens: list[str], rules: RuleBook) -> str | None:
    start = 0
    while start < len(tokens) and tokens[start] in rules.possessives:
        start += 1
    kept = rules.subject_stop_phrases.strip(tokens[start:], leading=False)
    if kept and kept[-1] in rules.slot_nouns:  # "maya's new phone number" -> "maya's phone number"
        kept = [t for i, t in enumerate(kept) if i == 0 or t not in rules.slot_modifiers]
    if not kept or len(kept) > rules.max_subject_tokens:
        return None
    return " ".join(kept)


def clean_value(raw: str, rules: RuleBook) -> str | None:
    """The value up to a clause boundary, without articles, adverbs or negation/change words at its ends."""
    cut = rules.value_terminator.search(raw)
    tokens = tokens_of(raw[: cut.start()] if cut else raw)
    tokens = rules.value_stop_phrases.strip(tokens, leading=True)
    tokens = rules.value_stop_phrases.strip(tokens, leading=False)
    return " ".join(tokens) or None


def _end_offset(text: str, tokens: Sequence[str], index: int) -> int:
    """Character offset just after token `index` (tokens are in text order)."""
    cursor = 0
    for token in tokens[: index + 1]:
        cursor = text.find(token, cursor) + len(token)
    return cursor


def parse_claim(text: str, rules: RuleBook) -> Claim | None:
    """The claim of a `normalise`d sentence, if a relational, copular or assignment form applies."""
    tokens = tokens_of(text)
    return _claim(text, tokens, rules.cues.first_hits(tokens), rules)


def _arrangement(text: str, tokens: list[str], rules: RuleBook) -> Claim | None:
    """A plan for a named occasion on one coming weekday: the claim (occasion, "is planned for", weekday).

    Needs a planning word, an occasion after a determiner and exactly one weekday that is neither past nor
    recurring ("last Friday", "every Friday", "Fridays"): "agreed to meet Jolene on Friday for a coffee date" is
    (coffee date, is planned for, friday)."""
    if rules.arrangement_occasion is None or rules.arrangement_day is None:
        return None
    if rules.arrangement_cues.isdisjoint(tokens):
        return None
    occasion = rules.arrangement_occasion.search(text)
    if occasion is None:
        return None
    days = {
        rules.weekday_name[m["weekday"]]
        for m in rules.arrangement_day.finditer(text)
        if not m.groupdict().get("past") and not m["plural"]
    }
    if len(days) != 1:
        return None
    subject = " ".join(part for part in (occasion["modifier"], occasion["occasion"]) if part)
    return Claim(subject, ARRANGEMENT_RELATION, days.pop(), "arrangement", True)


def _claim(
    text: str, tokens: list[str], hits: Mapping[str, tuple[int, int]], rules: RuleBook
) -> Claim | None:
    """The first form (arrangement, relational, weak relational, copular, assignment) that yields a subject and
    a value; the leftmost operator of a form splits the sentence."""
    arrangement = _arrangement(text, tokens, rules)
    if arrangement is not None:
        return arrangement
    for category in (STRONG_RELATION, WEAK_RELATION, COPULA):
        if category not in hits:
            continue
        index, length = hits[category]
        subject = _clean_subject(tokens[:index], rules)
        raw_value = text[_end_offset(text, tokens, index + length - 1) :]
        if category != COPULA and rules.relational_terminator is not None:
            qualifier = rules.relational_terminator.search(raw_value)
            raw_value = raw_value[: qualifier.start()] if qualifier else raw_value
        value = clean_value(raw_value, rules)
        if subject is None or value is None:
            continue
        if category == COPULA:
            single = _single_valued(subject, COPULAR_RELATION, raw_value, value, rules)
            return Claim(subject, COPULAR_RELATION, value, "copular", single)
        relation = rules.relation_of_form[tuple(tokens[index : index + length])]
        single = _single_valued(subject, relation, raw_value, value, rules)
        return Claim(subject, relation, value, "relational", single)
    if rules.assignment_chars.isdisjoint(text):
        return None
    match = rules.assignment.match(text)
    if match is None:
        return None
    subject, value = _clean_subject(tokens_of(match["subject"]), rules), clean_value(match["value"], rules)
    if subject is None or value is None:
        return None
    single = _single_valued(subject, COPULAR_RELATION, match["value"], value, rules)
    return Claim(subject, COPULAR_RELATION, value, "assignment", single)


def _single_valued(subject: str, relation: str, raw_value: str, value: str, rules: RuleBook) -> bool:
    """Does the claim fill a slot that holds one comparable value at a time?

    The relation must be single-valued (lives in, works at, uses; not likes or has). A copular or assignment
    claim also needs a slot subject ("my editor", "favorite color") or a value that starts with a number
    ("Alice is 30"). The value must be short and not start with an indefinite word: "vim" and "Berlin" are
    comparable, "a small bakery downtown that she loves" is a description, not a value."""
    if relation not in rules.single_valued:
        return False
    value_tokens = value.split()
    if len(value_tokens) > rules.max_value_tokens:
        return False
    raw_tokens = tokens_of(raw_value)
    if raw_tokens and raw_tokens[0] in rules.descriptive_starts:
        return False
    if relation != COPULAR_RELATION:
        return True
    words = subject.split()
    return words[-1] in rules.slot_nouns or words[0] in rules.slot_prefixes or value_tokens[0][0].isdigit()


def _canonical_number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _group(match: re.Match[str], outer: str, name: str) -> str | None:
    """Group `name` of the quantity pattern `outer` (groups are renamed apart: "q3_h"); None if it has none."""
    key = f"{outer}_{name}"
    return match.group(key) if key in match.re.groupindex else None


def _canonical_time(match: re.Match[str], outer: str) -> tuple[str, int]:
    if _group(match, outer, "noon"):
        return "12:00", 720
    if _group(match, outer, "midnight"):
        return "00:00", 0
    hour = int(_group(match, outer, "h") or 0)
    minute = int(_group(match, outer, "m") or 0)
    ampm = _group(match, outer, "ampm")
    if ampm:
        hour = hour % 12 + (12 if ampm == "p" else 0)
    return f"{hour:02d}:{minute:02d}", hour * 60 + minute


def _canonical_date(match: re.Match[str], outer: str, rules: RuleBook) -> tuple[str, str]:
    """-> (kind, canonical): ("weekday", "monday"), ("date", "2026-03-01") or, without a year,
    ("monthday", "--03-01")."""
    weekday = _group(match, outer, "weekday")
    if weekday:
        return "weekday", rules.weekday_name[weekday]
    month_name = _group(match, outer, "month")
    month = rules.month_number[month_name] if month_name else int(_group(match, outer, "mo") or 0)
    day = int(_group(match, outer, "d") or 0)
    year = _group(match, outer, "y")
    return ("date", f"{year}-{month:02d}-{day:02d}") if year else ("monthday", f"--{month:02d}-{day:02d}")


def _number_value(surface: str, rules: RuleBook) -> float:
    if surface in rules.number_words:
        return rules.number_words[surface]
    return float(surface.replace(",", ""))


_DIGIT = re.compile(r"\d")
_DIGIT_RUN = re.compile(r"\d+")


def _quantity_starts(text: str, tokens: Sequence[str], rules: RuleBook) -> list[int]:
    """Where a quantity can begin: each run of digits ("$5", "5-10", "9:30"), or a quantity word ("noon")."""
    starts = [m.start() for m in _DIGIT_RUN.finditer(text)]
    if not rules.quantity_words.isdisjoint(tokens):
        cursor = 0
        for token in tokens:
            at = text.find(token, cursor)
            cursor = at + len(token)
            if token in rules.quantity_words:
                starts.append(at)
        starts.sort()
    return starts


def _quantity_matches(text: str, tokens: Sequence[str], rules: RuleBook) -> Iterable[re.Match[str]]:
    """The quantity pattern tried only where a quantity can begin (not at every character), left to right."""
    end = 0
    for start in _quantity_starts(text, tokens, rules):
        if start < end:
            continue  # inside the previous quantity ("2026-03-01" has three digit runs)
        match = rules.quantity.match(text, start)
        if match is not None:
            end = match.end()
            yield match


def scan_quantities(text: str, rules: RuleBook, tokens: Sequence[str] | None = None) -> Quantities | None:
    """Replace dates, clock times and numbers by placeholders; None when the text has none."""
    tokens = tokens_of(text) if tokens is None else tokens
    if _DIGIT.search(text) is None and rules.quantity_words.isdisjoint(tokens):
        return None
    parts: list[str] = []
    numbers, numbers_text, temporals, temporals_text = [], [], [], []
    first_number = time_minutes = date = None
    yearless = False
    unit_after: int | None = None
    position = 0
    for match in _quantity_matches(text, tokens, rules):
        outer = match.lastgroup or ""
        kind = rules.quantity_kinds[outer]
        surface = match.group(0)
        if kind == "number":
            value = _number_value(surface, rules)
            numbers.append(_canonical_number(value))
            numbers_text.append(surface)
            if first_number is None:
                first_number, unit_after = value, match.end()
        elif kind == "time":
            canonical, minutes = _canonical_time(match, outer)
            temporals.append(canonical)
            temporals_text.append(surface.strip())
            time_minutes = minutes if time_minutes is None else time_minutes
        else:
            kind, canonical = _canonical_date(match, outer, rules)
            temporals.append(canonical)
            temporals_text.append(surface.strip())
            date = canonical if date is None and kind in ("date", "monthday") else date
            yearless = yearless or kind == "monthday"
        parts.extend((text[position : match.start()], " " + _PLACEHOLDERS[kind] + " "))
        position = match.end()
    if position == 0:
        return None
    parts.append(text[position:])
    words = "".join(parts).split()
    label = " ".join(words)  # readable, for reasons
    template = " ".join(t for t in words if t not in rules.function_words)  # the comparison key
    unit = _TOKEN.search(text, unit_after) if unit_after is not None else None
    return Quantities(
        template=template,
        label=label,
        numbers=tuple(numbers),
        numbers_text=tuple(numbers_text),
        temporals=tuple(temporals),
        temporals_text=tuple(temporals_text),
        yearless=yearless,
        first_number=first_number,
        unit=unit.group(0) if unit else None,
        time_minutes=time_minutes,
        date=date,
    )


def _cue(
    category: str,
    hits: Mapping[str, tuple[int, int]],
    tokens: Sequence[str],
    text: str,
    pattern: re.Pattern[str] | None,
) -> str | None:
    """The first listed word or phrase of a category, else the first match of its raw patterns."""
    if category in hits:
        index, length = hits[category]
        return " ".join(tokens[index : index + length])
    match = pattern.search(text) if pattern is not None else None
    return match.group(0) if match else None


def _poles(tokens: Sequence[str], rules: RuleBook) -> list[str]:
    return sorted({label for t in tokens for label in rules.pole_labels_of_form.get(t, ())})


def _pronoun_subject(claim: Claim | None, tokens: Sequence[str], rules: RuleBook) -> bool:
    """A subject made only of pronouns; without a claim, a sentence that starts with one ("it broke")."""
    if claim is not None:
        return all(t in rules.pronouns for t in claim.subject.split())
    return bool(tokens) and tokens[0] in rules.pronouns


def _utterance(content: str, rules: RuleBook) -> tuple[str | None, str]:
    """(speaker, text) of a "Speaker: text" transcript line, else (None, content). A capitalised slot noun before
    the colon ("Editor: vim", "Database: postgres") is an assignment, not a speaker."""
    if rules.utterance is None or ":" not in content:
        return None, content
    match = rules.utterance.match(content.strip())
    if match is None:
        return None, content
    speaker = " ".join(match["speaker"].lower().split())
    if speaker.split()[0] in rules.slot_nouns or speaker.split()[-1] in rules.slot_nouns:
        return None, content
    return speaker, match["text"]


def _without_years(temporals: Sequence[str]) -> str:
    """Dates reduced to month and day ("2026-03-01" -> "--03-01"), to compare with a date written without one."""
    return "|".join(
        f"--{t[5:]}" if len(t) == 10 and t[4] == "-" and t[:4].isdigit() else t for t in temporals
    )


def memory_row(memory_id: str, content: str, rules: RuleBook) -> dict[str, Any]:
    """The features of one memory (one FEATURES_SCHEMA row)."""
    speaker, content = _utterance(content or "", rules)
    text = expand_contractions(normalise(content), rules)
    tokens = tokens_of(text)
    hits = rules.cues.first_hits(tokens)
    claim = _claim(text, tokens, hits, rules)
    if claim is not None and speaker is not None:
        # The speaker's claim: "John: I live in Boston" is john's, "John: my editor is vim" is john's editor.
        own = claim.subject in rules.first_person
        claim = claim._replace(subject=speaker if own else f"{speaker}'s {claim.subject}")
    quantities = scan_quantities(claim.value, rules) if claim else scan_quantities(text, rules, tokens)
    claim_key = f"{claim.subject}\x1f{claim.relation}\x1f" if claim else "\x1f\x1f"
    return {
        "id": memory_id,
        "negated": (negation_cue := _cue(NEGATION, hits, tokens, text, rules.negation_pattern)) is not None,
        "negation_cue": negation_cue,
        "change_word": (change_cue := _cue(CHANGE, hits, tokens, text, rules.change_pattern)) is not None,
        "change_cue": change_cue,
        "poles": _poles(tokens, rules),
        "content_tokens": sorted(
            {t for t in tokens if t not in rules.ignored_content_words and not t.endswith("n't")}
        ),
        "subject": claim.subject if claim else None,
        "relation": claim.relation if claim else None,
        "value": claim.value if claim else None,
        "form": claim.form if claim else None,
        "value_tokens": sorted(set(claim.value.split()) - rules.function_words) if claim else None,
        "single_valued": bool(claim and claim.single_valued),
        "pronoun_subject": _pronoun_subject(claim, tokens, rules),
        "utterance": speaker is not None,
        "claim_label": claim.label if claim else None,
        "quantity_key": claim_key + quantities.template if quantities else None,
        "quantity_label": (claim.label if claim else quantities.label) if quantities else None,
        "numbers": "|".join(quantities.numbers) if quantities and quantities.numbers else None,
        "numbers_text": ", ".join(quantities.numbers_text) if quantities and quantities.numbers else None,
        "temporals": "|".join(quantities.temporals) if quantities and quantities.temporals else None,
        "temporals_text": ", ".join(quantities.temporals_text)
        if quantities and quantities.temporals
        else None,
        "temporals_loose": _without_years(quantities.temporals)
        if quantities and quantities.temporals
        else None,
        "yearless_date": bool(quantities and quantities.yearless),
        "number": quantities.first_number if quantities else None,
        "unit": quantities.unit if quantities else None,
        "time_minutes": quantities.time_minutes if quantities else None,
        "date": quantities.date if quantities else None,
    }


def memory_features(ids: Sequence[str], contents: Sequence[str], rules: RuleBook) -> pa.Table:
    """One FEATURES_SCHEMA row per memory: parse each memory once, whatever the number of pairs."""
    if len(ids) != len(contents):
        raise ValueError(f"memory_features: {len(ids)} ids but {len(contents)} contents")
    # The rows hold millions of small objects and no reference cycles: the cyclic collector would rescan them
    # over and over as they pile up (measured: 40% of the time at 200k memories), so it pauses meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        rows = [memory_row(str(i), c, rules) for i, c in zip(ids, contents, strict=True)]
    finally:
        if collecting:
            gc.enable()
    # Column by column: pa.Table.from_pylist spends more time per row than the parsing itself.
    columns = [
        pa.array([row[name] for row in rows], type_)
        for name, type_ in zip(FEATURES_SCHEMA.names, FEATURES_SCHEMA.types, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=FEATURES_SCHEMA)


# Bump when the parsing above changes: features cached by an older parser must not be reused.
FEATURES_VERSION = 3


def cached_memory_features(
    ids: Sequence[str], contents: Sequence[str], rules: RuleBook, cache_root: Path
) -> pa.Table:
    """`memory_features`, parsing each distinct content once across nights (cached by content hash under
    <cache_root>/contradiction_features/, per parser version and rules): a quiet night parses only what is new."""
    if not ids:  # an empty store: nothing to parse (and no cached columns to shape a result from)
        return FEATURES_SCHEMA.empty_table()
    shas = [content_sha(c or "") for c in contents]
    cache = ContentCache(cache_root / "contradiction_features" / f"v{FEATURES_VERSION}-{rules.fingerprint}")
    unique = sorted(set(shas))
    known = cache.lookup(unique)
    have = set(known["sha"].to_pylist()) if known is not None else set()
    missing = [sha for sha in unique if sha not in have]
    if missing:
        content_of = dict(zip(shas, contents, strict=True))
        parsed = memory_features(missing, [content_of[sha] for sha in missing], rules)
        parsed = parsed.rename_columns(["sha", *FEATURES_SCHEMA.names[1:]])
        cache.add(parsed)
        known = parsed if known is None else pa.concat_tables([known.cast(parsed.schema), parsed])
    con = duckdb.connect()
    con.register(
        "wanted", pa.table({"id": pa.array(ids, pa.string()), "sha": shas, "position": range(len(ids))})
    )
    con.register("known", known if known is not None else pa.table({"sha": pa.array([], pa.string())}))
    return (
        con.sql("SELECT w.id, k.* EXCLUDE (sha) FROM wanted w JOIN known k USING (sha) ORDER BY w.position")
        .to_arrow_table()
        .cast(FEATURES_SCHEMA)
    )


# ---------------------------------------------------------------------------------------------------------
# The rules for one pair, plainly (the reference for `detect`)


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


# ---------------------------------------------------------------------------------------------------------
# Vectorised evaluation over pairs


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


# ---------------------------------------------------------------------------------------------------------
# Candidates beyond the cosine band


def structural_candidates(
    features: pa.Table, namespaces: pa.Table, group_limit: int = STRUCTURAL_GROUP_LIMIT
) -> pa.Table:
    """Pairs with the same (namespace, subject, relation) and different values, whatever their cosine.

    `namespaces`: id, namespace, optionally created_at (recency for the cap, and passed on as
    left_created_at/right_created_at so the result feeds `detect` directly). Only claims that could fire are
    joined: unnegated, a non-pronoun subject, a single-valued relation or a quantity. Each group keeps its
    `group_limit` most recent memories (created_at, then id, descending): one subject repeated 10k times gives
    at most K*(K-1)/2 pairs instead of 50M, and an older row of such a group is compared only through the
    cosine band. Returns left_id < right_id and namespace, deduplicated, in a stable order.
    """
    has_time = "created_at" in namespaces.column_names
    recency = "n.created_at" if has_time else "NULL"
    times = ", a.created_at AS left_created_at, b.created_at AS right_created_at" if has_time else ""
    con = duckdb.connect()
    try:
        con.register(
            "features",
            features.select(
                [
                    "id",
                    "subject",
                    "relation",
                    "value",
                    "negated",
                    "pronoun_subject",
                    "single_valued",
                    "quantity_key",
                ]
            ),
        )
        con.register("namespaces", namespaces)
        return con.sql(
            f"""
            WITH claims AS (
                SELECT DISTINCT f.id, n.namespace, f.subject, f.relation, f.value, {recency} AS created_at
                FROM features f JOIN namespaces n ON n.id = f.id
                WHERE f.subject IS NOT NULL AND NOT f.negated AND NOT f.pronoun_subject
                  AND (f.single_valued OR f.quantity_key IS NOT NULL)
            ), ranked AS (
                SELECT *, row_number() OVER (PARTITION BY namespace, subject, relation
                                             ORDER BY created_at DESC NULLS LAST, id DESC) AS recency
                FROM claims
            )
            SELECT DISTINCT a.id AS left_id, b.id AS right_id, a.namespace{times}
            FROM ranked a
            JOIN ranked b ON a.namespace = b.namespace AND a.subject = b.subject AND a.relation = b.relation
                         AND a.id < b.id
            WHERE a.recency <= {int(group_limit)} AND b.recency <= {int(group_limit)} AND a.value <> b.value
            ORDER BY a.namespace, left_id, right_id
            """
        ).to_arrow_table()
    finally:
        con.close()


def _linked_ids(metadata: Any, keys: Sequence[str]) -> list[str]:
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return []
    if not isinstance(metadata, dict):
        return []
    linked: list[str] = []
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, str):
            linked.append(value)
        elif isinstance(value, list):
            linked.extend(str(v) for v in value if isinstance(v, str | int))
    return linked


def explicit_candidates(
    ids: Sequence[str], metadata_json: Sequence[str | Mapping[str, Any] | None], rules: RuleBook | None = None
) -> pa.Table:
    """Pairs asserted by `metadata.contradicts` (an id or a list of ids; keys from the rules file).

    Links to ids outside `ids` (not in this snapshot) and self-links are dropped. Returns left_id < right_id,
    explicit = true; deduplicated (a link stated on both sides is one pair).
    """
    keys = (rules or load_rules()).explicit_keys
    known = set(map(str, ids))
    pairs = set()
    for memory_id, metadata in zip(map(str, ids), metadata_json, strict=True):
        for other in _linked_ids(metadata, keys):
            if other in known and other != memory_id:
                pairs.add((min(memory_id, other), max(memory_id, other)))
    ordered = sorted(pairs)
    return pa.table(
        {
            "left_id": pa.array([p[0] for p in ordered], pa.string()),
            "right_id": pa.array([p[1] for p in ordered], pa.string()),
            "explicit": pa.array([True] * len(ordered), pa.bool_()),
        }
    )

"""The contradiction rule book: the word lists and patterns of data/contradiction_rules.yaml (or a user's
copy, `load_rules(path)`), checked and compiled once. The rules themselves are described in `detect.py`."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_RULES_PATH = Path(__file__).resolve().parents[2] / "data" / "contradiction_rules.yaml"


# Rule names in firing order (explicit last: it is reported only when no heuristic explains the pair).
RULE_ORDER = ("negation", "change", "polar", "value_swap", "numeric", "temporal", "explicit")


# The relation of an arrangement claim: a plan for an occasion holds one day at a time.
ARRANGEMENT_RELATION = "is planned for"


# Copular and assignment claims share one relation, so "editor is vim" and "editor: emacs" are comparable.
COPULAR_RELATION = "is"


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

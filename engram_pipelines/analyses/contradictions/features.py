"""Per-memory parsing for the contradiction rules: each memory once (a Python loop over memories, never over
pairs) into features: negation and change cues, polar words, a claim (subject, relation, value), numbers, times
and dates. Cached across nights by content hash (`cached_memory_features`)."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from engram_pipelines.analyses.contradictions.rules import (
    ARRANGEMENT_RELATION,
    CHANGE,
    COPULA,
    COPULAR_RELATION,
    NEGATION,
    STRONG_RELATION,
    WEAK_RELATION,
    RuleBook,
)
from engram_pipelines.warehouse.content_cache import ContentCache, computed_by_content, string_array

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
    ids: Sequence[str] | pa.Array | pa.ChunkedArray,
    contents: Sequence[str] | pa.Array | pa.ChunkedArray,
    rules: RuleBook,
    cache_root: Path,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """`memory_features` (`id` and only `columns` of them, when given), parsing each distinct content once
    across nights (cached by content hash under <cache_root>/contradiction_features/, per parser version and
    rules): a quiet night parses only what is new."""
    names = [n for n in (columns or FEATURES_SCHEMA.names) if n != "id"]
    schema = pa.schema([FEATURES_SCHEMA.field("id"), *(FEATURES_SCHEMA.field(n) for n in names)])
    if not len(ids):  # an empty store: nothing to parse (and no cached columns to shape a result from)
        return schema.empty_table()
    cache = ContentCache(cache_root / "contradiction_features" / f"v{FEATURES_VERSION}-{rules.fingerprint}")
    parsed = computed_by_content(
        contents,
        lambda texts: memory_features(texts, texts, rules).drop_columns(["id"]),
        cache,
        None if columns is None else names,
    )
    return parsed.add_column(0, "id", string_array(ids)).cast(schema)

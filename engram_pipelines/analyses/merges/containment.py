"""Does one memory say everything another says? The lexical test behind every merge (issue 18).

A merge hides its losers, so a loser must be contained in its canonical: nothing a user would want to recall
may be lost. Measured on real facts about people (LoCoMo, `bench/quality_real.py`), the cosine band alone merged
pairs that were different events, objects or people ("Calvin values being true to himself" into "Calvin values
making a difference") and swapped roles ("John expressed willingness to help Maria" into "Maria expressed her
willingness to help John"), and hid the more informative row in a third of its merges.

Each memory is reduced once to:
- `words`: its content words, lowercased and lightly stemmed ("parades" = "parade", "jamming" = "jam"), function
  words and names dropped;
- `names`: its capitalised words in order of first appearance (people, places, titles), function words dropped;
- `subject`: its first word when that is a name (who the sentence is about, or the speaker of a transcript line);
- `question`: whether it reports or asks a question ("John asked James if ..."): each question is its own event.

`inner` is contained in `outer` when it has no more content words than outer, at least `min_coverage` of them
are among outer's, and every one that is not is a generic word (`specific`: the words outside the shipped lists
of feelings, encouragement and filler, `data/chitchat_words.yaml`, and a few prepositions of a time span; words
of order never): paraphrases may differ in how they say a person felt ("feels motivated", "expresses
gratitude") but never in what happened or to what. On 389 agreed labelled LoCoMo pairs (the dev half's 102 and
317 more, `bench/quality_real_labels/`) coverage alone merged
"... made a plate in pottery class" into "... signed up for a pottery class", "... contacted her mentor" into
"... attended an advice group", "... spends time with the community" into "... teaches yoga": precision 0.72.
Every name of inner is in outer in the same order, both have the same subject, and neither is a question (unless
their words are identical). Of two rows that contain each other, the one with more content words, then the longer
text, is kept (`clusters`); the seeds' order parts only rows that say as much.
Numbers are checked apart (`clusters.band_pairs`: a changed value is not a duplicate).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from engram_pipelines.core.duck import duck

# The shipped word lists (pleasantries, generic words, conversation acts, contractions): what chit-chat is made
# of, and the only words a merge may lose.
WORDS_PATH = Path(__file__).resolve().parents[2] / "data" / "chitchat_words.yaml"

# Share of the loser's content words (names apart) that the canonical must have, besides losing no specific
# word. Alone it was the whole test: on all 389 agreed labelled LoCoMo pairs 0.4 merged 25, 18 rightly; 0.5 and
# 0.6 did no better than 0.857 (docs/quality.md).
DEFAULT_MIN_COVERAGE = 0.4

_WORD = re.compile(r"[A-Za-z0-9][\w'+\-]*")
_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "and",
        "or",
        "do",
        "does",
        "did",
        "very",
        "really",
        "so",
        "too",
        "quite",
        "just",
        "also",
        "still",
        "that",
        "which",
        "who",
        "whom",
        "her",
        "hers",
        "his",
        "their",
        "theirs",
        "he",
        "she",
        "they",
        "it",
        "its",
        "this",
        "these",
        "those",
        "has",
        "have",
        "had",
        "as",
        "from",
        "about",
        "into",
        "than",
        "then",
        "there",
        "here",
        "my",
        "your",
        "our",
        "me",
        "him",
        "them",
        "i",
        "we",
        "you",
        "us",
        "will",
        "would",
        "can",
        "could",
        "should",
        "shall",
        "may",
        "might",
        "must",
        "up",
        "out",
        "over",
        "more",
        "most",
        "some",
        "any",
        "all",
        "both",
        "each",
        "such",
        "not",
        "no",
        "nor",
        "if",
        "but",
        "because",
        "while",
        "when",
        "where",
        "what",
        "how",
        "why",
        "whose",
        "yes",
        "oh",
        "hey",
        "hi",
    ]
)
_QUESTION_WORDS = frozenset({"asked", "asks", "ask", "asking", "inquired", "inquires", "wondered", "wonders"})
_SUFFIXES = ("ing", "ed", "es", "s", "ly")
# A final "s" of these is the word's own: "express" and "expresses" meet at "express", "focus" and "focuses" at
# "focus" (stripped, "express" became "expres" and missed the word lists).
_KEEP_FINAL_S = ("ss", "us", "is")

CONTAINMENT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("words", pa.list_(pa.string()), nullable=False),
        pa.field("specific", pa.list_(pa.string()), nullable=False),  # the words a merge may not lose
        pa.field("names", pa.list_(pa.string()), nullable=False),
        pa.field("subject", pa.string()),
        pa.field("question", pa.bool_(), nullable=False),
    ]
)
# The same, of a text alone (what `texts.cached_merge_features` keeps per distinct content).
TEXT_CONTAINMENT_SCHEMA = pa.schema(list(CONTAINMENT_SCHEMA)[1:])


def stem(word: str) -> str:
    """Lowercase, without a possessive or one common suffix (only for words of five letters or more); a consonant
    doubled before "-ing"/"-ed" is single again, as in the word ("jamming" = "jam"; "falling" = "fall")."""
    word = word.lower().strip("'")
    if word.endswith("'s"):
        word = word[:-2]
    for suffix in _SUFFIXES:
        if len(word) > 4 and word.endswith(suffix) and not (suffix == "s" and word.endswith(_KEEP_FINAL_S)):
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            return word
    return word


def base(word: str) -> str:
    """`stem` without a final "e": "appreciate", "appreciates" and "appreciated" meet."""
    return stem(word).removesuffix("e")


@cache
def word_lists() -> dict[str, Any]:
    return yaml.safe_load(WORDS_PATH.read_text())


@cache
def _generic() -> frozenset[str]:
    data = word_lists()
    return frozenset(base(w) for group in ("pleasantries", "generic") for w in data[group].split())


# Prepositions of a time span, which only link what a sentence says ("an accident during the road trip"): a merge
# may lose them. They stay content words (chit-chat counts them; dropped there, a knowledge sentence fell below
# its count). "through", "around", "across" were left out: "swam across the lake" is not "around" it.
_LINKING_WORDS = frozenset(["dur", "throughout", "amid", "amidst"])  # stems ("during" -> "dur")
# Words of order, which the generic list holds for chit-chat ("after" as filler) but which a merge may never
# lose: "went hiking after the wedding" is another time than "before the wedding".
_ORDER_WORDS = frozenset(["after", "before", "until"])


def specific_words(words: Sequence[str]) -> list[str]:
    """The content words (`memory_terms` stems) that are neither generic nor linking: what a merge may not lose."""
    generic = _generic()
    return [
        w
        for w in words
        if w in _ORDER_WORDS or (w.removesuffix("e") not in generic and w not in _LINKING_WORDS)
    ]


# Numbers in digits, and in words: "Nate won his fourth tournament" is another event than "won a big tournament".
_NUMBER = re.compile(
    r"\d+(?:[.,:]\d+)*|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|hundred|"
    r"thousand|million|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|once|twice|dozen)\b",
    re.IGNORECASE,
)


def numbers_of(contents: Sequence[str]) -> list[tuple[str, ...]]:
    """Each text's numbers (digits and number words), sorted: two rows whose numbers differ state different
    values or events."""
    return [tuple(sorted(n.lower() for n in _NUMBER.findall(c))) for c in contents]


def memory_terms(content: str) -> tuple[list[str], list[str], str | None, bool]:
    """(words, names, subject, question) of one memory; see the module docstring."""
    tokens = _WORD.findall(content or "")
    names: list[str] = []
    for token in tokens:
        if token[0].isupper() and token.lower() not in _FUNCTION_WORDS and (name := stem(token)) not in names:
            names.append(name)
    # Names are compared on their own: counted as words, the subject both rows share would make "Calvin values
    # being true to himself" half-covered by "Calvin values making a difference".
    words = sorted({stem(t) for t in tokens if t.lower() not in _FUNCTION_WORDS} - set(names))
    first = tokens[0] if tokens else ""
    subject = stem(first) if first[:1].isupper() and first.lower() not in _FUNCTION_WORDS else None
    question = content.rstrip().endswith("?") or any(t.lower() in _QUESTION_WORDS for t in tokens)
    return words, names, subject, question


def text_containment(contents: Sequence[str]) -> pa.Table:
    """One TEXT_CONTAINMENT_SCHEMA row per text (a Python pass: callers parse the memories of a band only)."""
    terms = [memory_terms(c) for c in contents]
    return pa.table(
        [
            pa.array([t[0] for t in terms], pa.list_(pa.string())),
            pa.array([specific_words(t[0]) for t in terms], pa.list_(pa.string())),
            pa.array([t[1] for t in terms], pa.list_(pa.string())),
            pa.array([t[2] for t in terms], pa.string()),
            pa.array([t[3] for t in terms], pa.bool_()),
        ],
        schema=TEXT_CONTAINMENT_SCHEMA,
    )


def containment_features(ids: Sequence[str], contents: Sequence[str]) -> pa.Table:
    """One CONTAINMENT_SCHEMA row per memory."""
    return text_containment(contents).add_column(
        0, CONTAINMENT_SCHEMA.field("id"), pa.array(list(ids), pa.string())
    )


def contained_sql(inner: str, outer: str, min_coverage: float) -> str:
    """A DuckDB boolean expression: is relation `inner`'s memory contained in `outer`'s (CONTAINMENT_SCHEMA
    columns)? Held equal to `is_contained` by the tests."""
    return f"""(
        {inner}.subject IS NOT DISTINCT FROM {outer}.subject
        AND list_filter({outer}.names, lambda n: list_contains({inner}.names, n)) = {inner}.names
        AND CASE
            WHEN {inner}.words = {outer}.words THEN true
            WHEN {inner}.question OR {outer}.question OR len({inner}.words) = 0 THEN false
            ELSE len({inner}.words) <= len({outer}.words)
                AND len(list_intersect({inner}.words, {outer}.words)) >= {float(min_coverage)!r} * len({inner}.words)
                AND len(list_filter({inner}.specific, lambda w: NOT list_contains({outer}.words, w))) = 0
        END
    )"""


def is_contained(inner: str, outer: str, min_coverage: float = DEFAULT_MIN_COVERAGE) -> bool:
    """The same test for two texts, plainly (the reference `contained_sql` is held to)."""
    words_i, names_i, subject_i, question_i = memory_terms(inner)
    words_o, names_o, subject_o, question_o = memory_terms(outer)
    if subject_i != subject_o or [n for n in names_o if n in names_i] != names_i:
        return False
    if words_i == words_o:
        return True
    if question_i or question_o or not words_i or len(words_i) > len(words_o):
        return False
    if any(w not in words_o for w in specific_words(words_i)):
        return False
    return len(set(words_i) & set(words_o)) >= min_coverage * len(words_i)


def directed_pairs(pairs: pa.Table, features: pa.Table, min_coverage: float) -> pa.Table:
    """`pairs` (left_id, right_id, ...) with `left_in_right` and `right_in_left`, and each side's number of
    content words (`left_words`, `right_words`: how informative it is); only pairs where one side is contained."""
    with duck(joins_as_written=True) as con:
        con.register("p", pairs)
        con.register("f", features)
        return con.sql(
            f"""
            SELECT * FROM (
                SELECT p.*, {contained_sql("a", "b", min_coverage)} AS left_in_right,
                    {contained_sql("b", "a", min_coverage)} AS right_in_left,
                    len(a.words) AS left_words, len(b.words) AS right_words
                FROM p JOIN f a ON a.id = p.left_id JOIN f b ON b.id = p.right_id
            ) WHERE left_in_right OR right_in_left
            ORDER BY left_id, right_id
            """
        ).to_arrow_table()


SAME_FACT_SCHEMA = pa.schema(
    [
        pa.field("names", pa.list_(pa.string())),
        # Every name but the subject (a name opening the text: the subject or just a capitalised word).
        pa.field("tail", pa.list_(pa.string())),
        pa.field("numbers", pa.list_(pa.string())),
    ]
)


def same_fact_features(contents: Sequence[str]) -> pa.Table:
    """One SAME_FACT_SCHEMA row per text: what `same_fact_pairs` compares."""
    terms = [memory_terms(c) for c in contents]
    return pa.table(
        [
            pa.array([t[1] for t in terms], pa.list_(pa.string())),
            pa.array([[n for n in t[1] if n != t[2]] for t in terms], pa.list_(pa.string())),
            pa.array([list(n) for n in numbers_of(contents)], pa.list_(pa.string())),
        ],
        schema=SAME_FACT_SCHEMA,
    )


def same_fact_pairs(pairs: pa.Table, ids: Sequence[str], features: pa.Table) -> pa.Table:
    """The `pairs` (left_id, right_id, ...) whose two rows may repeat one fact, for a semantic node: the same
    numbers, and each row's names (but a leading one, which may be any capitalised word opening a sentence:
    "Again", "Another") among the other's names. "Maya's phone number is 617-555-0142" and "... is
    720-555-0199", "Maya lives in Boston" and "Maya's sister Ana lives in Denver", "Tom uses vim" and "Tom
    switched his editor to VS Code" are related, not a repetition: on a hand-made history each became a node.
    `ids`: the rows the pairs name; `features`: their `same_fact_features`, row for row."""
    with duck(joins_as_written=True) as con:
        con.register("p", pairs)
        con.register(
            "f", features.select(SAME_FACT_SCHEMA.names).add_column(0, "id", pa.array(list(ids), pa.string()))
        )
        return con.sql(
            """
            SELECT p.* FROM p JOIN f a ON a.id = p.left_id JOIN f b ON b.id = p.right_id
            WHERE a.numbers = b.numbers AND list_has_all(b.names, a.tail) AND list_has_all(a.names, b.tail)
            ORDER BY p.left_id, p.right_id
            """
        ).to_arrow_table()

"""Contradiction rules (issue 6): every rule fires on its cases and stays quiet on its guards; the vectorised
`detect` agrees with the one-pair reference; structural and explicit candidates; custom rule files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
from pathlib import Path

import pyarrow as pa
import pytest

from engram_pipelines.analyses.contradictions.candidates import (
    explicit_candidates,
    explicit_candidates_of,
    structural_candidates,
)
from engram_pipelines.analyses.contradictions.detect import DETECT_COLUMNS, detect
from engram_pipelines.analyses.contradictions.features import memory_features, memory_row
from engram_pipelines.analyses.contradictions.reference import rule_for_pair
from engram_pipelines.analyses.contradictions.rules import DEFAULT_RULES_PATH, load_rules

RULES = load_rules()
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def pairs_of(rows: list[tuple[str, str]], times: dict[str, dt.datetime], **extra: list) -> pa.Table:
    timestamp = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "left_id": pa.array([a for a, _ in rows], pa.string()),
            "right_id": pa.array([b for _, b in rows], pa.string()),
            "left_created_at": pa.array([times[a] for a, _ in rows], timestamp),
            "right_created_at": pa.array([times[b] for _, b in rows], timestamp),
            **extra,
        }
    )


def verdict(older: str, newer: str, rules=RULES) -> tuple[str, str] | None:
    """(rule, reason) for one pair through `detect`, checked against the one-pair reference."""
    features = memory_features(["old", "new"], [older, newer], rules)
    times = {"old": T0, "new": T0 + dt.timedelta(days=1)}
    found = detect(pairs_of([("old", "new")], times), features, rules).to_pylist()
    got = (found[0]["rule"], found[0]["reason"]) if found else None
    reference = rule_for_pair(memory_row("old", older, rules), memory_row("new", newer, rules), rules)
    assert got == reference, f"detect {got} but the reference says {reference}"
    return got


def rule_of(older: str, newer: str, rules=RULES) -> str | None:
    result = verdict(older, newer, rules)
    return result[0] if result else None


# -- the issue's examples ---------------------------------------------------------------------------------------


def test_the_issue_examples():
    assert rule_of("I prefer vim", "I prefer vim with plugins") is None
    assert verdict("my editor is emacs", "editor is vim") == (
        "value_swap",
        "value swap: editor 'emacs' vs 'vim'",
    )
    assert rule_of("this is fine", "this is terrible") is None
    assert rule_of("I don't use vim", "I never use vim") is None
    assert rule_of("The API uses OAuth2", "The API no longer uses OAuth2") in ("negation", "change")
    assert rule_of("standup is at 9am", "standup is at 10am") == "temporal"
    assert rule_of("the team has 5 people", "the team has 7 people") == "numeric"
    assert rule_of("Alice lives in Paris", "Bob lives in Berlin") is None


# -- 1. negation asymmetry ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer", "reason"),
    [
        (
            "The API uses OAuth2",
            "The API no longer uses OAuth2",
            "negation: only the newer row is negated ('no longer')",
        ),
        (
            "The cache is enabled",
            "The cache is not enabled",
            "negation: only the newer row is negated ('not')",
        ),
        (
            "Bob works at Acme",
            "Bob doesn't work at Acme anymore",
            "negation: only the newer row is negated ('doesn't')",
        ),
        (
            "I never drink coffee",
            "I drink coffee every morning",
            "negation: only the older row is negated ('never')",
        ),
        (
            "Deploys cannot run on Fridays",
            "Deploys run on Fridays",
            "negation: only the older row is negated ('cannot')",
        ),
    ],
)
def test_negation_fires_when_exactly_one_side_is_negated(older, newer, reason):
    assert verdict(older, newer) == ("negation", reason)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I don't use vim", "I never use vim"),  # both negated
        ("The API doesn't use SAML", "The API no longer uses OAuth2"),  # both negated, different values
        ("It works", "It doesn't work"),  # pronoun subject
        ("Alice lives in Berlin", "Alice doesn't live in Paris"),  # denies another value: consistent
        ("Alice lives in Paris", "Bob doesn't live in Paris"),  # different subjects
        ("Alice lives in Paris", "Alice doesn't work at Acme"),  # different relations
    ],
)
def test_negation_guards(older, newer):
    assert rule_of(older, newer) is None


# -- 2. change indicator in the newer row only ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer", "cue"),
    [
        ("I use vim", "I switched to emacs", "switched to"),
        ("Alice lives in Paris", "Alice moved to Berlin", "moved to"),
        ("We deploy with Jenkins", "We deploy with GitHub Actions now", "now"),
        ("The build uses make", "The build uses bazel instead", "instead"),
    ],
)
def test_change_fires_on_a_change_word_in_the_newer_row(older, newer, cue):
    assert verdict(older, newer) == ("change", f"change: the newer row says '{cue}'")


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I switched to emacs", "I use emacs"),  # the change word is in the older row only
        ("I use vim", "I now use vim"),  # same value: a confirmation
        ("I use vim", "I now use vim with plugins"),  # elaboration of the same value
        ("I switched to vim", "I switched to emacs"),  # both sides with a change word
        ("We now deploy on Fridays", "We now deploy on Mondays"),  # both sides with a change word
        ("This is slow", "This is now fast"),  # pronoun subject
    ],
)
def test_change_guards(older, newer):
    assert rule_of(older, newer) is None


# -- 3. polar opposites ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer", "reason"),
    [
        ("I like vim", "I dislike vim", "polar: 'like' vs 'dislike'"),
        ("Alice loves jazz", "Alice hates jazz", "polar: 'love' vs 'hate'"),
        ("The feature flag is enabled", "The feature flag is disabled", "polar: 'enable' vs 'disable'"),
        ("I prefer tabs", "I avoid tabs", "polar: 'prefer' vs 'avoid'"),
        ("Bob agrees with the plan", "Bob disagrees with the plan", "polar: 'agree' vs 'disagree'"),
        ("A woman is sitting on a bench", "A woman is standing", "polar: 'sit' vs 'stand'"),  # rest contained
        ("I really like vim", "I dislike vim", "polar: 'like' vs 'dislike'"),
    ],
)
def test_polar_fires_on_opposite_poles_about_the_same_thing(older, newer, reason):
    assert verdict(older, newer) == ("polar", reason)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I like vim", "I dislike emacs"),  # opposite poles, different things
        ("I like vim", "I like vim a lot"),  # same pole
        ("It is enabled", "It is disabled"),  # pronoun subject
        ("I don't like vim", "I don't dislike vim"),  # both negated
    ],
)
def test_polar_guards(older, newer):
    assert rule_of(older, newer) is None


# -- 4. value swap ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer", "reason"),
    [
        ("my editor is emacs", "editor is vim", "value swap: editor 'emacs' vs 'vim'"),
        ("Alice lives in Paris", "Alice lives in Berlin", "value swap: alice lives in 'paris' vs 'berlin'"),
        ("Bob works at Acme", "Bob works at Globex", "value swap: bob works at 'acme' vs 'globex'"),
        ("Carol works for Dave", "Carol works for Erin", "value swap: carol works for 'dave' vs 'erin'"),
        (
            "The user prefers dark mode",
            "The user prefers light mode",
            "value swap: user prefers 'dark mode' vs 'light mode'",
        ),
        ("The API uses REST", "The API uses gRPC", "value swap: api uses 'rest' vs 'grpc'"),
        (
            "Our team is based in Oslo",
            "Our team is based in Lisbon",
            "value swap: team is based in 'oslo' vs 'lisbon'",
        ),
        (
            "database: postgres",
            "database = mysql",
            "value swap: database 'postgres' vs 'mysql'",
        ),  # assignment forms
        (
            "The primary database is Postgres",
            "primary database: MySQL",
            "value swap: primary database 'postgres' vs 'mysql'",
        ),
        ("Alice is 30", "Alice is 31 years old", "value swap: alice '30' vs '31 years old'"),
        (
            "I'm based in Berlin",
            "I am based in Paris",
            "value swap: i is based in 'berlin' vs 'paris'",
        ),  # contraction
        ("We're using Postgres", "We use MySQL", "value swap: we uses 'postgres' vs 'mysql'"),
        # A hand-made two-user history: a qualifier after a relational value, a modifier before a slot noun.
        (
            "Tom works at Acme Corp as a software engineer.",
            "Tom works at Globex as a staff engineer.",
            "value swap: tom works at 'acme corp' vs 'globex'",
        ),
        (
            "Tom uses vim as his editor.",
            "Tom uses VS Code in the terminal.",
            "value swap: tom uses 'vim' vs 'vs code'",
        ),
    ],
)
def test_value_swap_fires_on_the_same_subject_with_another_value(older, newer, reason):
    assert verdict(older, newer) == ("value_swap", reason)


def test_a_new_phone_number_contradicts_the_old_one():
    """ "new" before a slot noun names which value, not another slot (the numbers' frame decides first)."""
    assert verdict("Maya's phone number is 617-555-0142.", "Maya's new phone number is 720-555-0199.") == (
        "numeric",
        "numeric: maya's phone number '617, 555, 0142' vs '720, 555, 0199'",
    )
    assert rule_of("Maya lives in Boston.", "Maya moved to Denver for a new job.") == "change"


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("I prefer vim", "I prefer vim with plugins"),  # elaboration: token superset
        ("I prefer vim with plugins", "I prefer vim"),  # the other way round
        ("Bob works at Google", "Bob works at Google, in the Zurich office"),  # clause cut, same value
        ("editor is vim", "My editor is Vim."),  # identical after normalising
        ("Alice lives in Paris", "Bob lives in Berlin"),  # different subjects
        ("Alice lives in Paris", "Alice works at Acme"),  # different relations
        ("this is fine", "this is terrible"),  # pronoun-only subject
        ("They are happy", "They are tired"),  # pronoun-only subject
        ("Alice has a cat", "Alice has a dog"),  # multi-valued relation
        ("I like tea", "I like coffee"),  # what a person likes is many-valued
        ("Andrew enjoys hiking in the mountains", "Andrew enjoys camping with his family"),
        ("John is part of a basketball team", "John is reading an inspiring book"),  # copular, not a slot
        (
            "Bob works at Acme",
            "Bob works at a small bakery downtown",
        ),  # a description, not a comparable value
        ("I don't use vim", "I don't use emacs"),  # both negated
    ],
)
def test_value_swap_guards(older, newer):
    assert rule_of(older, newer) is None


# -- 5. and 6. numeric and temporal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer", "reason"),
    [
        ("the team has 5 people", "the team has 7 people", "numeric: team has '5' vs '7'"),
        ("timeout = 30s", "timeout = 60s", "numeric: timeout '30' vs '60'"),
        ("Our budget is $5,000", "Our budget is $7,500", "numeric: budget '5,000' vs '7,500'"),
        (
            "The cluster has three nodes",
            "The cluster has five nodes",
            "numeric: cluster has 'three' vs 'five'",
        ),
        ("Python version is 3.11", "Python version is 3.12", "numeric: python version '3.11' vs '3.12'"),
        (
            "Deployed release 42 today",
            "Deployed release 43 today",
            "numeric: deployed release <num> today '42' vs '43'",
        ),
    ],
)
def test_numeric_fires_on_different_numbers_in_the_same_frame(older, newer, reason):
    assert verdict(older, newer) == ("numeric", reason)


@pytest.mark.parametrize(
    ("older", "newer", "reason"),
    [
        ("standup is at 9am", "standup is at 10am", "temporal: standup '9am' vs '10am'"),
        ("The sync is at 10:30", "The sync is at 11:00", "temporal: sync '10:30' vs '11:00'"),
        ("We meet at noon", "We meet at 1pm", "temporal: we meet at <time> 'noon' vs '1pm'"),
        (
            "Release date: 2026-03-01",
            "Release date: 2026-03-08",
            "temporal: release date '2026-03-01' vs '2026-03-08'",
        ),
        ("The review is on Monday", "The review is on Tuesday", "temporal: review 'monday' vs 'tuesday'"),
        ("The launch is on March 3", "The launch is on March 10", "temporal: launch 'march 3' vs 'march 10'"),
        (
            "The launch is on March 3",
            "The launch is on 2026-03-10",
            "temporal: launch 'march 3' vs '2026-03-10'",
        ),
        (
            "The audit is on 2025-03-03",
            "The audit is on 2026-03-03",
            "temporal: audit '2025-03-03' vs '2026-03-03'",
        ),
    ],
)
def test_temporal_fires_on_different_times_and_dates(older, newer, reason):
    assert verdict(older, newer) == ("temporal", reason)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("standup is at 9am", "standup is at 9:00"),  # the same time written twice
        ("standup is at 9am", "standup is at 9 a.m."),
        ("The launch is on March 3", "The launch is on 2026-03-03"),  # a date without a year is another kind
        ("the team has 5 people", "the team has 7 rooms"),  # another unit: another frame
        ("Room 5 is free", "Room 7 is free"),  # a number in the subject names a thing
        ("standup is not at 9am", "standup is at 10am"),  # denies another time: consistent
        ("It costs 5 dollars", "It costs 7 dollars"),  # pronoun subject
    ],
)
def test_quantity_guards(older, newer):
    assert rule_of(older, newer) is None


# -- features --------------------------------------------------------------------------------------------------


def test_features_parse_each_memory_once_into_columns():
    texts = [
        "My editor is Emacs",
        "The team has 5 people",
        "Standup is at 1:30pm",
        "I dislike vim",
        "It broke",
    ]
    rows = memory_features([f"m{i}" for i in range(len(texts))], texts, RULES).to_pylist()
    editor, team, standup, dislike, pronoun = rows
    assert (editor["subject"], editor["relation"], editor["value"], editor["form"]) == (
        "editor",
        "is",
        "emacs",
        "copular",
    )
    assert (team["subject"], team["relation"], team["number"], team["unit"]) == ("team", "has", 5.0, "people")
    assert standup["time_minutes"] == 13 * 60 + 30 and standup["temporals"] == "13:30"
    assert dislike["poles"] == ["dislike"] and dislike["subject"] is None
    assert pronoun["pronoun_subject"] and not editor["pronoun_subject"]


def test_features_table_has_one_row_per_memory_in_order():
    table = memory_features(["b", "a"], ["x is 1", ""], RULES)
    assert table.column("id").to_pylist() == ["b", "a"]
    assert table.column("subject").to_pylist() == ["x", None]


# -- detect: orientation, passthrough, edge cases --------------------------------------------------------------


def test_newer_row_by_created_at_decides_the_orientation():
    features = memory_features(["a", "b"], ["editor is vim", "editor is emacs"], RULES)
    times = {"a": T0 + dt.timedelta(days=3), "b": T0}  # a is newer although it is on the left
    found = detect(pairs_of([("a", "b")], times, batch=["x"]), features, RULES)
    assert found.column_names == [*DETECT_COLUMNS, "left_created_at", "right_created_at", "batch"]
    assert found.select([*DETECT_COLUMNS, "batch"]).to_pylist() == [
        {
            "left_id": "a",
            "right_id": "b",
            "newer_id": "a",
            "older_id": "b",
            "rule": "value_swap",
            "reason": "value swap: editor 'emacs' vs 'vim'",
            "batch": "x",
        }
    ]


def test_change_rule_reads_the_newer_row_whichever_side_it_is_on():
    features = memory_features(
        ["a", "b"], ["We deploy with GitHub Actions now", "We deploy with Jenkins"], RULES
    )
    old_left = {"a": T0, "b": T0 + dt.timedelta(days=1)}
    new_left = {"a": T0 + dt.timedelta(days=1), "b": T0}
    assert detect(pairs_of([("a", "b")], old_left), features, RULES).num_rows == 0
    assert detect(pairs_of([("a", "b")], new_left), features, RULES).column("rule").to_pylist() == ["change"]


def test_unknown_ids_never_fire_and_empty_input_gives_an_empty_table():
    features = memory_features(["a"], ["editor is vim"], RULES)
    times = {"a": T0, "zz": T0 + dt.timedelta(days=1)}
    assert detect(pairs_of([("a", "zz")], times), features, RULES).num_rows == 0
    empty = detect(pairs_of([], {}), features, RULES)
    assert empty.num_rows == 0 and empty.column_names == [
        *DETECT_COLUMNS,
        "left_created_at",
        "right_created_at",
    ]


def test_detect_needs_created_at_on_both_sides():
    features = memory_features(["a", "b"], ["x is 1", "x is 2"], RULES)
    with pytest.raises(ValueError, match="left_created_at"):
        detect(pa.table({"left_id": ["a"], "right_id": ["b"]}), features, RULES)


SENTENCES = [
    "my editor is emacs",
    "editor is vim",
    "I prefer vim",
    "I prefer vim with plugins",
    "I dislike vim",
    "I like vim",
    "The API uses OAuth2",
    "The API no longer uses OAuth2",
    "standup is at 9am",
    "standup is at 10am",
    "the team has 5 people",
    "the team has 7 people",
    "Alice lives in Paris",
    "Alice lives in Berlin",
    "Alice doesn't live in Rome",
    "I use vim",
    "I switched to emacs",
    "this is fine",
    "this is terrible",
    "The cache is enabled",
    "The cache is disabled",
    "We now meet on Monday",
    "Release date: 2026-03-01",
    "I never use vim",
    "Deploys run on Fridays",
]


def test_detect_agrees_with_the_one_pair_reference_on_every_ordered_pair():
    ids = [f"s{i:02d}" for i in range(len(SENTENCES))]
    times = {memory_id: T0 + dt.timedelta(hours=i) for i, memory_id in enumerate(ids)}
    ordered = list(itertools.permutations(ids, 2))
    found = detect(pairs_of(ordered, times), memory_features(ids, SENTENCES, RULES), RULES)
    got = {(r["left_id"], r["right_id"]): (r["rule"], r["reason"]) for r in found.to_pylist()}
    rows = {
        memory_id: memory_row(memory_id, text, RULES) for memory_id, text in zip(ids, SENTENCES, strict=True)
    }
    for left, right in ordered:
        older, newer = (left, right) if times[left] <= times[right] else (right, left)
        assert got.get((left, right)) == rule_for_pair(rows[older], rows[newer], RULES), (left, right)
    assert {rule for rule, _ in got.values()} >= {
        "negation",
        "change",
        "polar",
        "value_swap",
        "numeric",
        "temporal",
    }


# -- explicit links ----------------------------------------------------------------------------------------------


def test_explicit_candidates_from_metadata():
    ids = ["a", "b", "c", "d", "e"]
    metadata = [
        json.dumps({"contradicts": "b"}),
        json.dumps({"contradicts": ["a", "c", "gone"]}),  # a-b again from the other side; an unknown id
        "not json",
        {"contradictionWith": "e"},  # the seed's marker, as a dict
        json.dumps({"contradicts": "e"}),  # a self-link
    ]
    pairs = explicit_candidates(ids, metadata, RULES).to_pylist()
    assert pairs == [
        {"left_id": "a", "right_id": "b", "explicit": True},
        {"left_id": "b", "right_id": "c", "explicit": True},
        {"left_id": "d", "right_id": "e", "explicit": True},
    ]


def test_explicit_candidates_of_a_table_are_those_of_every_row_parsed():
    """The fast path parses only rows whose text can hold a key; escaped keys, lists of ids and numbers,
    invalid JSON, nulls, self-links and unknown ids give the pairs of parsing every row."""
    metadata = [
        json.dumps({"contradicts": "b"}),
        json.dumps({"contradicts": ["a", "c", "gone", 7, 1.5, None]}),
        "not json, but contradicts",
        json.dumps({"contradictionWith": "e", "note": "a \\ backslash"}),
        json.dumps({"contradicts": "e"}),
        '{"contr\\u0061dicts": "a"}',  # an escaped key: the text never spells it
        json.dumps({"other": "contradicts"}),
        None,
        json.dumps(["contradicts", "a"]),
        json.dumps({"contradicts": ["g", "g"]}),
        json.dumps({"tags": ["x"]}),
    ]
    ids = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "7", "k"]
    table = pa.table({"id": ids, "metadata": pa.array(metadata, pa.string())})
    for rules in (RULES, dataclasses.replace(RULES, explicit_keys=("contradicts",))):
        expected = explicit_candidates(ids, metadata, rules)
        assert explicit_candidates_of(table, rules).equals(expected)
    assert {tuple(p.values())[:2] for p in explicit_candidates(ids, metadata, RULES).to_pylist()} == {
        ("a", "b"),
        ("b", "c"),
        ("7", "b"),
        ("a", "f"),
        ("7", "g"),
        ("d", "e"),  # contradictionWith, the seed's marker, is a key of the default rules
    }


def test_explicit_pairs_fire_even_where_the_heuristics_are_silent():
    features = memory_features(["a", "b"], ["this is fine", "the weather was nice"], RULES)
    times = {"a": T0, "b": T0 + dt.timedelta(days=1)}
    found = detect(pairs_of([("a", "b")], times, explicit=[True]), features, RULES).to_pylist()
    assert [(r["rule"], r["reason"], r["explicit"]) for r in found] == [
        ("explicit", "explicit: metadata link", True)
    ]
    assert detect(pairs_of([("a", "b")], times, explicit=[False]), features, RULES).num_rows == 0


def test_a_heuristic_reason_wins_over_the_explicit_link():
    features = memory_features(["a", "b"], ["editor is vim", "editor is emacs"], RULES)
    times = {"a": T0, "b": T0 + dt.timedelta(days=1)}
    assert detect(pairs_of([("a", "b")], times, explicit=[True]), features, RULES).column(
        "rule"
    ).to_pylist() == ["value_swap"]


# -- structural candidates ---------------------------------------------------------------------------------------


def structural(texts: dict[str, str], namespaces: dict[str, str] | None = None, limit: int = 50) -> list:
    ids = list(texts)
    features = memory_features(ids, list(texts.values()), RULES)
    table = pa.table(
        {
            "id": ids,
            "namespace": [(namespaces or {}).get(i, "ns") for i in ids],
            "created_at": pa.array(
                [T0 + dt.timedelta(days=n) for n in range(len(ids))], pa.timestamp("us", tz="UTC")
            ),
        }
    )
    return structural_candidates(features, table, group_limit=limit), features


def test_structural_join_finds_a_value_swap_whatever_the_cosine():
    candidates, features = structural(
        {
            "a": "Alice lives in Paris",
            "b": "Alice lives in Berlin",
            "c": "Bob lives in Berlin",  # another subject
            "d": "Alice doesn't live in Rome",  # negated: asserts no value
            "e": "Alice lives in Paris",  # the same value as a
            "f": "this is fine",  # pronoun subject
            "g": "Alice has a cat",  # multi-valued, no quantity
            "h": "Alice has a dog",
        }
    )
    assert [(r["left_id"], r["right_id"]) for r in candidates.to_pylist()] == [("a", "b"), ("b", "e")]
    found = detect(candidates, features, RULES).to_pylist()
    assert [(r["newer_id"], r["reason"]) for r in found] == [
        ("b", "value swap: alice lives in 'paris' vs 'berlin'"),
        ("e", "value swap: alice lives in 'berlin' vs 'paris'"),
    ]


def test_structural_join_skips_what_a_person_is_does_or_enjoys():
    """Real facts about people (LoCoMo): a join on every copular or relational form flagged 1.6 pairs per
    memory, none real. Only single-valued slots with comparable values are joined."""
    candidates, _ = structural(
        {
            "a": "Andrew enjoys hiking in the mountains with his dog.",
            "b": "Andrew enjoys camping with his family.",
            "c": "John is part of a basketball team.",
            "d": "John is reading an inspiring book.",
            "e": "John used to play drums when he was younger.",
            "f": "John uses resources like a book to improve his game development skills.",
            "g": "Dave works at a car maintenance shop.",
            "h": "Dave works at a big garage downtown that fixes classic cars.",
            "i": "Maya lives in Boston.",
            "j": "Maya lives in Denver.",
        }
    )
    assert [(r["left_id"], r["right_id"]) for r in candidates.to_pylist()] == [("i", "j")]


def test_structural_join_reads_a_transcript_line_as_the_speaker_s_utterance():
    candidates, features = structural(
        {
            "a": "John: Hey Tim",
            "b": "John: Thanks",
            "c": "John: I live in Boston.",
            "d": "John: I moved to Seattle last month!",
            "e": "Tim: I live in London.",
        }
    )
    assert [(r["left_id"], r["right_id"]) for r in candidates.to_pylist()] == [("c", "d")]
    assert [(r["newer_id"], r["rule"]) for r in detect(candidates, features, RULES).to_pylist()] == [
        ("d", "change")
    ]


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("John: Hey Tim", "John: Thanks"),
        ("Caroline: Hey Melanie! Just wanted to say hi!", "Caroline: Hey Melanie! Long time no talk!"),
        ("John: Take care, bye!", "John: Bye for now!"),
        ("Deborah: Certainly! Here's the confirmation.", "Deborah: Stay safe!  Bye!"),
        ("Caroline: I live in Boston", "Melanie: I live in Paris"),  # two speakers, two subjects
        (
            "Caroline mentioned that playing the guitar helps her express her emotions.",
            "Caroline started playing acoustic guitar about five years ago as a way to express herself.",
        ),  # a change word in a different fact
        (
            "James joined an online gaming tournament and made it to the semifinals, winning some rounds.",
            "James played in the final rounds of the online gaming tournament but did not make it to the finals.",
        ),  # a negation in a different fact
    ],
)
def test_utterances_and_different_facts_never_fire(older, newer):
    assert rule_of(older, newer) is None


@pytest.mark.parametrize(
    ("older", "newer", "rule"),
    [
        ("Caroline: I live in Boston", "Caroline: I moved to Paris", "change"),
        ("Caroline: my editor is emacs", "Caroline: my editor is vim", "value_swap"),
        ("Editor: emacs", "Editor: vim", "value_swap"),  # a slot noun before the colon is an assignment
    ],
)
def test_an_utterance_contradicts_the_same_speaker_s_own_claim(older, newer, rule):
    assert rule_of(older, newer) == rule


@pytest.mark.parametrize(
    ("older", "newer", "rule"),
    [
        (
            "Priya agreed to meet Tom on Thursday for a lunch date.",
            "Tom proposed the lunch date for Tuesday at 1.",
            "temporal",
        ),
        (
            "We scheduled the budget meeting for Monday.",
            "The budget meeting was rescheduled to Wednesday.",
            "temporal",
        ),
        ("Ana: let's book a call next Friday", "Ana: I will set up the call on Monday instead", "change"),
    ],
)
def test_a_plan_moved_to_another_weekday_is_a_conflict(older, newer, rule):
    assert rule_of(older, newer) == rule


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # past or recurring days are events, not plans: both can be true
        ("Priya met Tom last Thursday for a lunch date.", "Priya will meet Tom on Tuesday for a lunch date."),
        ("Priya has a lunch date every Thursday.", "Priya will meet Tom on Tuesday for a lunch date."),
        ("Priya plans lunch dates on Thursdays.", "Priya will meet Tom on Tuesday for a lunch date."),
        # two occasions: the word before the noun names which one
        ("We scheduled the budget meeting for Monday.", "We scheduled the design meeting for Wednesday."),
        # no planning word: what happened, not what is planned
        ("Priya had a lunch date on Thursday.", "Priya had a lunch date on Tuesday."),
        # the same day said twice
        ("Priya agreed to a lunch date on Thursday.", "Tom suggested the lunch date for Thursday at noon."),
    ],
)
def test_plans_that_can_both_hold_never_fire(older, newer):
    assert rule_of(older, newer) is None


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("The Nimbus-26 build ships on June 26.", "The Nimbus-12 build ships on June 26."),
        (
            "Incident INC-10429: the search service went down.",
            "Incident INC-10169: the search service went down.",
        ),
        ("Reviewed pull request #17525 with Rosa.", "Reviewed pull request #17538 with Rosa."),
    ],
)
def test_a_number_in_a_name_is_not_a_quantity(older, newer):
    """Two builds, two incidents, two pull requests: on the 30k demo these were flagged as numeric conflicts."""
    assert rule_of(older, newer) is None


def test_structural_join_pairs_plans_for_one_occasion_whatever_the_cosine():
    candidates, features = structural(
        {
            "a": "Priya agreed to meet Tom on Thursday for a lunch date.",
            "b": "Tom proposed the lunch date for Tuesday at 1, after Priya's class.",
            "c": "Priya went hiking last Sunday.",
        }
    )
    assert [(r["left_id"], r["right_id"]) for r in candidates.to_pylist()] == [("a", "b")]
    assert [(r["newer_id"], r["rule"]) for r in detect(candidates, features, RULES).to_pylist()] == [
        ("b", "temporal")
    ]


def test_structural_join_stays_inside_a_namespace_and_keeps_quantities():
    candidates, _ = structural(
        {
            "a": "standup is at 9am",
            "b": "standup is at 10am",
            "c": "the team has 5 people",
            "d": "the team has 7 people",
        },
        namespaces={"b": "other"},
    )
    assert [(r["left_id"], r["right_id"], r["namespace"]) for r in candidates.to_pylist()] == [
        ("c", "d", "ns")
    ]


def test_structural_join_caps_each_group_to_its_most_recent_memories():
    texts = {f"m{i}": f"The primary region is region{i}" for i in range(6)}
    candidates, _ = structural(texts, limit=3)
    pairs = {(r["left_id"], r["right_id"]) for r in candidates.to_pylist()}
    assert pairs == {("m3", "m4"), ("m3", "m5"), ("m4", "m5")}  # created_at grows with the index


# -- rule files ---------------------------------------------------------------------------------------------------


def test_users_extend_the_word_lists_in_their_own_file(tmp_path: Path):
    text = DEFAULT_RULES_PATH.read_text(encoding="utf-8")
    custom = tmp_path / "rules.yaml"
    custom.write_text(
        text.replace("    - [like, dislike]\n", "    - [like, dislike]\n    - [sunny, rainy]\n")
    )
    rules = load_rules(custom)
    assert verdict("The forecast says sunny", "The forecast says rainy", rules) == (
        "polar",
        "polar: 'sunny' vs 'rainy'",
    )
    assert rules.source == str(custom)
    slots = tmp_path / "slots.yaml"
    slots.write_text(text.replace("  nouns: [name,", "  nouns: [forecast, name,"))
    assert rule_of("The forecast is sunny", "The forecast is rainy") is None  # default: "forecast" is no slot
    assert rule_of("The forecast is sunny", "The forecast is rainy", load_rules(slots)) == "value_swap"


def test_rule_files_with_bare_yaml_booleans_or_missing_keys_are_refused(tmp_path: Path):
    text = DEFAULT_RULES_PATH.read_text(encoding="utf-8")
    unquoted = tmp_path / "unquoted.yaml"
    unquoted.write_text(text.replace('[not, never, "no",', "[not, never, no,"))
    with pytest.raises(ValueError, match=r"negation.words .*quote"):
        load_rules(unquoted)
    missing = tmp_path / "missing.yaml"
    missing.write_text(text.replace("pronouns:", "pronounz:"))
    with pytest.raises(ValueError, match="missing key 'pronouns'"):
        load_rules(missing)


def test_cached_features_equal_parsed_ones_and_a_second_night_parses_nothing(tmp_path: Path, monkeypatch):
    from engram_pipelines.analyses.contradictions import features as contradictions

    rules = load_rules()
    contents = [
        "Alice lives in Berlin",
        "The deploy is at 9am",
        "Alice lives in Berlin",
        "Bob does not like tea",
    ]
    ids = ["m1", "m2", "m3", "m4"]
    parsed = memory_features(ids, contents, rules)
    first = contradictions.cached_memory_features(ids, contents, rules, tmp_path)
    assert first.equals(parsed)

    def no_parsing(*_args: object) -> None:
        raise AssertionError("parsed again although every content is cached")

    monkeypatch.setattr(contradictions, "memory_features", no_parsing)
    second = contradictions.cached_memory_features(["m4", "m1"], [contents[3], contents[0]], rules, tmp_path)
    assert second.to_pylist() == [parsed.to_pylist()[3], parsed.to_pylist()[0]]

"""Does a memory state knowledge, or is it chit-chat? (seed 003's semantic memory is knowledge; issue 18)

Agents store dialogue turns as well as facts. On real conversations (LoCoMo) most semantic nodes built from
turns were pleasantries repeated across sessions ("Nate: No problem, Joanna! Always happy to share them with
you."): greetings, thanks, reactions, questions to the other speaker and farewells recur in every context, so
repetition alone made them look like knowledge.

A memory carries knowledge when one of its sentences, not a question, has at least `MIN_CONTENT_WORDS` names and
content words that are not pleasantries (after a "Speaker:" prefix is taken off): "Maya lives in Boston" does. Deterministic and lexical; the word
list is small on purpose: a fact ("I started playing acoustic guitar five years ago") has enough other words.
"""

from __future__ import annotations

import re

from engram_pipelines.containment import memory_terms, stem

MIN_CONTENT_WORDS = 3

_SPEAKER = re.compile(r"^\s*[A-Z][\w'.\-]*(?:\s+[A-Z][\w'.\-]*){0,2}\s*:\s+")
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me|mine|myself)\b", re.IGNORECASE)
# Words of greetings, thanks, reactions, wishes and farewells (stemmed as `containment.stem` does).
_PLEASANTRIES = frozenset(
    stem(w)
    for w in [
        "thanks",
        "thank",
        "thx",
        "hey",
        "hello",
        "hiya",
        "howdy",
        "bye",
        "goodbye",
        "cheers",
        "congrats",
        "congratulations",
        "wow",
        "whoa",
        "awesome",
        "great",
        "cool",
        "nice",
        "amazing",
        "awesome",
        "glad",
        "happy",
        "sure",
        "sounds",
        "sound",
        "good",
        "care",
        "talk",
        "soon",
        "later",
        "catch",
        "see",
        "ya",
        "yeah",
        "yep",
        "yup",
        "nope",
        "totally",
        "absolutely",
        "definitely",
        "lol",
        "haha",
        "appreciate",
        "appreciated",
        "luck",
        "proud",
        "fun",
        "excited",
        "exciting",
        "hope",
        "well",
        "done",
        "job",
        "problem",
        "welcome",
        "chat",
        "chatting",
        "sweet",
        "wonderful",
        "fantastic",
        "incredible",
        "lovely",
        "beautiful",
        "true",
        "right",
        "okay",
        "ok",
        "agree",
        "agreed",
        "exactly",
        "indeed",
        "course",
        "means",
        "lot",
        "really",
        "much",
        "feel",
        "feels",
        "glad",
        "stoked",
        "thrilled",
        "super",
        "same",
        "too",
        "always",
        "keep",
        "going",
        "rock",
        "rocks",
        "wish",
        "best",
        "hear",
        "heard",
        "tell",
        "love",
        "like",
        "know",
        "think",
        "guess",
        "mean",
        "man",
        "dude",
        "buddy",
        "friend",
        "pal",
        "yay",
        "omg",
        "gosh",
        "wait",
        "journey",
        "can't",
        "worries",
    ]
)


def carries_knowledge(content: str) -> bool:
    """True when some sentence (not a question) has MIN_CONTENT_WORDS names and words that are not pleasantries; in a
    transcript line ("Speaker: text") that sentence must also be about the speaker (I, my, me): what one speaker
    says of the world or of the other ("Nature has a way of humbling us", "Your events are awesome") is a
    reaction, not a fact anyone would recall."""
    text = _SPEAKER.sub("", content or "", count=1)
    utterance = len(text) != len(content or "")
    for sentence in _SENTENCE.findall(text):
        if sentence.rstrip().endswith("?"):
            continue
        if utterance and not _FIRST_PERSON.search(sentence):
            continue
        words, names, _, _ = memory_terms(sentence)
        if len([w for w in words if w not in _PLEASANTRIES]) + len(names) >= MIN_CONTENT_WORDS:
            return True
    return False


def informativeness(content: str) -> int:
    """How much a memory says: its distinct content words and names (the most informative member names a node)."""
    words, names, _, _ = memory_terms(content)
    return len(words) + len(names)

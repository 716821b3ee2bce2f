"""Does a memory state knowledge, or is it chit-chat? (seed 003's semantic memory is knowledge; issue 18)

Agents store dialogue turns as well as facts. On real conversations (LoCoMo) most semantic nodes built from
turns were pleasantries repeated across sessions ("Nate: No problem, Joanna! Always happy to share them with
you.", "Thanks! Your support means a lot. I'll keep pushing for my goals."): greetings, thanks, reactions,
encouragement, questions to the other speaker and farewells recur in every context, so repetition alone made
them look like knowledge.

A memory carries knowledge when one of its sentences, not a question, has at least `min_content_words` names
and words outside the lists of `data/chitchat_words.yaml` (pleasantries, generic encouragement and filler,
contractions). In a transcript line ("Speaker: text") the sentence needs `min_content_words_in_utterance`
(replies pad a feeling with a word or two), must be the speaker's own (I, my, me)
and not addressed to the other (you, your): what one speaker says of the world or of the other ("Nature has a
way of humbling us", "Your events are awesome") is a reaction, not a fact anyone would recall; and its first
word is not taken for a name ("Yeah", "Thanks", "Found" open sentences). A statement that reports what one
speaker did toward the other ("Tim advised John to ...", "Dave is supportive of Calvin's career") reports the
conversation, not knowledge (`conversation_acts`). Deterministic and lexical: a fact
("I started playing acoustic guitar five years ago", "Maya lives in Boston") has enough other words.
"""

from __future__ import annotations

import re
from functools import cache

from engram_pipelines.analyses.merges.containment import base, memory_terms, word_lists

_SPEAKER = re.compile(r"^\s*[A-Z][\w'.\-]*(?:\s+[A-Z][\w'.\-]*){0,2}\s*:\s+")
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me|mine|myself)\b", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z][\w'\-]*")
# Words between an act and whom it was toward ("supportive of Calvin", "inquires about Jolene's").
_SKIP = frozenset(["of", "about", "to", "toward", "towards", "and", "for", "with"])
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd|ya)\b", re.IGNORECASE)


def carries_knowledge(content: str) -> bool:
    """True when some sentence of `content` states knowledge (module docstring)."""
    minimum, empty, contractions = _vocabulary()
    text = _SPEAKER.sub("", content or "", count=1)
    utterance = len(text) != len(content or "")
    if not utterance and _reports_a_conversation_act(text):
        return False
    min_words = minimum[utterance]
    for sentence in _SENTENCE.findall(text):
        if sentence.rstrip().endswith("?"):
            continue
        if utterance and (not _FIRST_PERSON.search(sentence) or _SECOND_PERSON.search(sentence)):
            continue
        words, names, _, _ = memory_terms(sentence)
        if utterance and names and sentence.lstrip().lower().startswith(names[0]):
            # A line's first word is capitalised whatever it is: a word, not a name.
            words, names = [*words, names[0]], names[1:]
        # `memory_terms` gives stems already: only the final "e" is dropped to meet the lists' forms.
        said = [w for w in words if w.removesuffix("e") not in empty]
        said += [n for n in names if n.removesuffix("e") not in contractions]
        if len(said) >= min_words:
            return True
    return False


def informativeness(content: str) -> int:
    """How much a memory says: its distinct content words and names (the most informative member names a node)."""
    words, names, _, _ = memory_terms(content)
    return len(words) + len(names)


def _reports_a_conversation_act(text: str) -> bool:
    """Does the statement report an act toward someone ("Tim advised John to ...", "Dave is supportive of
    Calvin's career")? An act word among the three words after the subject, and a name among the three words
    after it (linking words such as "of" and "about" aside): whom the act was toward."""
    tokens = _TOKEN.findall(text)
    acts = _conversation_acts()
    for position in range(1, min(4, len(tokens))):
        if base(tokens[position]) in acts:
            return any(t[:1].isupper() for t in tokens[position + 1 : position + 4] if t.lower() not in _SKIP)
    return False


@cache
def _conversation_acts() -> frozenset[str]:
    return frozenset(map(base, word_lists()["conversation_acts"].split()))


@cache
def _vocabulary() -> tuple[tuple[int, int], frozenset[str], frozenset[str]]:
    """((min content words of a statement, of an utterance's sentence), every listed word, the contractions),
    words as `base` forms, from the shipped lists."""
    data = word_lists()
    words = [w for group in ("pleasantries", "generic", "contractions") for w in data[group].split()]
    contractions = data["contractions"].split()
    minimum = (int(data["min_content_words"]), int(data["min_content_words_in_utterance"]))
    return minimum, frozenset(map(base, words)), frozenset(map(base, contractions))

"""Parse and validate a JSON Lines memory export: the pure half of `engram-pipelines import FILE`.

`parse_jsonl` reads the file in batches of lines and yields, per batch, an Arrow table of the valid memories
and the problems found. Writing rows to the store is the caller's job; nothing here touches a database.

Reject format: one `Reject` per problem. A line with three problems gives three rejects that share its line
number and raw text; `ParseResult.rejected_lines` counts distinct lines. A line with any problem gives no
row, so a typo never imports a memory with part of its data missing. `write_rejects` writes them as JSON
Lines `{"line", "field", "reason", "raw"}`, so the raw text can be fixed and re-imported.

Conventions the spec left open, chosen so that data is never silently dropped or guessed:
- `null` in an optional field means "absent" (exporters commonly write nulls); in `content` or `created_at`
  it is an error. A line's own `namespace` wins over the default namespace.
- Strings that must be non-empty are also refused when they are only whitespace.
- Strings the store cannot hold (NUL characters, unpaired surrogates from `\\ud800` escapes) and NaN or
  Infinity inside `metadata` are refused here rather than failing the insert half-way.
- Duplicate keys in a JSON object are refused (json.loads would keep only the last value).
- Duplicate ids: the first line that claims an id owns it, even if that line is rejected for another
  problem; a later line with the same id is rejected, because the file is ambiguous about which one is
  meant. The id index is the only state kept across batches (one entry per distinct id).
- `superseded_by` hides a row for good, so it must name another memory of the same namespace, in the file or
  (through `existing`) in the store, and no cycle of supersedes (`a -> b -> a`, `c -> c`): recall would show
  neither side. A line naming a memory that comes later in the file (or is not in it) is held back until the
  end of the file, then checked and yielded with the last batch: memory grows with such lines only.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from engram_pipelines.core import jsontext, records
from engram_pipelines.core.timestamps import NaiveTimestampError, format_timestamp, parse_timestamp
from engram_pipelines.ingest.mem0_format import from_mem0

LINE_FIELD = "<line>"  # the `field` of a reject about the whole line (invalid JSON, not an object)

DEFAULT_TIER = "stm"
DEFAULT_KIND = "episodic"
DEFAULT_IMPORTANCE = 0.5
DEFAULT_EMBEDDING_MODEL = "imported"  # an embedding must say which model made it; imports may not know
DEFAULT_ZONE = "active"
METADATA_ID_FIELDS = ("conversation_id", "project_id")  # accepted at top level, stored inside metadata

# The columns an import sets, in `records.memory_schema` order: every column but `version`, which the store
# owns (a CAS counter of this store's own writes; an imported row starts its history at 1). The lifecycle
# columns (`score`, `zone`, `zone_since`, `superseded_by`, `stale`), `updated_at` and
# `embedded_content_sha` are optional so that an agent's file imports as before, while an
# `engram-pipelines export` (a backup) brings every row back in the state it was in.
IMPORT_COLUMNS: tuple[str, ...] = (
    "id",
    "namespace",
    "tier",
    "kind",
    "content",
    "embedding",
    "embedding_model",
    "embedded_content_sha",
    "importance",
    "score",
    "access_count",
    "last_accessed_at",
    "created_at",
    "updated_at",
    "pinned",
    "zone",
    "zone_since",
    "superseded_by",
    "stale",
    "tags",
    "metadata",
)
KNOWN_FIELDS: frozenset[str] = frozenset(IMPORT_COLUMNS) | frozenset(METADATA_ID_FIELDS)

# The formats `import --format` reads: name -> how a record becomes an import record (None: as it is).
SOURCE_FORMATS: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {
    "engram": None,
    "mem0": from_mem0,
}

_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_NUMBER_TYPES = frozenset({int, float})  # exact types from json.loads; bool is deliberately not here
# An escaped NUL in JSON text: `\u0000` preceded by an even number of backslashes (an odd number would
# make it a literal backslash followed by "u0000").
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_UTF8_BOM = b"\xef\xbb\xbf"
# Built once: json.dumps with options other than the defaults builds a new encoder on every call.
_ID_KEY_JSON = json.JSONEncoder(ensure_ascii=False)
_STORED_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Reject:
    line: int  # 1-based line number in the file
    field: str  # field name, or "<line>" for invalid JSON / not an object
    reason: str
    raw: str  # the original line text (for the rejects file)


@dataclass
class ParseResult:
    rows: pa.Table  # valid memories, schema = import_schema(embedding_dim)
    rejects: list[Reject]
    lines_read: int  # non-blank lines

    @property
    def rejected_lines(self) -> int:
        """Distinct lines with at least one reject (a line can have several)."""
        return len({reject.line for reject in self.rejects})


def import_schema(embedding_dim: int) -> pa.Schema:
    """`records.memory_schema(embedding_dim)` restricted to the columns an import sets."""
    full = records.memory_schema(embedding_dim)
    return pa.schema([full.field(name) for name in IMPORT_COLUMNS])


def derive_id(namespace: str, content: str, created_at: dt.datetime) -> str:
    """The id of a memory that has none: stable across re-imports of the same file.

    The timestamp is hashed in the store's canonical UTC form, so the same instant written with another
    offset gets the same id. JSON-encoding the triple keeps e.g. ("a|b", "c") and ("a", "b|c") apart.
    """
    key = _ID_KEY_JSON.encode([namespace, content, format_timestamp(created_at)])
    return "m-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


# ids -> the namespace of each that exists in the store (a supersede may name a row the store already holds).
ExistingLookup = Callable[[Sequence[str]], dict[str, str]]


def parse_jsonl(
    path: str | Path,
    *,
    default_namespace: str | None = None,
    embedding_dim: int = 384,
    batch_size: int = 50_000,
    existing: ExistingLookup | None = None,
    source_format: str = "engram",
) -> Iterator[ParseResult]:
    """Parse a JSON Lines memory export, yielding one result per `batch_size` non-blank lines.

    Memory stays bounded by the batch size (plus the id index used to find duplicates, and the lines whose
    `superseded_by` names a memory not read yet). At least one result is yielded, so an empty file still
    gives a table with the right schema. Bad arguments raise ValueError at the call; the file is opened on
    the first iteration. `existing` finds supersede targets outside the file; without it they are not checked.
    `source_format` "mem0" reads mem0's memory records (`engram_pipelines.ingest.mem0_format`).
    """
    if source_format not in SOURCE_FORMATS:
        raise ValueError(f"unknown import format {source_format!r}: one of {', '.join(SOURCE_FORMATS)}")
    _check_arguments(default_namespace, embedding_dim, batch_size)
    return _parse_batches(
        Path(path), default_namespace, embedding_dim, batch_size, existing, SOURCE_FORMATS[source_format]
    )


def _parse_batches(
    path: Path,
    default_namespace: str | None,
    embedding_dim: int,
    batch_size: int,
    existing: ExistingLookup | None,
    translate: Callable[[dict[str, Any]], dict[str, Any]] | None,
) -> Iterator[ParseResult]:
    schema = import_schema(embedding_dim)
    parser = _LineParser(default_namespace, embedding_dim, translate)
    batch = _Batch()
    yielded = False
    with path.open("rb") as file:  # bytes, so only "\n" ends a line and bad UTF-8 is one reject
        for number, data in enumerate(file, start=1):
            if number == 1:
                data = data.removeprefix(_UTF8_BOM)
            if not data.strip():
                continue
            parser.parse(number, data, batch)
            if batch.lines_read >= batch_size:
                yield batch.result(schema)
                batch = _Batch()
                yielded = True
    parser.resolve_deferred(batch, existing)
    if batch.lines_read or batch.memories or batch.rejects or not yielded:
        yield batch.result(schema)


def write_rejects(rejects: Iterable[Reject], path: str | Path, *, append: bool = False) -> int:
    """Write rejects as JSON Lines `{"line", "field", "reason", "raw"}`; return how many were written.

    The file is replaced unless `append` is true (for writing the rejects of later batches).
    """
    count = 0
    with Path(path).open("a" if append else "w", encoding="utf-8", newline="\n") as file:
        for reject in rejects:
            file.write(_reject_json(reject) + "\n")
            count += 1
    return count


def _reject_json(reject: Reject) -> str:
    record = {"line": reject.line, "field": reject.field, "reason": reject.reason, "raw": reject.raw}
    text = json.dumps(record, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a field name with an unpaired surrogate: escape it rather than fail
        text = json.dumps(record)
    return text


def _check_arguments(default_namespace: str | None, embedding_dim: int, batch_size: int) -> None:
    if default_namespace is not None and (
        not isinstance(default_namespace, str) or not default_namespace.strip()
    ):
        raise ValueError(f"default_namespace must be a non-empty string, got {default_namespace!r}")
    if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int) or embedding_dim < 1:
        raise ValueError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


# --- one memory ------------------------------------------------------------------------------------------


class _Memory(NamedTuple):
    """A valid line, one attribute per import column (same order as IMPORT_COLUMNS)."""

    id: str
    namespace: str
    tier: str
    kind: str
    content: str
    embedding: np.ndarray | None  # float32, shape (embedding_dim,)
    embedding_model: str | None
    embedded_content_sha: str | None
    importance: float
    score: float | None
    access_count: int
    last_accessed_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime
    pinned: bool
    zone: str
    zone_since: dt.datetime | None
    superseded_by: str | None
    stale: bool
    tags: str  # JSON text
    metadata: str  # JSON text, keys sorted


assert _Memory._fields == IMPORT_COLUMNS, "keep _Memory in the column order of the schema"


class _Invalid(ValueError):
    """A field's value cannot be imported; the message is the reason shown to the user."""


class _Batch:
    """The rows and rejects of the lines read since the last yielded result."""

    def __init__(self) -> None:
        self.memories: list[_Memory] = []
        self.rejects: list[Reject] = []
        self.lines_read = 0

    def result(self, schema: pa.Schema) -> ParseResult:
        return ParseResult(
            rows=_to_table(self.memories, schema), rejects=self.rejects, lines_read=self.lines_read
        )


class _LineParser:
    """Turns lines into memories or rejects; remembers which line first claimed each id."""

    def __init__(
        self,
        default_namespace: str | None,
        embedding_dim: int,
        translate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.translate = translate  # another system's record -> an import record
        self.default_namespace = default_namespace
        self.embedding_dim = embedding_dim
        self.first_line_of_id: dict[str, int] = {}
        # id -> (namespace, superseded_by) of the valid lines so far: a supersede is checked against them.
        self.accepted: dict[str, tuple[str, str | None]] = {}
        # Valid lines whose supersede target was not read yet: (line number, raw line, memory).
        self.deferred: list[tuple[int, bytes, _Memory]] = []

    def parse(self, number: int, data: bytes, batch: _Batch) -> None:
        batch.lines_read += 1
        outcome = self._read_line(number, data)
        if isinstance(outcome, _Memory):
            if outcome.superseded_by is not None and outcome.superseded_by not in self.accepted:
                self.deferred.append((number, data, outcome))  # its target may come later
            else:
                self.accepted[outcome.id] = (outcome.namespace, outcome.superseded_by)
                batch.memories.append(outcome)
        else:
            batch.rejects.extend(Reject(number, field, reason, _raw(data)) for field, reason in outcome)

    def resolve_deferred(self, batch: _Batch, existing: ExistingLookup | None) -> None:
        """Check the held-back supersedes against the whole file (and the store), into `batch`."""
        if not self.deferred:
            return
        waiting = {m.id: (m.namespace, m.superseded_by) for _, _, m in self.deferred}
        known = {**self.accepted, **waiting}
        # Deferred lines are exactly those with a supersede target.
        outside = sorted(
            {m.superseded_by for _, _, m in self.deferred if m.superseded_by and m.superseded_by not in known}
        )
        in_store = existing(outside) if existing is not None and outside else {}
        problems = {
            m.id: self._deferred_problem(m, known, in_store, existing is not None)
            for _, _, m in self.deferred
        }
        # A row superseded by a rejected line's memory would name a row that never arrives.
        changed = True
        while changed:
            changed = False
            for _, _, m in self.deferred:
                if problems[m.id] is None and problems.get(m.superseded_by or "") is not None:
                    problems[m.id] = f"names {m.superseded_by!r}, whose line was rejected"
                    changed = True
        for number, data, memory in self.deferred:
            problem = problems[memory.id]
            if problem is None:
                self.accepted[memory.id] = waiting[memory.id]
                batch.memories.append(memory)
            else:
                batch.rejects.append(Reject(number, "superseded_by", problem, _raw(data)))
        self.deferred = []

    @staticmethod
    def _deferred_problem(
        memory: _Memory, known: dict[str, tuple[str, str | None]], in_store: dict[str, str], checked: bool
    ) -> str | None:
        target = memory.superseded_by
        namespace = known[target][0] if target in known else in_store.get(target or "")
        if namespace is None:
            return f"{target!r} is in neither the file nor the store" if checked else None
        if namespace != memory.namespace:
            return f"{target!r} is in another namespace ({namespace!r})"
        seen = {memory.id}
        while target in known:
            if target in seen:
                return f"makes a cycle of supersedes through {target!r}"
            seen.add(target)
            target = known[target][1]
        return None

    def _read_line(self, number: int, data: bytes) -> _Memory | list[tuple[str, str]]:
        """The line's memory, or its problems as (field, reason) pairs."""
        try:
            record = _load_json_object(data)
        except _Invalid as invalid:
            return [(LINE_FIELD, str(invalid))]
        fields = _FieldReader(self.translate(record) if self.translate else record)
        memory_id, memory = _read_memory(fields, self.default_namespace, self.embedding_dim)
        if memory_id is not None:
            self._check_duplicate(memory_id, number, fields)
        if memory is not None and memory.superseded_by is not None:
            self._check_supersede(memory, fields)
        if fields.problems or memory is None:  # no memory means a problem was reported
            return fields.problems
        return memory

    def _check_supersede(self, memory: _Memory, fields: _FieldReader) -> None:
        """A row superseded by itself, by a row of another namespace, or in a cycle with the rows before it
        would be hidden for good (recall shows neither side of a cycle)."""
        target = memory.superseded_by
        if target == memory.id:
            fields.problem("superseded_by", "names the memory itself")
            return
        if target in self.accepted and self.accepted[target][0] != memory.namespace:
            fields.problem(
                "superseded_by", f"{target!r} is in another namespace ({self.accepted[target][0]!r})"
            )
            return
        seen = {memory.id}
        while target is not None and target in self.accepted:
            if target in seen:
                fields.problem("superseded_by", f"makes a cycle of supersedes through {target!r}")
                return
            seen.add(target)
            target = self.accepted[target][1]
        if target == memory.id:
            fields.problem("superseded_by", "makes a cycle of supersedes back to this memory")

    def _check_duplicate(self, memory_id: str, number: int, fields: _FieldReader) -> None:
        first = self.first_line_of_id.setdefault(memory_id, number)
        if first != number:
            fields.problem("id", f"duplicate id (first seen on line {first})")


def _raw(data: bytes) -> str:
    return data.rstrip(b"\n").removesuffix(b"\r").decode("utf-8", errors="replace")


def _load_json_object(data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Invalid(f"not valid UTF-8 (byte {error.start + 1})") from None
    try:
        value = _DECODER.decode(text)
    except _DuplicateKey as duplicate:
        raise _Invalid(f"duplicate key {duplicate.key!r} in a JSON object") from None
    except json.JSONDecodeError as error:
        raise _Invalid(f"invalid JSON: {error.msg} (column {error.colno})") from None
    except (ValueError, RecursionError) as error:  # e.g. an integer over Python's digit limit, deep nesting
        raise _Invalid(f"invalid JSON: {error}") from None
    if not isinstance(value, dict):
        raise _Invalid(f"not a JSON object (got {_json_type_name(value)})")
    return value


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_object_without_duplicate_keys)  # one decoder, not one per line


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"


class _FieldReader:
    """Reads the fields of one line, collecting every problem instead of stopping at the first."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.problems: list[tuple[str, str]] = []

    def problem(self, field: str, reason: str) -> None:
        self.problems.append((field, reason))

    def required(self, name: str, check: Callable[[Any], Any]) -> Any:
        if name not in self.record:
            self.problem(name, "required field is missing")
            return None
        return self._checked(name, check)

    def optional(self, name: str, check: Callable[[Any], Any], default: Any) -> Any:
        if self.record.get(name) is None:
            return default
        return self._checked(name, check)

    def _checked(self, name: str, check: Callable[[Any], Any]) -> Any:
        try:
            return check(self.record[name])
        except _Invalid as invalid:
            self.problem(name, str(invalid))
            return None


def _read_memory(
    fields: _FieldReader, default_namespace: str | None, embedding_dim: int
) -> tuple[str | None, _Memory | None]:
    """Check every field of a line; return its id (when known, even if the line is bad) and its memory."""
    _report_unknown_fields(fields)
    explicit_id = fields.optional("id", _text, None)
    namespace = _read_namespace(fields, default_namespace)
    content = fields.required("content", _text)
    created_at = fields.required("created_at", _timestamp)
    tier = fields.optional("tier", _tier, DEFAULT_TIER)
    kind = fields.optional("kind", _kind, DEFAULT_KIND)
    importance = fields.optional("importance", _unit_number, DEFAULT_IMPORTANCE)
    access_count = fields.optional("access_count", _access_count, 0)
    last_accessed_at = fields.optional("last_accessed_at", _timestamp, None)
    tags = fields.optional("tags", _tags_json, "[]")
    pinned = fields.optional("pinned", _boolean, False)
    embedding = fields.optional("embedding", lambda value: _embedding(value, embedding_dim), None)
    embedding_model = fields.optional("embedding_model", _text, None)
    if embedding is not None and embedding_model is None:
        embedding_model = DEFAULT_EMBEDDING_MODEL
    # Kept without an embedding too, like the model: the embedding step replaces both when it makes a vector.
    embedded_content_sha = fields.optional("embedded_content_sha", _text, None)
    metadata = _read_metadata(fields)
    lifecycle = _read_lifecycle(fields)
    # The store's own default: a row never written since it was created was last updated then.
    updated_at = fields.optional("updated_at", _timestamp, None) or created_at

    memory_id = explicit_id
    if (
        fields.record.get("id") is None
        and namespace is not None
        and content is not None
        and created_at is not None
    ):
        memory_id = derive_id(namespace, content, created_at)
    if fields.problems or memory_id is None:
        return memory_id, None
    # No problem recorded: every required field was read.
    assert namespace is not None and content is not None and metadata is not None
    memory = _Memory(
        id=memory_id,
        namespace=namespace,
        tier=tier,
        kind=kind,
        content=content,
        embedding=embedding,
        embedding_model=embedding_model,
        embedded_content_sha=embedded_content_sha,
        importance=importance,
        score=lifecycle.score,
        access_count=access_count,
        last_accessed_at=last_accessed_at,
        created_at=created_at,
        updated_at=updated_at,
        pinned=pinned,
        zone=lifecycle.zone,
        zone_since=lifecycle.zone_since,
        superseded_by=lifecycle.superseded_by,
        stale=lifecycle.stale,
        tags=tags,
        metadata=metadata,
    )
    return memory_id, memory


def _report_unknown_fields(fields: _FieldReader) -> None:
    # An unknown field is usually a typo ("namespcae"); importing without it would silently drop its data.
    for name in fields.record:
        if name not in KNOWN_FIELDS:
            close = difflib.get_close_matches(name, KNOWN_FIELDS, n=1)
            fields.problem(name, f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field")


def _read_namespace(fields: _FieldReader, default_namespace: str | None) -> str | None:
    if fields.record.get("namespace") is None and default_namespace is None:
        fields.problem("namespace", "required field is missing and no default namespace was given")
        return None
    return fields.optional("namespace", _text, default_namespace)


class _Lifecycle(NamedTuple):
    """The pipeline-owned state of a row (what decay, retention and merges wrote)."""

    zone: str
    zone_since: dt.datetime | None
    stale: bool
    score: float | None
    superseded_by: str | None


def _read_lifecycle(fields: _FieldReader) -> _Lifecycle:
    """The line's lifecycle fields; an absent one gets the store's default for a new row (active, visible)."""
    zone = fields.optional("zone", _zone, DEFAULT_ZONE)
    zone_since = fields.optional("zone_since", _timestamp, None)
    if zone_since is not None and fields.record.get("zone") is None:
        # The time says since when the row is in its zone; without the zone it would date the default one.
        fields.problem("zone_since", "given without zone (the zone it dates)")
    return _Lifecycle(
        zone=zone,
        zone_since=zone_since,
        stale=fields.optional("stale", _boolean, False),
        score=fields.optional("score", _unit_number, None),
        superseded_by=fields.optional("superseded_by", _text, None),
    )


def _read_metadata(fields: _FieldReader) -> str | None:
    """The metadata JSON text, with `conversation_id` and `project_id` moved inside it."""
    metadata = fields.optional("metadata", _object, {})
    moved = {name: fields.optional(name, _text, None) for name in METADATA_ID_FIELDS}
    if metadata is None:
        return None
    metadata = dict(metadata)
    for name, value in moved.items():
        if value is None:
            continue
        if name in metadata and metadata[name] != value:
            # Two different values for one key: keeping either would silently drop the other.
            fields.problem(name, f"conflicts with metadata.{name} = {_brief(metadata[name])}")
        metadata[name] = value
    try:
        return _json_text(metadata)
    except _Invalid as invalid:
        fields.problem("metadata", str(invalid))
        return None


# --- field checks: each returns the value to store or raises _Invalid with the reason ---------------------


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"must be a non-empty string, got {_brief(value)}")
    _check_storable(value)
    return value


def _check_storable(text: str) -> None:
    # json.loads turns a lone "\ud800" escape into an unpaired surrogate, which has no UTF-8 form (Arrow
    # and both stores need UTF-8); PostgreSQL text cannot hold NUL. Better one reject than a failed insert.
    if "\x00" in text:
        raise _Invalid("contains a NUL character (\\u0000), which the store cannot hold")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _Invalid(
                "contains an unpaired surrogate escape (\\ud800-\\udfff), which is not valid UTF-8"
            ) from None


def _one_of(options: Sequence[str]) -> Callable[[Any], str]:
    allowed = ", ".join(options)

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise _Invalid(f"must be one of {allowed}, got {_brief(value)}")
        return value

    return check


_tier = _one_of(records.TIERS)
_kind = _one_of(records.KINDS)
_zone = _one_of(records.ZONES)


def _unit_number(value: Any) -> float:
    """`importance` and `score`: a number in 0..1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"must be a number in 0..1, got {_brief(value)}")
    if not 0 <= value <= 1:  # NaN fails every comparison, so it is refused here too
        raise _Invalid(f"must be within 0..1, got {_brief(value)}")
    return float(value)


def _access_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise _Invalid(f"must be a non-negative integer, got {_brief(value)}")
    return value


def _timestamp(value: Any) -> dt.datetime:
    if not isinstance(value, str):
        raise _Invalid(f"must be an ISO-8601 timestamp string with a zone, got {_brief(value)}")
    try:
        return parse_timestamp(value)
    except NaiveTimestampError as naive:
        raise _Invalid(str(naive)) from None
    except (ValueError, OverflowError):  # OverflowError: a valid local time whose UTC instant is year 0
        raise _Invalid(f"not an ISO-8601 timestamp: {_brief(value)}") from None


def _tags_json(value: Any) -> str:
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise _Invalid(f"must be a list of strings, got {_brief(value)}")
    for tag in value:
        _check_storable(tag)
    return _json_text(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, got {_brief(value)}")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"must be a JSON object, got {_brief(value)}")
    return value


def _embedding(value: Any, dim: int) -> np.ndarray:
    if not isinstance(value, list):
        raise _Invalid(f"must be a list of numbers or null, got {_brief(value)}")
    if len(value) != dim:
        raise _Invalid(
            f"must have exactly {dim} values, got {len(value)}: the store holds {dim}-d vectors "
            "(the config's snapshot.embedding_dim); to keep these, set it to "
            f"{len(value)} in a fresh store, or leave `embedding` out and the nightly embeds the text"
        )
    # One C-level pass over the element types; numpy alone would accept "1.5" strings and booleans.
    if not set(map(type, value)) <= _NUMBER_TYPES:
        index = next(i for i, item in enumerate(value) if type(item) not in _NUMBER_TYPES)
        raise _Invalid(f"value at index {index} is not a number: {_brief(value[index])}")
    try:
        vector = np.array(value, dtype=np.float64)
    except OverflowError:  # an integer literal too large even for float64
        index = next(i for i, item in enumerate(value) if abs(item) > _FLOAT32_MAX)
        raise _Invalid(f"value at index {index} is too large for float32") from None
    not_finite = ~np.isfinite(vector)
    if not_finite.any():
        raise _Invalid(f"value at index {int(np.argmax(not_finite))} is NaN or infinite")
    too_large = np.abs(vector) > _FLOAT32_MAX
    if too_large.any():
        raise _Invalid(f"value at index {int(np.argmax(too_large))} is too large for float32")
    return vector.astype(np.float32)


def _json_text(value: list[Any] | dict[str, Any]) -> str:
    """Compact JSON with sorted keys: one text per value, so equal metadata compares equal in the store."""
    if jsontext.depth(value) > jsontext.MAX_DEPTH:
        raise _Invalid(f"nests deeper than {jsontext.MAX_DEPTH} levels")
    try:
        text = _STORED_JSON.encode(value)
    except ValueError:
        raise _Invalid("must not contain NaN or Infinity (not valid JSON)") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise _Invalid("contains a NUL character (\\u0000), which the store cannot hold")
    _check_storable(text)
    return text


def _brief(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of a bad value for a reject reason (the full line is in `raw`)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- Arrow -------------------------------------------------------------------------------------------------


def _to_table(memories: list[_Memory], schema: pa.Schema) -> pa.Table:
    """One `pa.array` per column (no per-row appends); embeddings go through a single float32 matrix."""
    if not memories:
        return schema.empty_table()
    columns = dict(zip(IMPORT_COLUMNS, zip(*memories, strict=True), strict=True))
    arrays = [
        _embedding_array(columns[field.name], field.type)
        if field.name == "embedding"
        else pa.array(columns[field.name], type=field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _embedding_array(vectors: Sequence[np.ndarray | None], list_type: pa.FixedSizeListType) -> pa.Array:
    dim = list_type.list_size
    matrix = np.zeros((len(vectors), dim), dtype=np.float32)  # null rows keep zeros behind the null bit
    present = np.zeros(len(vectors), dtype=bool)
    for row, vector in enumerate(vectors):
        if vector is not None:
            matrix[row] = vector
            present[row] = True
    values = pa.array(matrix.reshape(-1))  # zero-copy view of the numpy buffer
    mask = None if present.all() else pa.array(~present)
    return pa.FixedSizeListArray.from_arrays(values, type=list_type, mask=mask)

"""The configuration model: every default comes from the seeds (see docs/configuration.md).

Load order: built-in defaults, then the YAML config file (`--config`, else `ENGRAM_CONFIG`, else `engram.yaml`
in the working directory when present), then environment variables with the seeds' names. Thresholds are
validated once, at start, with an error that names the setting.
"""

from __future__ import annotations

import copy
import datetime as dt
import fnmatch
import json
import math
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engram_pipelines.core.registry import NAMES

DEFAULT_STORE_URL = "sqlite:///data/engram.db"
DEFAULT_WAREHOUSE = "data/warehouse"

DecayPolicyName = Literal["engram", "halflife", "ebbinghaus"]


class ConfigError(ValueError):
    """A setting is invalid; the message names the setting and the fix."""


class _Section(BaseModel):
    # Attribute docstrings become field descriptions: docs/configuration.md is generated from them.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


def _unit(value: float, name: str) -> float:
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise ValueError(f"{name} must be within 0..1, got {value}")
    return value


def _positive_finite(value: float, name: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number, got {value}")
    return value


class CueRule(_Section):
    """A content cue: any of `words` found at a word start in the content (any case) adds `weight`."""

    words: list[str] = Field(min_length=1)
    """Words (or word starts) that signal durable content."""
    weight: float
    """Added to the base score when any word is found."""

    @field_validator("words")
    @classmethod
    def _no_blank_word(cls, words: list[str]) -> list[str]:
        # A blank word would match at every word start: the rule's weight on every row.
        if any(not word.strip() for word in words):
            raise ValueError(f"a cue word is blank in {words}")
        return words


class EngramPolicy(_Section):
    """Seed 000's score: content and tag cues plus access recency with a half-life."""

    half_life_days: float = 14.0
    """Recency half-life in days, from the last access (else creation)."""
    base: float = 0.35
    """Score of a plain note at age 0."""
    access_boost_per_log2: float = 0.04
    """Access boost per doubling of access_count."""
    access_boost_cap: float = 0.25
    """The access boost never exceeds this."""
    cues: list[CueRule] = Field(
        default_factory=lambda: [
            CueRule(words=["decision", "decided", "resolved"], weight=0.18),
            CueRule(words=["problem", "incident", "bug", "failure", "error"], weight=0.12),
            CueRule(words=["milestone", "launch", "release", "deadline"], weight=0.10),
        ]
    )
    """Content cues and their weights (each rule counts once)."""
    cue_tags: list[str] = Field(default_factory=lambda: ["critical", "important", "pinned"])
    """A row tagged with any of these gets cue_tag_weight."""
    cue_tag_weight: float = 0.08
    """Boost for a cue tag."""
    pin_boost: float = 0.25
    """Boost for a pinned row (whose recency is also held at 1)."""
    pinned_floor: float = 0.9
    """A pinned row never scores below this, under every policy."""

    @field_validator("half_life_days")
    @classmethod
    def _half_life(cls, v: float) -> float:
        return _positive_finite(v, "decay.engram.half_life_days")


class HalflifePolicy(_Section):
    """Seed 001: importance x 0.5^(age_hours / half_life_hours)."""

    half_life_hours: float = 24.0 * 14
    """Half-life in hours, from creation."""

    @field_validator("half_life_hours")
    @classmethod
    def _half_life(cls, v: float) -> float:
        return _positive_finite(v, "decay.halflife.half_life_hours")


class EbbinghausPolicy(_Section):
    """Seed 004: max(S e^(-lambda t) x repetition bonus, S x floor), per-kind half-lives."""

    half_life_days: float = 7.0
    """Half-life in days for kinds not listed in kind_half_life_days (<= 0 or inf: never decays)."""
    floor_multiplier: float = 0.1
    """A score never falls below importance x this."""
    repetition_boost: float = 1.5
    """Bonus 1 + log10(access + 1) x (boost - 1) for accessed rows."""
    kind_half_life_days: dict[str, float] = Field(
        default_factory=lambda: {
            "working": 0.5,
            "episodic": 7.0,
            "semantic": 30.0,
            "procedural": 90.0,
            "archival": math.inf,
        }
    )
    """Half-life per kind (seed 004's tiers); inf never decays."""
    review_threshold: float = 0.3
    """The optimal review interval is the time until the score reaches this."""


class DecayConfig(_Section):
    """How memories lose (and regain) their score; a stale mark is metadata only."""

    policy: DecayPolicyName = "engram"
    """engram (seed 000), halflife (seed 001) or ebbinghaus (seed 004)."""
    kind_policy: dict[str, DecayPolicyName] = Field(default_factory=dict)
    """Per-kind override of the policy, e.g. {semantic: ebbinghaus}."""
    stale_threshold: float = 0.3
    """Scores below this are marked stale (the row still recalls); a row that recovers loses the mark."""
    engram: EngramPolicy = Field(default_factory=EngramPolicy)
    halflife: HalflifePolicy = Field(default_factory=HalflifePolicy)
    ebbinghaus: EbbinghausPolicy = Field(default_factory=EbbinghausPolicy)

    @field_validator("stale_threshold")
    @classmethod
    def _stale(cls, v: float) -> float:
        return _unit(v, "decay.stale_threshold")


class PromotionConfig(_Section):
    """STM -> LTM (seed 000) and episodic -> semantic (seed 004)."""

    stm_access_threshold: int = 3
    """STM rows accessed at least this often are promoted to LTM..."""
    stm_importance_threshold: float = 0.5
    """...when their importance is at least this."""
    ltm_quota: int | None = None
    """Most LTM rows per namespace (highest decay score first); None is unlimited."""
    semantic_access_threshold: int = 10
    """Episodic rows accessed more than this often..."""
    semantic_importance_threshold: float = 0.8
    """...with importance above this become semantic."""
    semantic_min_inbound_links: int = 2
    """Or: referenced (associated / derived-from links) by at least this many memories."""
    semantic_tags: list[str] = Field(default_factory=lambda: ["critical", "permanent"])
    """Or: tagged with one of these."""


class RetentionConfig(_Section):
    """Active -> Archived -> PurgeQueue -> purged (seed 001); pinned rows and blocks are exempt."""

    archive_score_threshold: float = 0.15
    """Active rows scoring below this..."""
    archive_older_than_days: float = 30.0
    """...and older than this are archived."""
    archive_age_days: float = 30.0
    """Rows older than this that were never accessed are archived (ARCHIVE_AGE is in seconds)..."""
    archive_max_importance: float = 0.3
    """...when their importance is below this (seed 004's criteria are one rule)."""
    protect_importance: float = 0.8
    """A row of at least this importance is never archived by age or score alone (`deprecated` still archives)."""
    deprecated_tag: str = "deprecated"
    """Rows with this tag are archived."""
    archive_grace_days: float = 30.0
    """Archived this long: queued for purge."""
    purge_grace_days: float = 30.0
    """Queued this long: deleted, with a pre-image audit row for restore."""

    @model_validator(mode="after")
    def _check(self) -> RetentionConfig:
        for name in ("archive_score_threshold", "archive_max_importance", "protect_importance"):
            _unit(getattr(self, name), f"retention.{name}")
        for name in ("archive_older_than_days", "archive_age_days", "archive_grace_days", "purge_grace_days"):
            _positive_finite(getattr(self, name), f"retention.{name}")
        return self


class SimilarityConfig(_Section):
    """Cosine thresholds of the similarity bands (seeds 000, 001)."""

    duplicate_threshold: float = 0.97
    """At or above: duplicate collapse (auto)."""
    merge_threshold: float = 0.85
    """[merge, duplicate): review-gated consolidation."""
    contradiction_threshold: float = 0.80
    """Lower end of the contradiction band."""
    contradiction_threshold_max: float = 0.97
    """Upper end (exclusive) of the contradiction band."""
    association_threshold: float = 0.70
    """[association, merge): associated links."""
    association_top_k: int = 5
    """Associated links per memory."""
    exact_cutoff: int = 20_000
    """Namespaces up to this size use exact matrix products, larger ones the cell join."""

    @model_validator(mode="after")
    def _check(self) -> SimilarityConfig:
        for name in (
            "duplicate_threshold",
            "merge_threshold",
            "contradiction_threshold",
            "contradiction_threshold_max",
            "association_threshold",
        ):
            _unit(getattr(self, name), f"similarity.{name}")
        if not self.merge_threshold < self.duplicate_threshold:
            raise ValueError(
                f"similarity.merge_threshold ({self.merge_threshold}) must be below "
                f"similarity.duplicate_threshold ({self.duplicate_threshold})"
            )
        if not self.contradiction_threshold < self.contradiction_threshold_max:
            raise ValueError(
                f"similarity.contradiction_threshold ({self.contradiction_threshold}) must be below "
                f"similarity.contradiction_threshold_max ({self.contradiction_threshold_max})"
            )
        if not self.association_threshold < self.merge_threshold:
            raise ValueError(
                f"similarity.association_threshold ({self.association_threshold}) must be below "
                f"similarity.merge_threshold ({self.merge_threshold})"
            )
        return self

    @property
    def lowest_threshold(self) -> float:
        return min(self.association_threshold, self.contradiction_threshold, self.merge_threshold)


class EmbeddingsConfig(_Section):
    """Which embedder fills in missing vectors (docs/embeddings.md)."""

    embedder: str = "minilm"
    """minilm (offline all-MiniLM-L6-v2 int8), minilm-l3 (offline paraphrase-MiniLM-L3-v2: about 2x faster,
    same STS-B score, the `fast` extra; docs/embeddings.md) or package.module:attribute for your own. It embeds
    the rows without a current stored vector; vectors of two models are never compared."""
    batch_size: int = Field(64, ge=1)
    """Texts per embedding batch."""


class ContradictionConfig(_Section):
    """What happens to a confirmed contradiction (seed 000)."""

    policy: Literal["flag", "supersede"] = "flag"
    """flag (both visible, marked, auto) or supersede (older hidden, gated); anything else is refused at start."""
    rules_path: str | None = None
    """Word lists and patterns (YAML); empty uses the shipped contradiction_rules.yaml."""


class SemanticConfig(_Section):
    """Semantic extraction with ICD 203 confidence tiers (seed 003)."""

    cluster_similarity_threshold: float = 0.7
    """Episodic rows this similar form a pattern."""
    context_variability_threshold: float = 0.5
    """Distinct (conversation, project) contexts / cluster size needed to extract."""
    min_sources_for_corroborated: int = 2
    """Sources for the corroborated tier."""
    min_sources_for_assessed: int = 4
    """Sources for the assessed tier..."""
    min_sources_for_baseline: int = 8
    """Sources for the baseline tier..."""
    min_cycles_for_assessed: int = 2
    """...and consolidation cycles for assessed."""
    min_confidence_for_baseline: float = 0.8
    """...and confidence for baseline."""
    single_source_ceiling: float = 0.6
    """Confidence cap while a node has one source."""
    stale_decay_rate: float = 0.95
    """Anti-anchoring: confidence x this per cycle without reinforcement..."""
    stale_threshold_days: float = 30.0
    """...once a node has not been reinforced for this long."""
    compression_threshold: float = 0.85
    """Episodic rows this similar to an assessed/baseline node are marked semanticCompressed."""


class CompressionConfig(_Section):
    """Summaries of low-value clusters (seed 001); review-gated."""

    similarity_threshold: float = 0.75
    """Members of a compression cluster are at least this similar."""
    max_importance: float = 0.3
    """Only rows with importance at most this are compressed..."""
    max_score: float = 0.3
    """...and decay score at most this."""
    min_cluster_size: int = 3
    """Fewer members than this are left alone."""


class TemporalConfig(_Section):
    """Temporal edge maintenance (seed 003)."""

    decay_rate: float = 0.95
    """Weight x this per cycle."""
    traversal_boost: float = 1.2
    """And x this when traversed since the last cycle."""
    prune_threshold: float = 0.05
    """Edges below this are deleted."""
    neighbor_k: int = 3
    """Forward edges built per memory of a conversation."""
    forward_weight: float = 1.0
    """Weight of a new forward edge."""
    backward_weight: float = 0.5
    """Weight of a new backward edge (asymmetric contiguity)."""


class ReviewConfig(_Section):
    """The review gate."""

    auto_approve_gated: bool = False
    """Opt in: the nightly job approves and applies the gated change set too (seed 000: off)."""
    max_hidden_fraction: float = 0.2
    """The volume guard: a namespace's auto changes that would hide (archive, queue, supersede) more than this
    share of its visible memories in one night move to the gated set, held for review."""
    max_auto_changes: int = Field(0, ge=0)
    """A night with more auto changes than this moves them all to the gated set (0: no ceiling)."""
    held_renewal_days: float = Field(7.0, ge=0)
    """A held change waits in its set, unapproved, for this many days: until then a night whose guard holds
    the same change on the same unchanged row does not propose it again; after that it is proposed afresh (0:
    every night proposes all it holds)."""

    @field_validator("max_hidden_fraction")
    @classmethod
    def _fraction(cls, v: float) -> float:
        return _unit(v, "review.max_hidden_fraction")


class ApplyConfig(_Section):
    """The CAS apply."""

    batch_size: int = Field(1000, ge=1)
    """Changes per transaction."""


class SnapshotConfig(_Section):
    """The Parquet snapshot."""

    batch_size: int = Field(50_000, ge=1)
    """Rows per streamed batch (bounds memory)."""
    embedding_dim: int = Field(384, ge=1)
    """Vector size; a stored vector of another size is dropped (its row stays) and its text embedded."""
    max_invalid_fraction: float = Field(0.01, ge=0.0, le=1.0)
    """The blocking check fails the run when more rows than this are quarantined."""
    incremental: bool = True
    """Read only the memories and links the store journaled since the previous snapshot (written by anyone:
    agents, the apply, a raw writer; deleted ones dropped) and carry the rest over; false reads every row."""
    full_every_days: int = Field(7, ge=1)
    """An incremental snapshot still reads every row when the last full read is this many days old."""


class ExecutionConfig(_Section):
    """Where a run's steps execute. Results do not depend on it (it is left out of the config fingerprint)."""

    executor: Literal["in_process", "multiprocess", "dask"] = "in_process"
    """`in_process` (one process: least overhead, the default), `multiprocess` (local processes: shards and
    independent analyses in parallel) or `dask` (a Dask cluster through dagster-dask). Used by `run` and the UI."""
    max_concurrent: int = Field(2, ge=1)
    """Steps at once (multiprocess), or worker processes of the local Dask cluster."""
    dask_scheduler: str = ""
    """Address of a running Dask scheduler (tcp://host:8786); empty starts a local cluster per run."""
    reuse: bool = True
    """Carry last night's work over where its inputs did not change: the snapshot reads only changed rows
    (`snapshot.incremental`), vector pairs are compared again only in namespaces whose vectors moved (only
    their moved rows, against the namespace, where at most half moved and it is joined exactly), the
    contradictions are computed again only in namespaces whose inputs moved, the semantic step only in namespaces
    whose inputs moved or where a node's anti-anchoring falls due (what it proposed and did not land is proposed
    again with tonight's instant), retention judges only the rows whose next due date has come or whose inputs
    changed since it was dated (the others cannot move tonight), and over a layered snapshot the embeddings are
    layered too (only the rows written since its base get vectors; with one shard, `execution.shards: 1`). false
    recomputes every analysis from a full read of the store: the reference the incremental nights are held equal
    to (bench/nightly.py times both).
    Vectors and parsed sentences are still looked up by content: they depend on nothing else."""
    shards: int | None = Field(None, ge=1, le=256)
    """Namespace hash shards: the sharded analyses run one step per shard, in parallel on the executor. Unset:
    1 with `in_process` (its steps run one after another and each would read the whole file's vectors to pick its
    rows: at 1M memories one shard is 70 s faster; docs/benchmarks.md), else 4."""

    @property
    def shard_count(self) -> int:
        if self.shards is not None:
            return self.shards
        return 1 if self.executor == "in_process" else 4


class ScheduleConfig(_Section):
    """Schedules; daily partitions are UTC days and each run is for the day that just ended."""

    nightly_enabled: bool = True
    """The nightly schedule starts running when the code location loads."""
    nightly_hour: int = Field(3, ge=0, le=23)
    """Hour (UTC) of the nightly run."""
    nightly_minute: int = Field(0, ge=0, le=59)
    """Minute of the nightly run."""
    consolidate_enabled: bool = False
    """The consolidate schedule (seed 000: a scheduled merge runs without review, so off)."""
    consolidate_hour: int = Field(4, ge=0, le=23)
    """Hour (UTC) of the consolidate run."""


class PartitionsConfig(_Section):
    """The daily as-of partitions (UTC days) that runs, backfills and the UI offer."""

    start: str = "auto"
    """First as-of day: an ISO date (2023-01-01), or `auto`: the day of the earliest `created_at` in the store
    when the code location loads (today for an empty or unreachable store), so a 2023 corpus can be run and
    backfilled and the UI lists no empty years. Set a date to pin it (e.g. when the store is remote)."""

    @field_validator("start")
    @classmethod
    def _start(cls, v: str) -> str:
        if v != "auto":
            try:
                dt.date.fromisoformat(v)
            except ValueError:
                raise ValueError(
                    f"partitions.start must be 'auto' or an ISO date (2023-01-01), got {v!r}"
                ) from None
        return v


# The analyses whose proposals make the change sets, by the name of their asset (one list for the config's
# switches, the change-set step and the docs).
ANALYSES = NAMES  # the analyses' switches: one per analysis of the registry


class AnalysisSwitch(_Section):
    """Whether an analysis proposes anything, and into which review class."""

    enabled: bool = True
    """Off: the analysis proposes nothing (its table is still written, for the record)."""
    review_class: Literal["auto", "gated"] | None = None
    """`gated` puts every change it proposes behind review; `auto` applies them nightly; unset: its own classes."""


def _known_analyses(value: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(value) - set(ANALYSES))
    if unknown:
        raise ValueError(f"{where}: unknown analysis {', '.join(unknown)} (known: {', '.join(ANALYSES)})")
    return value


class NamespacePolicy(_Section):
    """Per-namespace overrides (exact name or glob) of the lifecycle sections and the analysis switches."""

    decay: dict[str, Any] = Field(default_factory=dict)
    promotion: dict[str, Any] = Field(default_factory=dict)
    retention: dict[str, Any] = Field(default_factory=dict)
    analyses: dict[str, Any] = Field(default_factory=dict)

    @field_validator("analyses")
    @classmethod
    def _analyses(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _known_analyses(v, "namespaces.*.analyses")


class Config(_Section):
    decay: DecayConfig = Field(default_factory=DecayConfig)
    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    similarity: SimilarityConfig = Field(default_factory=SimilarityConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    contradiction: ContradictionConfig = Field(default_factory=ContradictionConfig)
    semantic: SemanticConfig = Field(default_factory=SemanticConfig)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    temporal: TemporalConfig = Field(default_factory=TemporalConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    apply: ApplyConfig = Field(default_factory=ApplyConfig)
    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    schedules: ScheduleConfig = Field(default_factory=ScheduleConfig)
    partitions: PartitionsConfig = Field(default_factory=PartitionsConfig)
    analyses: dict[str, AnalysisSwitch] = Field(default_factory=dict)
    """Per analysis (its asset's name): `enabled`, `review_class`; e.g. {retention: {review_class: gated},
    semantic: {enabled: false}}. Namespaces override them under `namespaces.<name>.analyses`."""
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    namespaces: dict[str, NamespacePolicy] = Field(default_factory=dict)

    def for_namespace(self, namespace: str) -> Config:
        """This config with the overrides of every matching namespace entry applied (exact names last)."""
        matches = [k for k in self.namespaces if k != namespace and fnmatch.fnmatchcase(namespace, k)]
        if namespace in self.namespaces:
            matches.append(namespace)
        if not matches:
            return self
        data = self.model_dump()
        for key in matches:
            override = self.namespaces[key]
            for section in ("decay", "promotion", "retention", "analyses"):
                _deep_merge(data[section], getattr(override, section))
        data["namespaces"] = {}
        return _validated(data)

    @field_validator("analyses")
    @classmethod
    def _analyses(cls, v: dict[str, AnalysisSwitch]) -> dict[str, AnalysisSwitch]:
        return _known_analyses(v, "analyses")

    def switch(self, analysis: str) -> AnalysisSwitch:
        """This config's switch for `analysis` (the defaults when the config names none)."""
        return self.analyses.get(analysis) or AnalysisSwitch()

    def namespace_groups(self, namespaces: list[str], section: str) -> list[tuple[Config, list[str]]]:
        """Namespaces grouped by their effective settings of `section`, so each group is computed in one pass."""
        groups: dict[str, tuple[Config, list[str]]] = {}
        for namespace in sorted(namespaces):
            effective = self.for_namespace(namespace)
            key = json.dumps(effective.model_dump(mode="json", include={section})[section], sort_keys=True)
            groups.setdefault(key, (effective, []))[1].append(namespace)
        return list(groups.values())

    def fingerprint(self) -> str:
        """A stable digest of the settings, stored with each change set."""
        import hashlib
        import json

        return hashlib.sha256(
            json.dumps(
                self.model_dump(mode="json", exclude={"execution", "partitions"}), sort_keys=True
            ).encode()
        ).hexdigest()[:16]


def frozen_config(copy: Path, config_path: str | Path | None = None) -> Config:
    """The configuration frozen at `copy`: its first caller loads it (the file and the environment) and writes
    it there, every later caller reads that copy. One run's steps (several processes, possibly several machines
    sharing the warehouse) so see one configuration even if the file is edited while the run goes on."""
    if not copy.exists():
        # YAML, not JSON: an infinite half-life (archival rows never decay) has no JSON number.
        text = yaml.safe_dump(load_config(config_path).model_dump(mode="python"), sort_keys=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        draft = copy.with_name(f"{copy.name}.{os.getpid()}.draft")
        draft.write_text(text)
        try:
            os.link(draft, copy)  # atomic, and never replaces: of two first callers, one copy wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return Config.model_validate(yaml.safe_load(copy.read_text()))


# Seed environment variables (and a few of ours) -> (section path, type). Days/seconds converted below.
ENV_OVERRIDES: dict[str, tuple[tuple[str, ...], type]] = {
    "MEMORY_IMPORTANCE_HALF_LIFE_DAYS": (("decay", "engram", "half_life_days"), float),
    "MEMORY_DECAY_STALE_SCORE_THRESHOLD": (("decay", "stale_threshold"), float),
    "MEMORY_DECAY_PRUNE_SCORE_THRESHOLD": (("retention", "archive_score_threshold"), float),
    "MEMORY_DECAY_PRUNE_OLDER_THAN_DAYS": (("retention", "archive_older_than_days"), float),
    "STM_CONSOLIDATION_ACCESS_THRESHOLD": (("promotion", "stm_access_threshold"), int),
    "STM_CONSOLIDATION_IMPORTANCE_THRESHOLD": (("promotion", "stm_importance_threshold"), float),
    "PROMOTION_THRESHOLD": (("promotion", "semantic_access_threshold"), int),
    "MEMORY_DUPLICATE_THRESHOLD": (("similarity", "duplicate_threshold"), float),
    "MEMORY_CONSOLIDATION_MERGE_THRESHOLD": (("similarity", "merge_threshold"), float),
    "MEMORY_CONTRADICTION_THRESHOLD": (("similarity", "contradiction_threshold"), float),
    "MEMORY_CONTRADICTION_THRESHOLD_MAX": (("similarity", "contradiction_threshold_max"), float),
    "MEMORY_CONTRADICTION_POLICY": (("contradiction", "policy"), str),
    "ENGRAM_DECAY_POLICY": (("decay", "policy"), str),
    "ENGRAM_APPLY_BATCH_SIZE": (("apply", "batch_size"), int),
    "ENGRAM_EXECUTOR": (("execution", "executor"), str),
    "ENGRAM_DASK_SCHEDULER": (("execution", "dask_scheduler"), str),
    "ENGRAM_SHARDS": (("execution", "shards"), int),
}
ENV_SECONDS_TO_DAYS = {"ARCHIVE_AGE": ("retention", "archive_age_days")}


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> None:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _validated(data: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "config"
            message = err["msg"].removeprefix("Value error, ")
            # Our own validators already name the setting; pydantic's messages need the location.
            problems.append(
                message if message.startswith(where.split(".")[0] + ".") else f"{where}: {message}"
            )
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems)) from None


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Defaults, then the YAML file, then the seeds' environment variables; validated."""
    env = dict(os.environ if env is None else env)
    data: dict[str, Any] = {}
    chosen = path or env.get("ENGRAM_CONFIG")
    if chosen is None and Path("engram.yaml").exists():
        chosen = "engram.yaml"
    if chosen is not None:
        file = Path(chosen)
        if not file.exists():
            raise ConfigError(
                f"config file {file} does not exist (set --config or ENGRAM_CONFIG to a YAML file)"
            )
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"config file {file} is not valid YAML{where}: {problem}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file} must hold a mapping of sections")
        data = loaded
    for name, (keys, kind) in ENV_OVERRIDES.items():
        if name in env:
            try:
                _set_path(data, keys, kind(env[name]))
            except ValueError:
                raise ConfigError(f"{name}={env[name]!r} is not a valid {kind.__name__}") from None
    for name, keys in ENV_SECONDS_TO_DAYS.items():
        if name in env:
            try:
                _set_path(data, keys, float(env[name]) / 86400.0)
            except ValueError:
                raise ConfigError(f"{name}={env[name]!r} is not a number of seconds") from None
    return _validated(data)


def store_url(explicit: str | None = None) -> str:
    """`--store`, else ENGRAM_STORE_URL, else the embedded SQLite default."""
    return explicit or os.environ.get("ENGRAM_STORE_URL") or DEFAULT_STORE_URL


def warehouse_path(explicit: str | None = None) -> Path:
    """`--warehouse`, else ENGRAM_WAREHOUSE, else data/warehouse."""
    return Path(explicit or os.environ.get("ENGRAM_WAREHOUSE") or DEFAULT_WAREHOUSE)

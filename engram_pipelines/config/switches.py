"""The analysis switches: config `analyses.<name>` (`enabled`, `review_class`), per namespace under
`namespaces.<pattern>.analyses` (issue 20: "retention behind review, semantic extraction off").

Applied where the analyses' proposals become change sets (`switched_intents`): a disabled analysis proposes
nothing in a namespace, and a `review_class` puts all of its changes there in that class. The analyses that read
another's result as tonight's outcome (the merges skip rows retention archives tonight; semantic extraction
projects tonight's collapses and zone moves) read only what the night applies itself (`applied_tonight`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.config.model import ANALYSES, AnalysisSwitch, Config


def _switch_of(
    config: Config, analysis: str, namespaces: pa.ChunkedArray | pa.Array
) -> dict[str, AnalysisSwitch]:
    """Each namespace among `namespaces` -> its effective switch for `analysis` (one config merge per group
    of namespaces with the same overrides)."""
    names = pc.unique(namespaces).to_pylist()
    if not config.namespaces:  # one switch for every namespace
        return dict.fromkeys(names, config.switch(analysis))
    return {
        name: effective.switch(analysis)
        for effective, group in config.namespace_groups(names, "analyses")
        for name in group
    }


def _in_class(klass: str, switch: AnalysisSwitch) -> bool:
    return switch.review_class == klass


def _where(switches: dict[str, AnalysisSwitch], keep: Callable[[AnalysisSwitch], bool]) -> pa.Array:
    return pa.array([name for name, switch in switches.items() if keep(switch)], pa.string())


def switched_intents(config: Config, analysis: str, intents: pa.Table) -> pa.Table:
    """`intents` of `analysis` without those of namespaces where it is disabled, and in the class it is set to."""
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r}")
    if intents.num_rows == 0:
        return intents
    switches = _switch_of(config, analysis, intents["namespace"])
    enabled = _where(switches, lambda s: s.enabled)
    # Filtered only when a namespace has it off: a filter copies the table (a first night's 1.6 GB of intents).
    out = (
        intents if len(enabled) == len(switches) else intents.filter(pc.is_in(intents["namespace"], enabled))
    )
    for klass in ("auto", "gated"):
        chosen = _where(switches, functools.partial(_in_class, klass))
        if len(chosen):
            mask = pc.is_in(out["namespace"], chosen)
            column = pc.if_else(mask, pa.scalar(klass), out["review_class"])
            out = out.set_column(out.schema.get_field_index("review_class"), "review_class", column)
    return out.cast(intents.schema)


def applied_tonight(config: Config, analysis: str, table: pa.Table, column: str = "namespace") -> pa.Table:
    """The rows of `analysis`'s result whose namespace has it enabled and not put behind review."""
    if table.num_rows == 0:
        return table
    switches = _switch_of(config, analysis, table[column])
    live = _where(switches, lambda s: s.enabled and s.review_class != "gated")
    return table.filter(pc.is_in(table[column], live))


def describe(config: Config, analysis: str) -> str:
    """One line for the asset's metadata: the global switch and how many namespace patterns override it."""
    switch = config.switch(analysis)
    text = ("enabled" if switch.enabled else "disabled") + (
        f", review class {switch.review_class}" if switch.review_class else ", its own review classes"
    )
    overrides = sorted(k for k, p in config.namespaces.items() if analysis in p.analyses)
    return text + (f"; overridden for {', '.join(overrides)}" if overrides else "")

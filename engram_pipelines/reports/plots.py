"""Plots people would rather look at than read: PNG bytes, rendered headless (matplotlib's Agg backend)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

BLUE, ORANGE, GREY = "#2a7ab0", "#d0663a", "#444444"


def _png(fig: plt.Figure) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """A Markdown image with the PNG inlined, for asset metadata and self-contained reports."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


# The Dagster UI shows a Markdown metadata value inline only under 1,000 characters (longer ones, every PNG
# among them, sit behind "[Show Markdown]"): a bar chart drawn with block characters in a small table fits.
INLINE_LIMIT = 1000


def inline_bars(counts: Mapping[str, float], *, width: int = 16, limit: int = 12) -> str:
    """A Markdown table with one bar per key (block characters, scaled to the largest value), under the UI's
    inline limit: the largest `limit` keys in the order given, then a "+ N more" row."""
    shown = list(counts.items())[:limit]
    top = max((v for _, v in shown), default=0) or 1
    lines = ["| | | |", "|---|---:|---|"]
    for key, value in shown:
        cells = int(round(width * value / top))
        bar = "█" * cells or ("▏" if value else "")
        lines.append(f"| {str(key)[:24]} | {value:,} | {bar} |")
    if len(counts) > limit:
        lines.append(f"| + {len(counts) - limit} more | | |")
    while len("\n".join(lines)) >= INLINE_LIMIT and len(lines) > 3:
        lines.pop(-1)
    return "\n".join(lines)


def score_bands(scores: np.ndarray, bands: int = 10) -> dict[str, int]:
    """How many scores fall in each tenth of [0, 1] (the histogram, as `inline_bars` draws it)."""
    finite = scores[np.isfinite(scores)]
    counts, edges = np.histogram(finite, bins=np.linspace(0, 1, bands + 1))
    return {f"{edges[i]:.1f}-{edges[i + 1]:.1f}": int(n) for i, n in enumerate(counts)}


def score_histogram(scores: np.ndarray, *, threshold: float, title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=110)
    ax.hist(scores[np.isfinite(scores)], bins=np.linspace(0, 1, 41).tolist(), color=BLUE)
    ax.axvline(threshold, color=GREY, linestyle="--", linewidth=1)
    ax.text(threshold, ax.get_ylim()[1] * 0.95, f" stale < {threshold}", fontsize=8, va="top")
    ax.set(xlabel="decay score", ylabel="memories", title=title)
    return _png(fig)


def score_overlay(
    now: np.ndarray, then: np.ndarray, *, labels: tuple[str, str], threshold: float, title: str
) -> bytes:
    """Two score distributions over each other (the decay preview's now vs then)."""
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    bins = np.linspace(0, 1, 41)
    ax.hist(now, bins=bins.tolist(), alpha=0.6, label=labels[0], color=BLUE)
    ax.hist(then, bins=bins.tolist(), alpha=0.6, label=labels[1], color=ORANGE)
    ax.axvline(threshold, color=GREY, linestyle="--", linewidth=1)
    ax.text(threshold, ax.get_ylim()[1] * 0.95, f" stale < {threshold}", fontsize=8, va="top")
    ax.set(xlabel="decay score", ylabel="memories", title=title)
    ax.legend()
    return _png(fig)


def similarity_histogram(scores: np.ndarray, thresholds: dict[str, float]) -> bytes:
    """Pair cosines with each configured threshold drawn and named."""
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=110)
    low = min([*thresholds.values(), float(scores.min()) if scores.size else 1.0])
    ax.hist(scores, bins=np.linspace(low, 1.0, 40).tolist(), color=BLUE)
    top = ax.get_ylim()[1]
    for i, (name, value) in enumerate(sorted(thresholds.items(), key=lambda kv: kv[1])):
        ax.axvline(value, color=ORANGE, linestyle="--", linewidth=1)
        ax.text(value, top * (0.95 - 0.1 * i), f" {name} {value}", fontsize=8, va="top", color=ORANGE)
    ax.set(xlabel="cosine similarity", ylabel="pairs", title="Similar pairs by cosine, with the thresholds")
    return _png(fig)


def cluster_sizes(sizes: Sequence[int], title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    values, counts = np.unique(np.asarray(sizes, dtype=int), return_counts=True)
    ax.bar([str(v) for v in values.tolist()], counts.tolist(), color=BLUE)
    ax.set(xlabel="members per cluster (canonical + losers)", ylabel="clusters", title=title)
    return _png(fig)


def top_keys(counts: dict[str, dict[str, int]], limit: int) -> dict[str, dict[str, int]]:
    """The `limit` keys with the most changes, and one bar for all the others ("12 others"): a chart of
    10,000 namespaces took most of a change set step's 51 s, and no one can read it."""
    if len(counts) <= limit:
        return counts
    ranked = sorted(counts, key=lambda k: (-sum(counts[k].values()), k))
    out = {k: counts[k] for k in ranked[:limit]}
    rest: dict[str, int] = {}
    for key in ranked[limit:]:
        for op, n in counts[key].items():
            rest[op] = rest.get(op, 0) + n
    out[f"{len(ranked) - limit:,} others"] = rest
    return out


def changes_by_op(counts: dict[str, dict[str, int]], title: str) -> bytes:
    """Stacked bars: one bar per key (a namespace or a date), one colour per op."""
    keys = sorted(counts)
    ops = sorted({op for per in counts.values() for op in per})
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
    bottom = np.zeros(len(keys))
    colours = plt.get_cmap("tab20")
    for i, op in enumerate(ops):
        heights = np.array([counts[k].get(op, 0) for k in keys], dtype=float)
        ax.bar(keys, heights, bottom=bottom, label=op, color=colours(i % 20))
        bottom += heights
    ax.set(ylabel="changes", title=title)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    if ops:
        ax.legend(fontsize=7, ncols=2)
    return _png(fig)

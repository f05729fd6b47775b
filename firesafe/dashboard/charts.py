"""Server-rendered SVG charts (no JavaScript): throughput and failure rate per minute.

Pure functions of their inputs; every text they place in the SVG is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from firesafe.store.dashboard import Bucket

#: Outcomes counted as failures in the failure rate (deferrals and interruptions are not failures).
FAILED = frozenset({"failed", "timed_out", "lost"})
SUCCEEDED = "succeeded"


def series(buckets: Sequence[Bucket], n: int) -> tuple[list[int], list[int]]:
    """Succeeded and failed attempts per bucket, ``n`` buckets (outcomes of other kinds are left out).

    >>> series([Bucket(0, "succeeded", 5), Bucket(0, "failed", 1), Bucket(2, "timed_out", 2),
    ...         Bucket(2, "deferred", 9), Bucket(7, "succeeded", 1)], 3)
    ([5, 0, 0], [1, 0, 2])
    """
    ok, bad = [0] * n, [0] * n
    for b in buckets:
        if 0 <= b.index < n:
            if b.outcome == SUCCEEDED:
                ok[b.index] += b.count
            elif b.outcome in FAILED:
                bad[b.index] += b.count
    return ok, bad


def failure_rates(ok: Sequence[int], bad: Sequence[int]) -> list[float | None]:
    """The failed share of finished attempts per bucket (None where nothing finished).

    >>> failure_rates([3, 0, 0], [1, 0, 2])
    [0.25, None, 1.0]
    """
    return [b / (o + b) if o + b else None for o, b in zip(ok, bad, strict=True)]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (at least 1).

    >>> [nice_ceiling(v) for v in (0, 1, 3, 7, 12, 480, 0.3)]
    [1, 1, 5, 10, 20, 500, 1]
    """
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def _fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


_W, _H, _LEFT, _BOTTOM, _TOP, _RIGHT = 640, 170, 44, 22, 10, 8


def _frame(title: str, y_max: float, y_label: str, minutes: int) -> list[str]:
    """Axes, grid and labels shared by both charts."""
    plot_h = _H - _TOP - _BOTTOM
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(title)}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>']
    for i in range(5):
        y = _TOP + plot_h * i / 4
        value = y_max * (4 - i) / 4
        parts.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{escape(_fmt(value))}{escape(y_label)}</text>')
    plot_w = _W - _LEFT - _RIGHT
    step = 10 if minutes >= 30 else 5
    for m in range(0, minutes + 1, step):
        x = _LEFT + plot_w * m / minutes
        label = "now" if m == minutes else f"-{minutes - m}m"
        parts.append(f'<text class="axis" x="{x:.1f}" y="{_H - 6}" text-anchor="middle">{escape(label)}</text>')
    return parts


def throughput_chart(ok: Sequence[int], bad: Sequence[int], width_minutes: float = 1.0) -> Markup:
    """Stacked bars: succeeded and failed attempts per bucket, oldest left.

    >>> svg = throughput_chart([1, 2], [0, 1])
    >>> svg.startswith("<svg") and svg.count('class="bar ok"') == 2 and svg.count('class="bar failed"') == 1
    True
    """
    n = len(ok)
    minutes = max(1, round(n * width_minutes))
    top = nice_ceiling(max((o + b for o, b in zip(ok, bad, strict=True)), default=0))
    parts = _frame("Attempts per minute: succeeded and failed", top, "", minutes)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    bar_w = plot_w / max(n, 1)
    for i, (o, b) in enumerate(zip(ok, bad, strict=True)):
        x = _LEFT + i * bar_w + bar_w * 0.1
        base: float = _TOP + plot_h
        for count, cls in ((o, "ok"), (b, "failed")):
            if count <= 0:
                continue
            h = plot_h * count / top
            base -= h
            ago = (n - i) * width_minutes
            tip = f"{count} {'succeeded' if cls == 'ok' else 'failed'}, {_fmt(ago)} min ago"
            parts.append(f'<rect class="bar {cls}" x="{x:.1f}" y="{base:.1f}" width="{bar_w * 0.8:.1f}" '
                         f'height="{h:.1f}"><title>{escape(tip)}</title></rect>')
    parts.append("</svg>")
    return Markup("".join(parts))


def rate_chart(rates: Sequence[float | None], width_minutes: float = 1.0) -> Markup:
    """A line of the failure rate per bucket (gaps where nothing finished), 0 to 100 %.

    >>> svg = rate_chart([0.0, None, 0.5, 1.0])
    >>> svg.count("<polyline") == 2 and svg.count("<circle") == 3
    True
    """
    n = len(rates)
    minutes = max(1, round(n * width_minutes))
    parts = _frame("Failure rate per minute", 100, "%", minutes)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    step = plot_w / max(n, 1)
    runs: list[list[tuple[float, float]]] = [[]]
    dots = []
    for i, r in enumerate(rates):
        if r is None:
            if runs[-1]:
                runs.append([])
            continue
        x = _LEFT + (i + 0.5) * step
        y = _TOP + plot_h * (1 - r)
        runs[-1].append((x, y))
        ago = (n - i) * width_minutes
        dots.append(f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>'
                    f'{escape(f"{r * 100:.0f}% failed, {_fmt(ago)} min ago")}</title></circle>')
    for run in runs:
        if run:
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
            parts.append(f'<polyline class="line" points="{points}"/>')
    parts.extend(dots)
    parts.append("</svg>")
    return Markup("".join(parts))

"""The usage chart: a bar chart drawn on the server as SVG (no script, no library).

Only presentation attributes (``fill``, ``x``, ``height``), never ``style``: the console's
Content-Security-Policy allows no inline style, and attributes are not style.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart"]

_W, _H = 720, 220
_PAD_L, _PAD_B, _PAD_T = 56, 36, 12


def _short(n: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:g}"


def bar_chart(points: Sequence[tuple[str, float]], *, title: str) -> str:
    """An SVG document fragment: one bar per (label, value), scaled to the largest."""
    top = max((v for _, v in points), default=0.0) or 1.0
    n = max(len(points), 1)
    slot = (_W - _PAD_L) / n
    bar = max(2.0, slot * 0.7)
    plot_h = _H - _PAD_B - _PAD_T
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'role="img" aria-label="{escape(title)}" class="chart">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{_PAD_L}" y1="{_H - _PAD_B}" x2="{_W}" y2="{_H - _PAD_B}" '
        'stroke="#888" stroke-width="1"/>',
        f'<text x="{_PAD_L - 6}" y="{_PAD_T + 10}" text-anchor="end" font-size="11" '
        f'fill="#555">{_short(top)}</text>',
        f'<text x="{_PAD_L - 6}" y="{_H - _PAD_B}" text-anchor="end" font-size="11" '
        'fill="#555">0</text>',
    ]
    every = max(1, n // 12)  # at most ~12 labels under the axis
    for i, (label, value) in enumerate(points):
        h = plot_h * value / top
        x = _PAD_L + i * slot + (slot - bar) / 2
        y = _H - _PAD_B - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="#3b6ea5">'
            f"<title>{escape(label)}: {value:g}</title></rect>")
        if i % every == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{_H - _PAD_B + 14}" text-anchor="middle" '
                f'font-size="10" fill="#555">{escape(label[-10:])}</text>')
    if not points:
        parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" font-size="13" '
                     'fill="#555">no usage recorded</text>')
    parts.append("</svg>")
    return "".join(parts)

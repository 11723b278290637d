"""Server-rendered inline SVG charts: no JavaScript, nothing fetched, readable by screen readers.

Every chart is an ``<svg role="img">`` named by its ``<title>`` and ``<desc>``; each bar has
its own ``<title>`` (a tooltip, and what assistive technology reads). The page puts a table
with the same numbers under each chart. Labels are redacted and escaped here, because the
SVG is inserted as markup.
"""

from __future__ import annotations

import itertools

from markupsafe import Markup, escape

from hpcmem.kb.safety.redact import redact_text

# Colour-blind-safe palette (Okabe-Ito, then Tol's muted), enough for the top categories.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#332288",
           "#882255", "#44AA99", "#999933", "#AA4499")
_ids = itertools.count(1)


def _text(value: object) -> str:
    return str(escape(redact_text(str(value))))


def _frame(width: int, height: int, title: str, desc: str, body: list[str]) -> Markup:
    n = next(_ids)
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-labelledby="chart{n}-t chart{n}-d">'
        f'<title id="chart{n}-t">{_text(title)}</title><desc id="chart{n}-d">{_text(desc)}</desc>'
        + "".join(body) + "</svg>"
    )


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def stacked_weeks(weeks: list[str], series: dict[str, dict[str, int]], *, title: str, max_series: int = 8) -> Markup:
    """Failures per week, one stacked bar per week, one colour per category.

    Categories past ``max_series`` are summed into "other" so the legend stays readable.
    """
    names = list(series)
    shown = names[:max_series]
    data = {n: series[n] for n in shown}
    if len(names) > max_series:
        data["other"] = {w: sum(series[n][w] for n in names[max_series:]) for w in weeks}
    totals = [sum(d[w] for d in data.values()) for w in weeks]
    top = max(totals, default=0) or 1
    left, bottom, plot_h, bar_w, gap = 48, 40, 200, 28, 10
    width = left + len(weeks) * (bar_w + gap) + 170
    height = plot_h + bottom + 30
    body = [f'<line x1="{left}" y1="20" x2="{left}" y2="{20 + plot_h}" class="axis"/>',
            f'<line x1="{left}" y1="{20 + plot_h}" x2="{left + len(weeks) * (bar_w + gap)}" y2="{20 + plot_h}" '
            'class="axis"/>',
            f'<text x="{left - 6}" y="26" text-anchor="end" class="tick">{top}</text>',
            f'<text x="{left - 6}" y="{20 + plot_h}" text-anchor="end" class="tick">0</text>']
    for i, week in enumerate(weeks):
        x = left + gap / 2 + i * (bar_w + gap)
        y = 20 + plot_h
        for j, (name, values) in enumerate(data.items()):
            n = values.get(week, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w}" height="{h:.1f}" fill="{colour(j)}">'
                        f'<title>week of {_text(week)}: {n} {_text(name)}</title></rect>')
        if i % 2 == 0 or len(weeks) <= 8:
            body.append(f'<text x="{x + bar_w / 2:.1f}" y="{20 + plot_h + 16}" text-anchor="middle" '
                        f'class="tick">{_text(week[5:])}</text>')
    lx = left + len(weeks) * (bar_w + gap) + 14
    for j, name in enumerate(data):
        ly = 24 + j * 18
        body.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour(j)}"/>'
                    f'<text x="{lx + 18}" y="{ly + 10}" class="legend">{_text(name[:22])}</text>')
    desc = (f"Stacked bars, one per week from {weeks[0] if weeks else '-'}; {sum(totals)} failures in all. "
            "The table below has the same numbers.")
    return _frame(int(width), int(height), title, desc, body)


def hbars(items: list[tuple[str, float, str]], *, title: str, unit: str = "", scale: float | None = None) -> Markup:
    """Horizontal bars: (label, value, tooltip) each; ``scale`` fixes the full width (e.g. 1.0 for shares)."""
    top = scale or max((v for _, v, _ in items), default=0) or 1
    label_w, bar_max, row = 230, 320, 24
    height = 12 + row * max(len(items), 1)
    body = []
    for i, (label, value, tip) in enumerate(items):
        y = 8 + i * row
        w = bar_max * (value / top) if top else 0
        shown = f"{value:.0%}" if unit == "%" else f"{value:g}"
        body.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" class="legend">{_text(label[:34])}</text>'
                    f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="16" fill="{colour(i if unit != "%" else 0)}">'
                    f'<title>{_text(tip)}</title></rect>'
                    f'<text x="{label_w + w + 6:.1f}" y="{y + 14}" class="tick">{shown}</text>')
    if not items:
        body.append(f'<text x="8" y="24" class="tick">no data yet</text>')
    return _frame(label_w + bar_max + 60, height, title, f"{len(items)} bars; the table below has the numbers.",
                  body)


def paired_shares(rows: list[tuple[str, float | None, float | None]], *, title: str,
                  labels: tuple[str, str]) -> Markup:
    """Two bars per row (e.g. per lab: share before a lesson existed, share after)."""
    label_w, bar_max, row = 170, 300, 44
    height = 40 + row * max(len(rows), 1)
    body = []
    for k, text in enumerate(labels):
        body.append(f'<rect x="{label_w + k * 200}" y="6" width="12" height="12" fill="{colour(k)}"/>'
                    f'<text x="{label_w + 18 + k * 200}" y="16" class="legend">{_text(text)}</text>')
    for i, (lab, first, second) in enumerate(rows):
        y = 30 + i * row
        body.append(f'<text x="{label_w - 8}" y="{y + 22}" text-anchor="end" class="legend">{_text(lab[:24])}</text>')
        for k, share in enumerate((first, second)):
            by = y + k * 18
            if share is None:
                body.append(f'<text x="{label_w}" y="{by + 13}" class="tick">{_text(labels[k])}: no users yet</text>')
                continue
            w = bar_max * share
            body.append(f'<rect x="{label_w}" y="{by}" width="{w:.1f}" height="15" fill="{colour(k)}">'
                        f'<title>{_text(lab)}, {_text(labels[k])}: {share:.0%}</title></rect>'
                        f'<text x="{label_w + w + 6:.1f}" y="{by + 12}" class="tick">{share:.0%}</text>')
    return _frame(label_w + bar_max + 60, height, title,
                  "Pairs of bars per lab; the table below has the counts behind each share.", body)

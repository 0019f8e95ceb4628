"""The soak's picture, one per run (no plotting library needed): jobs ended per 5 s and their median
submit-to-end latency over the run, each fault a shaded band with its kind, the fairness burst a blue one. Drawn
as SVG; `write` makes a PNG of it with Debian's headless `chromium` (the browser the web page test drives) when
the path ends in `.png`."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html import escape
from pathlib import Path
from statistics import median

from benchmarks.soaking.run import SoakResult

W, H, LEFT, TOP, BOTTOM = 960, 420, 50, 20, 120
BUCKET_S = 5.0


LABELLED_FAULTS = 40  # more faults than this are shaded without a label each


def svg(result: SoakResult) -> str:
    span = max(result.ended - result.began, 1.0)
    buckets = int(span // BUCKET_S) + 1
    ends: list[list[float]] = [[] for _ in range(buckets)]
    for job in result.jobs:
        if job.ended_at:
            ends[int((job.ended_at - result.began) // BUCKET_S)].append(job.ended_at - job.submitted_at)
    rates = [len(b) / BUCKET_S for b in ends]
    medians = [median(b) if b else 0.0 for b in ends]
    top_rate, top_latency = max([*rates, 1.0]), max([*medians, 1.0])
    plot_w, plot_h = W - LEFT - 80, H - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * t / span

    def y(v: float, top: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>']
    for fault in result.faults:
        a, b = x(fault.began - result.began), x(max(fault.ended, fault.began + 0.5) - result.began)
        parts.append(f'<rect x="{a:.1f}" y="{TOP}" width="{b - a:.1f}" height="{plot_h}" fill="#f4b183" '
                     f'opacity="0.5"><title>{escape(fault.kind)}: {escape(fault.detail)}</title></rect>')
        if len(result.faults) <= LABELLED_FAULTS:
            parts.append(f'<text x="{a:.1f}" y="{H - BOTTOM + 28}" transform="rotate(45 {a:.1f} {H - BOTTOM + 28})" '
                         f'fill="#a0522d">{escape(fault.kind)}</text>')
    if len(result.faults) > LABELLED_FAULTS:  # a long run's labels would cover each other: the count instead
        parts.append(f'<text x="{LEFT}" y="{H - BOTTOM + 28}" fill="#a0522d">{len(result.faults)} faults, shaded '
                     '(hover one for its kind)</text>')
    burst = [j for j in result.jobs if j.kind == "burst" and j.submitted_at]
    if burst:  # the fairness burst, after the faults
        a = x(min(j.submitted_at for j in burst) - result.began)
        b = x(max(j.ended_at or result.ended for j in burst) - result.began)
        parts.append(f'<rect x="{a:.1f}" y="{TOP}" width="{b - a:.1f}" height="{plot_h}" fill="#9dc3e6" '
                     'opacity="0.4"><title>acme\'s burst</title></rect>')
        parts.append(f'<text x="{a + 4:.1f}" y="{TOP + 40}" fill="#2e75b6">acme\'s burst</text>')
    for values, top, colour in ((rates, top_rate, "#1f77b4"), (medians, top_latency, "#2ca02c")):
        points = " ".join(f"{x(min((i + 0.5) * BUCKET_S, span)):.1f},{y(v, top):.1f}"
                          for i, v in enumerate(values))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
    load_end = x(result.load_ended - result.began)
    parts += [f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>',
              f'<line x1="{load_end:.1f}" y1="{TOP}" x2="{load_end:.1f}" y2="{TOP + plot_h}" stroke="gray" '
              'stroke-dasharray="4"/>',
              f'<text x="{LEFT}" y="{TOP - 6}" fill="#1f77b4">jobs ended per s (max {top_rate:.1f})</text>',
              f'<text x="{LEFT + 220}" y="{TOP - 6}" fill="#2ca02c">median submit-to-end, s (max {top_latency:.1f})'
              '</text>',
              f'<text x="{load_end + 4:.1f}" y="{TOP + 12}" fill="gray">load stops</text>',
              f'<text x="{LEFT + plot_w - 100}" y="{TOP + plot_h + 14}">{span:.0f} s, seed {result.config.seed}'
              '</text>', "</svg>"]
    return "\n".join(parts)


def chromium() -> str | None:
    """Debian's chromium, found as dev.py and the web page test find it."""
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")


def png(svg_text: str, path: Path, timeout_s: float = 60.0) -> str | None:
    """Renders the SVG to a PNG at `path` with headless chromium; None when it did, else why not."""
    browser = chromium()
    if browser is None:
        return "no chromium (apt-get install chromium)"
    with tempfile.TemporaryDirectory(prefix="agentq-soak-plot-") as folder:
        page = Path(folder) / "plot.svg"
        page.write_text(svg_text)
        line = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={folder}/profile", f"--window-size={W},{H}", f"--screenshot={path.resolve()}",
                page.as_uri()]
        try:
            done = subprocess.run(line, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"chromium failed: {e}"
    if done.returncode != 0 or not path.exists() or path.stat().st_size == 0:
        return f"chromium exited {done.returncode}: {done.stderr.strip()[-300:]}"
    return None


def write(result: SoakResult, path: Path) -> list[str]:
    """The picture at `path`: SVG, or PNG by its suffix. A PNG that cannot be made falls back to the SVG beside
    it (`<path>.svg`); returns what to tell the reader (empty when the path was written as asked)."""
    drawn = svg(result)
    if path.suffix.lower() != ".png":
        path.write_text(drawn)
        return []
    if (why := png(drawn, path)) is None:
        return []
    fallback = path.with_suffix(".svg")
    fallback.write_text(drawn)
    return [f"soak: no PNG at {path} ({why}); the picture is the SVG {fallback}"]

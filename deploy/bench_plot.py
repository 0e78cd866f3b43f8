#!/usr/bin/env python3
"""Draw PNG charts from the CSVs of `wscope bench --csv` and of the contention timeline, with
only the standard library: the small raster renderer (RGB canvas, lines, bars, markers, a 5x7
bitmap font) and the PNG writer (zlib + struct) live in this file.

  python3 deploy/bench_plot.py --grid docs/runs/h200-run208-grids/gd/bench-deepseek_v2.csv --out-dir /tmp/plots
      per batch size B: <prefix>-batch<B>-throughput.png (tokens/s against the context, one
      line per policy) and <prefix>-batch<B>-speedup.png (writescope's tokens/s divided by each
      baseline's, per context). Repeated rows of one (policy, batch, context) are merged as
      bench_report.py merges them (tokens/s: the harmonic mean, the step time: the mean).
  python3 deploy/bench_plot.py --timeline steps.csv [--events events.csv] --out-dir DIR
      <prefix>-timeline.png: step_ms (top) and the target / placed CPU share (bottom) against
      the seconds since each policy's first step, and the share the CPU attended (its 5-step
      mean, dotted) when the CSV has read_cpu_share; the events are dashed vertical lines.

<prefix> is --label, else the CSV's name without ".csv"; with several --grid files and a
--label, <label>-<stem>. --grid may be repeated and combined with --timeline. One line is
printed per PNG written. Bad input (a missing file or column, no rows, a bad number) exits 2
with a message.
"""
import argparse
import csv
import gzip
import math
import os
import struct
import sys
import zlib
from collections import defaultdict

GRID_COLUMNS = ("policy", "batch", "context", "tokens_per_s", "step_ms")
TIMELINE_COLUMNS = ("policy", "round", "step", "unix_s", "step_ms", "target_cpu_share",
                    "placed_cpu_share")
EVENT_COLUMNS = ("policy", "unix_s", "event")
HERO = "writescope"  # drawn boldest, on top, first in the legend

WHITE, BLACK = (255, 255, 255), (0, 0, 0)
GRID_GRAY, AXIS_GRAY, TEXT_GRAY = (228, 228, 228), (150, 150, 150), (90, 90, 90)
HERO_COLOR = (31, 119, 180)
PALETTE = [(255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]
MARKERS = ["circle", "square", "triangle", "diamond"]

# 5x7 glyphs: one hex number per row, 0x10 the leftmost pixel. Rows 8 and 9 hang below the
# baseline (descenders, commas).
_GLYPHS = {
    "0": "0E 11 13 15 19 11 0E", "1": "04 0C 04 04 04 04 0E", "2": "0E 11 01 02 04 08 1F",
    "3": "1F 02 04 02 01 11 0E", "4": "02 06 0A 12 1F 02 02", "5": "1F 10 1E 01 01 11 0E",
    "6": "06 08 10 1E 11 11 0E", "7": "1F 01 02 04 08 08 08", "8": "0E 11 11 0E 11 11 0E",
    "9": "0E 11 11 0F 01 02 0C",
    "A": "0E 11 11 1F 11 11 11", "B": "1E 11 11 1E 11 11 1E", "C": "0E 11 10 10 10 11 0E",
    "D": "1C 12 11 11 11 12 1C", "E": "1F 10 10 1E 10 10 1F", "F": "1F 10 10 1E 10 10 10",
    "G": "0E 11 10 17 11 11 0F", "H": "11 11 11 1F 11 11 11", "I": "0E 04 04 04 04 04 0E",
    "J": "07 02 02 02 02 12 0C", "K": "11 12 14 18 14 12 11", "L": "10 10 10 10 10 10 1F",
    "M": "11 1B 15 15 11 11 11", "N": "11 11 19 15 13 11 11", "O": "0E 11 11 11 11 11 0E",
    "P": "1E 11 11 1E 10 10 10", "Q": "0E 11 11 11 15 12 0D", "R": "1E 11 11 1E 14 12 11",
    "S": "0F 10 10 0E 01 01 1E", "T": "1F 04 04 04 04 04 04", "U": "11 11 11 11 11 11 0E",
    "V": "11 11 11 11 11 0A 04", "W": "11 11 11 15 15 15 0A", "X": "11 11 0A 04 0A 11 11",
    "Y": "11 11 11 0A 04 04 04", "Z": "1F 01 02 04 08 10 1F",
    "a": "00 00 0E 01 0F 11 0F", "b": "10 10 16 19 11 11 1E", "c": "00 00 0E 10 10 11 0E",
    "d": "01 01 0D 13 11 11 0F", "e": "00 00 0E 11 1F 10 0E", "f": "06 09 08 1C 08 08 08",
    "g": "00 00 0F 11 11 0F 01 11 0E", "h": "10 10 16 19 11 11 11", "i": "04 00 0C 04 04 04 0E",
    "j": "02 00 06 02 02 02 02 12 0C", "k": "10 10 12 14 18 14 12", "l": "0C 04 04 04 04 04 0E",
    "m": "00 00 1A 15 15 11 11", "n": "00 00 16 19 11 11 11", "o": "00 00 0E 11 11 11 0E",
    "p": "00 00 1E 11 11 1E 10 10 10", "q": "00 00 0F 11 11 0F 01 01 01",
    "r": "00 00 16 19 10 10 10", "s": "00 00 0E 10 0E 01 1E", "t": "08 08 1C 08 08 09 06",
    "u": "00 00 11 11 11 13 0D", "v": "00 00 11 11 11 0A 04", "w": "00 00 11 11 15 15 0A",
    "x": "00 00 11 0A 04 0A 11", "y": "00 00 11 11 11 0F 01 11 0E", "z": "00 00 1F 02 04 08 1F",
    " ": "00 00 00 00 00 00 00", ".": "00 00 00 00 00 0C 0C", ",": "00 00 00 00 00 0C 04 08",
    ":": "00 0C 0C 00 0C 0C 00", ";": "00 0C 0C 00 0C 04 08", "-": "00 00 00 1F 00 00 00",
    "+": "00 04 04 1F 04 04 00", "/": "01 01 02 04 08 10 10", "(": "02 04 08 08 08 04 02",
    ")": "08 04 02 02 02 04 08", "%": "18 19 02 04 08 13 03", "*": "00 04 15 0E 15 04 00",
    "=": "00 00 1F 00 1F 00 00", "_": "00 00 00 00 00 00 1F", "<": "02 04 08 10 08 04 02",
    ">": "08 04 02 01 02 04 08", "[": "0E 08 08 08 08 08 0E", "]": "0E 02 02 02 02 02 0E",
    "#": "0A 0A 1F 0A 1F 0A 0A", "'": "04 04 08 00 00 00 00", "?": "0E 11 01 02 04 00 04",
    "!": "04 04 04 04 04 00 04", "|": "04 04 04 04 04 04 04", '"': "0A 0A 00 00 00 00 00",
}
FONT = {ch: [int(h, 16) for h in rows.split()] for ch, rows in _GLYPHS.items()}


class InputError(Exception):
    """Bad input: reported as one line, exit status 2."""


# ---------------------------------------------------------------------------------------------
# The renderer.

def text_width(s, scale=1):
    return max(0, len(s) * 6 * scale - scale)


class Canvas:
    def __init__(self, width, height, background=WHITE):
        self.w, self.h = width, height
        self.px = bytearray(bytes(background) * (width * height))

    def rect(self, x0, y0, x1, y1, color):
        """Fills the rectangle with corners (x0, y0) and (x1, y1), both included; clipped."""
        x0, x1 = sorted((int(round(x0)), int(round(x1))))
        y0, y1 = sorted((int(round(y0)), int(round(y1))))
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, self.w - 1), min(y1, self.h - 1)
        if x0 > x1 or y0 > y1:
            return
        run = bytes(color) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(run)] = run

    def pixel(self, x, y):
        i = (y * self.w + x) * 3
        return tuple(self.px[i:i + 3])

    def line(self, x0, y0, x1, y1, color, width=1, dash=None, phase=0):
        """Bresenham, each point stamped as a width x width square. dash=(on, off) in steps,
        starting at phase; returns the phase at the end so a dashed polyline stays in step."""
        x0, y0, x1, y1 = (int(round(v)) for v in (x0, y0, x1, y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, lo = dx + dy, -((width - 1) // 2)
        while True:
            if dash is None or phase % (dash[0] + dash[1]) < dash[0]:
                self.rect(x0 + lo, y0 + lo, x0 + lo + width - 1, y0 + lo + width - 1, color)
            phase += 1
            if x0 == x1 and y0 == y1:
                return phase
            e2 = 2 * err
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def polyline(self, points, color, width=1, dash=None):
        phase = 0
        for (xa, ya), (xb, yb) in zip(points, points[1:]):
            phase = self.line(xa, ya, xb, yb, color, width, dash, phase)

    def marker(self, x, y, shape, color, r=4):
        """A filled marker with a one-pixel white halo, so it stands out over lines."""
        x, y = int(round(x)), int(round(y))
        for radius, c in ((r + 1, WHITE), (r, color)):
            for dy in range(-radius, radius + 1):
                if shape == "square":
                    half = radius - 1
                    if abs(dy) > half:
                        continue
                elif shape == "diamond":
                    half = radius - abs(dy)
                elif shape == "triangle":  # apex up
                    half = (dy + radius) // 2
                else:  # circle
                    half = int(math.sqrt(radius * radius - dy * dy) + 0.5)
                self.rect(x - half, y + dy, x + half, y + dy, c)

    def text(self, x, y, s, color, scale=1, align="left", valign="top"):
        w, h = text_width(s, scale), 7 * scale
        x, y = int(round(x)), int(round(y))  # whole pixels, or the glyph cells come out uneven
        x -= {"left": 0, "center": w // 2, "right": w}[align]
        y -= {"top": 0, "middle": h // 2, "bottom": h}[valign]
        self._glyphs(s, scale, color, lambda u, v: (x + u, y + v))

    def text_up(self, x, y, s, color, scale=1):
        """Text read from bottom to top (a y-axis title), centred on (x, y)."""
        x0, y0 = int(round(x)) - 7 * scale // 2, int(round(y)) + text_width(s, scale) // 2
        self._glyphs(s, scale, color, lambda u, v: (x0 + v, y0 - u - scale + 1))

    def _glyphs(self, s, scale, color, place):
        for i, ch in enumerate(s):
            for row, bits in enumerate(FONT.get(ch, FONT["?"])):
                for col in range(5):
                    if bits & (0x10 >> col):
                        px, py = place(i * 6 * scale + col * scale, row * scale)
                        self.rect(px, py, px + scale - 1, py + scale - 1, color)


def png_bytes(canvas):
    stride = canvas.w * 3
    raw = bytearray()
    for y in range(canvas.h):
        raw.append(0)  # filter type 0 (none) for every row
        raw += canvas.px[y * stride:(y + 1) * stride]

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", canvas.w, canvas.h, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def write_png(path, canvas):
    with open(path, "wb") as f:
        f.write(png_bytes(canvas))


# ---------------------------------------------------------------------------------------------
# Axes, ticks, legends.

def nice_ticks(lo, hi, target=5):
    """Ticks at multiples of a 1, 2 or 5 x 10^k step covering [lo, hi] in about target steps."""
    lo, hi = min(lo, hi), max(lo, hi)
    if hi == lo:
        lo, hi = (0.0, 1.0) if lo == 0 else (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1)
    step = nice_step(hi - lo, target)
    digits = max(0, -math.floor(math.log10(step))) + 1
    k0, k1 = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, digits) + 0.0 for k in range(k0, k1 + 1)]


def nice_step(span, target=5):
    raw = span / target
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if raw <= m * mag * (1 + 1e-9))


def tick_label(value, ticks):
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    return f"{value:.{max(0, -math.floor(math.log10(step) + 1e-9))}f}"


def context_label(c):
    return f"{c // 1024}K" if c >= 1024 and c % 1024 == 0 else str(c)


class Frame:
    """A plot area on a canvas: data (x, y) -> pixels."""

    def __init__(self, canvas, left, top, right, bottom, xlim, ylim):
        self.cv, self.l, self.t, self.r, self.b = canvas, left, top, right, bottom
        self.xlim, self.ylim = xlim, ylim

    def x(self, v):
        x0, x1 = self.xlim
        return self.l + (v - x0) / (x1 - x0) * (self.r - self.l)

    def y(self, v):
        y0, y1 = self.ylim
        return self.b - (v - y0) / (y1 - y0) * (self.b - self.t)

    def grid_and_axes(self, xticks, yticks, xtitle, ytitle, scale=2, xlabels=True):
        """xticks: [(value, label)]; yticks: values. Light grid lines, labels, titles."""
        cv = self.cv
        for v in yticks:
            cv.line(self.l, self.y(v), self.r, self.y(v), GRID_GRAY)
        for v, _ in xticks:
            cv.line(self.x(v), self.t, self.x(v), self.b, GRID_GRAY)
        cv.line(self.l, self.t, self.l, self.b, BLACK)
        cv.line(self.l, self.b, self.r, self.b, BLACK)
        cv.line(self.r, self.t, self.r, self.b, AXIS_GRAY)
        cv.line(self.l, self.t, self.r, self.t, AXIS_GRAY)
        widest = 0
        for v in yticks:
            cv.line(self.l - 5, self.y(v), self.l, self.y(v), BLACK)
            label = tick_label(v, yticks)
            widest = max(widest, text_width(label, scale))
            cv.text(self.l - 9, self.y(v), label, BLACK, scale, "right", "middle")
        if ytitle:
            cv.text_up(self.l - 9 - widest - 8 - 7 * scale // 2, (self.t + self.b) // 2, ytitle,
                       BLACK, scale)
        last_end = -1e9
        for v, label in xticks:
            cv.line(self.x(v), self.b, self.x(v), self.b + 5, BLACK)
            w = text_width(label, scale)
            if xlabels and self.x(v) - w / 2 > last_end + 6:  # skip labels that would collide
                cv.text(self.x(v), self.b + 9, label, BLACK, scale, "center")
                last_end = self.x(v) + w / 2
        if xtitle:
            cv.text((self.l + self.r) // 2, self.b + 9 + 7 * scale + 12, xtitle, BLACK, scale,
                    "center")


def legend_width(entries, scale=2):
    return 34 + 8 + max(text_width(e["label"], scale) for e in entries) + 16


def draw_legend(cv, x, y, entries, scale=2):
    """entries: dicts with label, color and optionally width, dash, marker, bar. A boxed
    column of swatches and labels with its top-left corner at (x, y)."""
    row_h = 7 * scale + 12
    w, h = legend_width(entries, scale), len(entries) * row_h + 8
    cv.rect(x, y, x + w, y + h, WHITE)
    for x0, y0, x1, y1 in ((x, y, x + w, y), (x, y + h, x + w, y + h), (x, y, x, y + h),
                           (x + w, y, x + w, y + h)):
        cv.line(x0, y0, x1, y1, AXIS_GRAY)
    for i, e in enumerate(entries):
        cy = y + 4 + i * row_h + row_h // 2
        if e.get("bar"):
            cv.rect(x + 12, cy - 6, x + 36, cy + 6, e["color"])
        else:
            cv.line(x + 8, cy, x + 40, cy, e["color"], e.get("width", 2), e.get("dash"))
            if e.get("marker"):
                cv.marker(x + 24, cy, e["marker"], e["color"], e.get("r", 4))
        cv.text(x + 50, cy, e["label"], BLACK, scale, "left", "middle")
    return h


def tint(color, amount):
    """color mixed with white: amount 0 = color, 1 = white."""
    return tuple(int(round(c + (255 - c) * amount)) for c in color)


def policy_colors(policies):
    """HERO keeps its blue; the others take the palette in order."""
    others = iter(PALETTE * (1 + len(policies) // len(PALETTE)))
    return {p: HERO_COLOR if p == HERO else next(others) for p in policies}


def order_policies(policies):
    seen = list(dict.fromkeys(policies))
    return ([HERO] if HERO in seen else []) + [p for p in seen if p != HERO]


# ---------------------------------------------------------------------------------------------
# Input.

def open_text(path, **kwargs):
    """The file as text; gzipped where its name ends in .gz (docs/runs keeps the per-step CSVs
    and the traces so)."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", **kwargs)
    return open(path, **kwargs)


def read_csv(path, columns):
    """[(line number, row dict)], after checking the header holds every column. path may be
    gzipped (.gz)."""
    try:
        with open_text(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise InputError(f"{path}: empty file (no header row)")
            reader.fieldnames = [(n or "").strip() for n in reader.fieldnames]
            missing = [c for c in columns if c not in reader.fieldnames]
            if missing:
                raise InputError(f"{path}: missing column(s) {', '.join(missing)} "
                                 f"(the header has: {','.join(reader.fieldnames)})")
            rows = [(reader.line_num, r) for r in reader
                    if any((v or "").strip() for v in r.values() if isinstance(v, str))]
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def field(path, line, row, name, kind=float, finite=True):
    """A number from a CSV row; a bad one raises InputError naming the file, line and column
    (NaN and infinities too, unless finite=False)."""
    text = (row.get(name) or "").strip()
    try:
        value = kind(text) if kind is not int else int(float(text))
    except ValueError:
        raise InputError(f"{path}:{line}: column {name}: not a number: {text!r}") from None
    if kind is float and finite and not math.isfinite(value):
        raise InputError(f"{path}:{line}: column {name}: not finite: {text!r}")
    return value


def print_lines(lines):
    """Prints `lines`; a reader that stops early (| head) is no error of ours."""
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def round_of(path, line, row):
    """(round, turn) of a steps CSV's row: a run of a point under one policy on its context
    placed once (wscope bench --turns runs several turns of a point per round; turn 0 where the
    CSV has no turn column, an older bench's)."""
    turn = field(path, line, row, "turn", int) if (row.get("turn") or "").strip() else 0
    return field(path, line, row, "round", int), turn


class RunRounds:
    """The run of a steps or bench CSV that several benches wrote into. bench-grid.sh without
    --one-runtime (and ab-grids.sh) runs a `wscope bench` per policy and repeat, each numbering
    its rounds, turns and steps from 0 again in the same files: a row whose key (steps CSV:
    round, turn, step; bench CSV: round, turn) came already in the current run of its
    policy-point starts that policy-point's next run. So the n-th run of a point under each
    policy is its n-th repeat, in the file's order, as modes_report.py takes a point's n-th
    window and ab_report.py a variant's n-th grid. With --one-runtime the rounds are numbered
    apart, and every row is in run 0."""

    def __init__(self):
        self._runs = {}  # (policy, batch, context) -> [run, the keys seen in it]

    def run(self, owner, key):
        """The run of `key` under `owner`: the current one, or the next where `key` came
        already in it."""
        state = self._runs.setdefault(owner, [0, set()])
        if key in state[1]:
            state[0], state[1] = state[0] + 1, set()
        state[1].add(key)
        return state[0]

    def step(self, path, line, row):
        """(run, round, turn) of a steps CSV's row (round_of; a repeated step index starts a
        run)."""
        rnd, turn = round_of(path, line, row)
        owner = ((row.get("policy") or "").strip(), field(path, line, row, "batch", int),
                 field(path, line, row, "context", int))
        return self.run(owner, (rnd, turn, field(path, line, row, "step", int))), rnd, turn


def round_label(key):
    """A (run, round, turn) for a reader: "round 1", "run 2 round 0", "round 0 turn 1"."""
    run, rnd, turn = key
    return (f"run {run} " if run else "") + f"round {rnd}" + (f" turn {turn}" if turn else "")


def load_grid(path):
    """Rows of a bench CSV, repeated (policy, batch, context) points merged as bench_report.py
    merges them: a list of dicts with policy, batch, context, tokens_per_s (the harmonic mean:
    the throughput of all the repeats' work, equal in each), step_ms (the mean) and runs, in
    the file's policy order. A row whose tokens/s is not above 0 is refused."""
    sums = {}
    for line, row in read_csv(path, GRID_COLUMNS):
        policy = (row.get("policy") or "").strip()
        if not policy:
            raise InputError(f"{path}:{line}: empty policy")
        key = (policy, field(path, line, row, "batch", int), field(path, line, row, "context", int))
        tokens_per_s = field(path, line, row, "tokens_per_s")
        if tokens_per_s <= 0:
            raise InputError(f"{path}:{line}: column tokens_per_s: not above 0: {tokens_per_s!r}")
        s = sums.setdefault(key, [0.0, 0.0, 0])
        s[0] += 1 / tokens_per_s
        s[1] += field(path, line, row, "step_ms")
        s[2] += 1
    return [{"policy": p, "batch": b, "context": c, "tokens_per_s": n / t, "step_ms": m / n,
             "runs": n} for (p, b, c), (t, m, n) in sums.items()]


def load_timeline(path):
    out = []
    for line, row in read_csv(path, TIMELINE_COLUMNS):
        r = {"policy": (row.get("policy") or "").strip()}
        for name in ("round", "step", "unix_s", "step_ms", "target_cpu_share", "placed_cpu_share"):
            r[name] = field(path, line, row, name)
        for name in ("batch", "context"):  # optional, for the title
            if (row.get(name) or "").strip():
                r[name] = field(path, line, row, name, int)
        if (row.get("read_cpu_share") or "").strip():  # optional: newer benches
            r["read_cpu_share"] = field(path, line, row, "read_cpu_share")
        out.append(r)
    return out


def load_events(path):
    return [{"policy": (row.get("policy") or "").strip(),
             "unix_s": field(path, line, row, "unix_s"),
             "event": (row.get("event") or "").strip()}
            for line, row in read_csv(path, EVENT_COLUMNS)]


# ---------------------------------------------------------------------------------------------
# Charts.

W, H = 1000, 560
SCALE = 2  # text size of labels


def _chart(title, legend, height=H):
    """A canvas with the title drawn, the legend on the right; returns (canvas, plot right)."""
    cv = Canvas(W, height)
    scale = SCALE if text_width(title, SCALE) <= W - 20 else 1  # a long --label
    cv.text(W // 2, 14, title, BLACK, scale, "center")
    lw = legend_width(legend, SCALE)
    draw_legend(cv, W - lw - 12, 60, legend, SCALE)
    return cv, W - lw - 34


def render_grid(records, prefix, out_dir):
    """Two PNGs per batch size; returns their paths."""
    paths = []
    colors = policy_colors(order_policies(r["policy"] for r in records))
    for batch in sorted({r["batch"] for r in records}):
        points = defaultdict(dict)  # policy -> {context: record}
        for r in records:
            if r["batch"] == batch:
                points[r["policy"]][r["context"]] = r
        policies = order_policies(points)
        path = os.path.join(out_dir, f"{prefix}-batch{batch}-throughput.png")
        write_png(path, throughput_chart(points, policies, colors, f"{prefix}: decode throughput, "
                                                                   f"batch {batch}"))
        paths.append(path)
        if HERO not in points or len(policies) < 2:
            print(f"bench_plot.py: {prefix} batch {batch}: no {HERO} or no baseline rows, "
                  "no speedup chart", file=sys.stderr)
            continue
        path = os.path.join(out_dir, f"{prefix}-batch{batch}-speedup.png")
        write_png(path, speedup_chart(points, policies, colors,
                                      f"{prefix}: {HERO} speedup (tokens/s ratio), batch {batch}"))
        paths.append(path)
    return paths


def throughput_chart(points, policies, colors, title):
    contexts = sorted({c for p in policies for c in points[p]})
    log2 = all(c > 0 for c in contexts)  # else categorical
    pos = {c: (math.log2(c) if log2 else i) for i, c in enumerate(contexts)}
    style = {p: {"width": 3 if p == HERO else 2, "r": 5 if p == HERO else 4,
                 "marker": MARKERS[i % len(MARKERS)]} for i, p in enumerate(policies)}
    legend = []
    for p in policies:
        runs = max(r["runs"] for r in points[p].values())
        legend.append(dict(style[p], label=p + (f" (mean of {runs})" if runs > 1 else ""),
                           color=colors[p]))
    cv, right = _chart(title, legend)
    lo, hi = pos[contexts[0]], pos[contexts[-1]]
    pad = 0.35 * (hi - lo) / max(1, len(contexts) - 1) if hi > lo else 1
    yticks = nice_ticks(0, max(r["tokens_per_s"] for p in policies for r in points[p].values()))
    fr = Frame(cv, 120, 60, right, H - 80, (lo - pad, hi + pad), (yticks[0], yticks[-1]))
    fr.grid_and_axes([(pos[c], context_label(c)) for c in contexts], yticks,
                     "context (tokens)", "tokens/s", SCALE)
    for p in [q for q in policies if q != HERO] + ([HERO] if HERO in policies else []):
        xy = [(fr.x(pos[c]), fr.y(points[p][c]["tokens_per_s"])) for c in sorted(points[p])]
        cv.polyline(xy, colors[p], style[p]["width"])
        for x, y in xy:
            cv.marker(x, y, style[p]["marker"], colors[p], style[p]["r"])
    return cv


def speedup_chart(points, policies, colors, title):
    baselines = [p for p in policies if p != HERO]
    contexts = sorted(points[HERO])
    ratios = {}  # (context, baseline) -> ratio
    for c in contexts:
        for b in baselines:
            other = points[b].get(c)
            if other is not None and other["tokens_per_s"] > 0:
                ratios[(c, b)] = points[HERO][c]["tokens_per_s"] / other["tokens_per_s"]
    legend = [{"label": f"vs {b}", "color": colors[b], "bar": True} for b in baselines]
    legend.append({"label": "parity (1.0)", "color": BLACK, "width": 1, "dash": (6, 4)})
    cv, right = _chart(title, legend)
    yticks = nice_ticks(0, max(list(ratios.values()) + [1.0]) * 1.08)
    fr = Frame(cv, 120, 60, right, H - 80, (-0.5, len(contexts) - 0.5), (yticks[0], yticks[-1]))
    fr.grid_and_axes([(i, context_label(c)) for i, c in enumerate(contexts)], yticks,
                     "context (tokens)", "speedup (x)", SCALE)
    # The context grid lines would cut through the bars: redraw the plot background there.
    cv.rect(fr.l + 1, fr.t + 1, fr.r - 1, fr.b - 1, WHITE)
    for v in yticks[1:-1]:
        cv.line(fr.l + 1, fr.y(v), fr.r - 1, fr.y(v), GRID_GRAY)
    slot = fr.x(1) - fr.x(0)
    bar_w = 0.8 * slot / len(baselines)
    for i, c in enumerate(contexts):
        for j, b in enumerate(baselines):
            if (c, b) not in ratios:
                continue
            x0 = fr.x(i) - 0.4 * slot + j * bar_w
            top = fr.y(ratios[(c, b)])
            cv.rect(x0 + 1, top, x0 + bar_w - 2, fr.b - 1, colors[b])
            label = f"{ratios[(c, b)]:.2f}"
            for scale in (2, 1):
                if text_width(label, scale) <= bar_w + 2:
                    cv.text(x0 + bar_w / 2, top - 4, label, TEXT_GRAY, scale, "center", "bottom")
                    break
    cv.line(fr.l + 1, fr.y(1.0), fr.r - 1, fr.y(1.0), BLACK, 1, (6, 4))
    return cv


def moving_average(values, n=5):
    """Centred over n values (fewer at the ends)."""
    out = []
    for i in range(len(values)):
        window = values[max(0, i - n // 2):i + n // 2 + 1]
        out.append(sum(window) / len(window))
    return out


def render_timeline(rows, events, prefix, out_dir):
    path = os.path.join(out_dir, f"{prefix}-timeline.png")
    write_png(path, timeline_chart(rows, events, f"{prefix}: decode steps over time"))
    return [path]


def timeline_chart(rows, events, title):
    policies = order_policies(r["policy"] for r in rows)
    colors = policy_colors(policies)
    t0 = {p: min(r["unix_s"] for r in rows if r["policy"] == p) for p in policies}
    # One line per policy through all its rounds, in time order: `wscope bench --rounds` makes
    # a round of a few steps per request, so the moving average runs across rounds too.
    series = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["unix_s"], r["round"], r["step"])):
        series[r["policy"]].append(r)
    marks = []  # (t, label, color)
    for e in events or []:
        if e["policy"] not in t0:
            print(f"bench_plot.py: event {e['event']!r}: no steps of policy {e['policy']!r}, "
                  "not drawn", file=sys.stderr)
            continue
        label = e["event"] if len(policies) == 1 else f"{e['policy']}: {e['event']}"
        marks.append((e["unix_s"] - t0[e["policy"]], label, colors[e["policy"]]))
    marks.sort()

    sizes = sorted({(r.get("batch"), r.get("context")) for r in rows})
    if len(sizes) == 1 and None not in sizes[0]:
        title += f", batch {sizes[0][0]}, context {context_label(sizes[0][1])}"
    legend = [{"label": p, "color": colors[p], "width": 3} for p in policies] + [
        {"label": "step, raw", "color": TEXT_GRAY, "width": 1},
        {"label": "step, 5-step mean", "color": TEXT_GRAY, "width": 3},
        {"label": "target CPU share", "color": TEXT_GRAY, "width": 2},
        {"label": "placed CPU share", "color": TEXT_GRAY, "width": 2, "dash": (6, 4)}]
    has_read = any("read_cpu_share" in r for r in rows)
    if has_read:
        legend.append({"label": "CPU-attended share, 5-step mean", "color": TEXT_GRAY,
                       "width": 1, "dash": (2, 3)})

    ts = [r["unix_s"] - t0[r["policy"]] for r in rows] + [t for t, _, _ in marks]
    xticks = nice_ticks(min(0.0, min(ts)), max(ts), 8)
    right = W - legend_width(legend, SCALE) - 34
    # Event labels: a strip above the top panel, a new row whenever a label would overlap.
    left, label_rows, placed = 120, [], []
    xscale = (right - left) / (xticks[-1] - xticks[0])
    for t, label, color in marks:
        x = left + (t - xticks[0]) * xscale
        w = text_width(label, 1)
        x_text = min(x + 3, right - w)
        row = next((i for i, end in enumerate(label_rows) if x_text > end + 6), len(label_rows))
        if row == len(label_rows):
            label_rows.append(0)
        label_rows[row] = x_text + w
        placed.append((x, x_text, row, label, color))
    strip = len(label_rows) * 12 + (8 if label_rows else 0)
    top_t = 60 + strip
    height = top_t + 250 + 24 + 170 + 80
    cv, _ = _chart(title, legend, height)
    top = Frame(cv, left, top_t, right, top_t + 250, (xticks[0], xticks[-1]), None)
    bottom = Frame(cv, left, top.b + 24, right, top.b + 24 + 170, top.xlim, None)

    step_ticks = nice_ticks(0, max(r["step_ms"] for r in rows))
    top.ylim = (step_ticks[0], step_ticks[-1])
    share_ticks = nice_ticks(0, max([1.0] + [max(r["target_cpu_share"], r["placed_cpu_share"])
                                             for r in rows]))
    bottom.ylim = (share_ticks[0], share_ticks[-1])
    xt = [(v, tick_label(v, xticks)) for v in xticks]
    top.grid_and_axes(xt, step_ticks, None, "step (ms)", SCALE, xlabels=False)
    bottom.grid_and_axes(xt, share_ticks, "seconds since the policy's first step", "CPU share",
                         SCALE)
    for x, x_text, row, label, color in placed:
        y_text = 60 + 2 + row * 12
        cv.line(x, y_text + 8, x, bottom.b, color, 1, (4, 3))
        cv.text(x_text, y_text, label, color, 1)
    for p in reversed(policies):  # HERO last, on top
        seq = series[p]
        t = [top.x(r["unix_s"] - t0[p]) for r in seq]
        step = [r["step_ms"] for r in seq]
        cv.polyline([(x, top.y(v)) for x, v in zip(t, step)], tint(colors[p], 0.55), 1)
        cv.polyline([(x, top.y(v)) for x, v in zip(t, moving_average(step))], colors[p], 3)
        cv.polyline([(x, bottom.y(r["target_cpu_share"])) for x, r in zip(t, seq)], colors[p], 2)
        cv.polyline([(x, bottom.y(r["placed_cpu_share"])) for x, r in zip(t, seq)], colors[p], 2,
                    (6, 4))
        if has_read:
            read = moving_average([r.get("read_cpu_share", r["placed_cpu_share"]) for r in seq])
            cv.polyline([(x, bottom.y(v)) for x, v in zip(t, read)], colors[p], 1, (2, 3))
    return cv


# ---------------------------------------------------------------------------------------------

def stem(path):
    name = os.path.basename(path)
    return name[:-4] if name.lower().endswith(".csv") else name


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", action="append", default=[], metavar="CSV",
                        help="a `wscope bench --csv` file (repeatable)")
    parser.add_argument("--timeline", metavar="CSV", help="per-step contention timeline")
    parser.add_argument("--events", metavar="CSV", help="policy,unix_s,event (with --timeline)")
    parser.add_argument("--label", help="file name prefix (default: the CSV's name)")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    if not args.grid and not args.timeline:
        parser.error("give --grid and/or --timeline")
    if args.events and not args.timeline:
        parser.error("--events needs --timeline")
    try:
        # Read everything first, so bad input writes nothing.
        grids = []
        for path in args.grid:
            prefix = args.label or stem(path)
            if args.label and len(args.grid) > 1:
                prefix = f"{args.label}-{stem(path)}"
            grids.append((load_grid(path), prefix))
        if len({p for _, p in grids}) < len(grids):
            raise InputError("two --grid files have the same name: give them different names")
        timeline = None
        if args.timeline:
            timeline = (load_timeline(args.timeline),
                        load_events(args.events) if args.events else [],
                        args.label or stem(args.timeline))
        os.makedirs(args.out_dir, exist_ok=True)
        for records, prefix in grids:
            for path in render_grid(records, prefix, args.out_dir):
                print(path)
        if timeline:
            for path in render_timeline(*timeline, args.out_dir):
                print(path)
    except InputError as e:
        print(f"bench_plot.py: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"bench_plot.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

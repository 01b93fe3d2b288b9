"""Refunds per day laid out as stacked bars for an inline SVG: coordinates and ticks only
(the template draws them), so the page needs no script and nothing from another host."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from ledger_app.admin.dashboard import Day, Segment

WIDTH, HEIGHT = 560, 200  # the SVG's viewBox; it scales to the box it is drawn in
LEFT, RIGHT, TOP, BOTTOM = 44, 552, 10, 176  # the plot area inside it
MOST_TICKS = 4  # horizontal grid lines above zero
BAR_SHARE = 0.7  # of each day's slot; the rest is the gap between bars
LABEL_EVERY = 7  # days between x-axis labels, counted back from today


@dataclass(frozen=True)
class Bar:
    """One segment of a day's stack: one reason's refunds that day."""

    x: float
    y: float
    width: float
    height: float
    segment: Segment


@dataclass(frozen=True)
class Tick:
    y: float
    value: int


@dataclass(frozen=True)
class DayLabel:
    x: float  # the middle of the day's bar
    day: date


@dataclass(frozen=True)
class StackedBars:
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    bars: list[Bar]
    ticks: list[Tick]
    day_labels: list[DayLabel]


def tick_step(peak: int, most: int = MOST_TICKS) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that covers `peak` in at most `most` steps."""
    magnitude = 1
    while True:
        for multiple in (1, 2, 5):
            step = multiple * magnitude
            if math.ceil(peak / step) <= most:
                return step
        magnitude *= 10


def stacked_bars(days: list[Day]) -> StackedBars:
    """Bars for `days` (oldest first), each stacked bottom-up in its segments' order, on a
    scale from zero to a round number at or above the busiest day."""
    peak = max((d.total for d in days), default=0)
    step = tick_step(max(peak, 1))
    scale_top = step * math.ceil(max(peak, 1) / step)
    plot_height = BOTTOM - TOP
    slot = (RIGHT - LEFT) / max(len(days), 1)
    bar_width = round(slot * BAR_SHARE, 1)
    bars, labels = [], []
    for index, day in enumerate(days):
        x = LEFT + index * slot
        base = float(BOTTOM)
        for segment in day.segments:
            if not segment.count:
                continue
            # At least a pixel, so a day's single refund next to a busy day still shows.
            height = max(segment.count / scale_top * plot_height, 1.0)
            base -= height
            bars.append(
                Bar(
                    x=round(x + (slot - bar_width) / 2, 1),
                    y=round(base, 1),
                    width=bar_width,
                    height=round(height, 1),
                    segment=segment,
                )
            )
        if (len(days) - 1 - index) % LABEL_EVERY == 0:
            labels.append(DayLabel(x=round(x + slot / 2, 1), day=day.day))
    ticks = [
        Tick(y=round(BOTTOM - value / scale_top * plot_height, 1), value=value)
        for value in range(0, scale_top + 1, step)
    ]
    return StackedBars(WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM, bars, ticks, labels)

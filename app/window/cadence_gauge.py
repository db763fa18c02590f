"""The cadence at a glance: does the model keep up with the conversation, and by how much.

A second of conversation is kept up with when the engine produced it in less than a second
(its SPEAK time); how many times as fast as needed (the headroom) is 1 / SPEAK time."""
from __future__ import annotations

from PyQt6.QtWidgets import QLabel, QVBoxLayout, QWidget

from .cadence_chart import OVER, UNDER, colour
from .cadence_stats import CadenceStats
from .plain_words import tip

RECENT_S = 5  # the verdict follows the last seconds: a slow start should not colour it forever


def verdict(stats: CadenceStats) -> tuple[str, str, bool | None]:
    """(headline, the line under it, keeping up: True, False, or None before a second is done)."""
    if not stats.seconds:
        return ("Waiting for the first second…", "Shows whether the model keeps up once a second "
                "of speech is done.", None)
    recent = stats.seconds[-RECENT_S:]
    per_second = sum(recent) / len(recent)
    over = stats.seconds_over()
    behind = f"{over} of {len(stats.seconds)} seconds fell behind."
    if per_second <= 1.0:
        headroom = 1.0 / max(per_second, 1e-3)
        return (f"Keeping up: {_times(headroom)} as fast as needed",
                f"Each second of speech takes the model {per_second:.2f} s to produce. "
                + (behind if over else "None fell behind."), True)
    return ("Falling behind", f"Each second of speech takes the model {per_second:.2f} s to produce: "
            f"the reply lags. {behind}", False)


def _times(factor: float) -> str:
    return f"{factor:.0f}×" if factor >= 10 else f"{factor:.1f}×"


class CadenceGauge(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.headline = QLabel()
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        font.setBold(True)
        self.headline.setFont(font)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.headline)
        layout.addWidget(self.detail)
        self.setToolTip(tip("The engine time spent producing one second of the model's speech: under 1 s the "
                            "model keeps up; as fast as needed is 1 s divided by that time.", "SPEAK time", "headroom"))
        self.show_stats(CadenceStats())

    def show_stats(self, stats: CadenceStats) -> None:
        headline, detail, keeping_up = verdict(stats)
        self.headline.setText(headline)
        self.detail.setText(detail)
        shade = "palette(text)" if keeping_up is None else colour(self, UNDER if keeping_up else OVER).name()
        self.headline.setStyleSheet(f"color: {shade};")

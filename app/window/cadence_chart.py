"""The cadence chart: SPEAK time per second of conversation against the one-second
cadence (top), and engine time per frame against the 80 ms frame (bottom strip), over one
time axis (the conversation's seconds). A model that steps once a second has the top part
alone: each of its seconds is one step. The legend is beside it, as words (legend())."""
from __future__ import annotations

from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QColor, QPainter, QPalette, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

from .cadence_stats import FRAME_S, CadenceStats
from .theme import role_colour

UNDER, OVER, FRAME_UNDER = "good", "error", "info"
"""Meanings, coloured by app.window.theme to be readable on the palette in use (light or dark)."""
SPAN_S = 30          # the chart fills from the left over this long, then compresses
MIN_FRAME_PX = 1.0   # ... until a frame is this wide, then scrolls
MARGIN_LEFT, MARGIN = 44, 8
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600)
MIN_TICK_PX = 56
MIN_HEIGHT = 100  # where the window is short it gives way first (the panel scrolls below this)
TITLES = ("Time to produce each second of speech", "Time to produce each 80 ms step")
LIMITS = ("1 s", "80 ms")
"""The two parts' titles, painted above them, and their dashed limits' labels."""
LEGEND = ((UNDER, "a second in time"), (FRAME_UNDER, "an 80 ms step in time"),
          (OVER, "too slow: the reply lags"))


def legend(stats: CadenceStats) -> tuple[tuple[str, str], ...]:
    """The legend's entries for the chart of `stats`."""
    return LEGEND if _frames_shown(stats) else tuple(entry for entry in LEGEND if entry[0] != FRAME_UNDER)


def _frames_shown(stats: CadenceStats) -> bool:
    """The 80 ms part is drawn for a model whose step is the 80 ms period."""
    return stats.step_s <= FRAME_S


class CadenceChart(QWidget):
    def __init__(self, stats: CadenceStats, parent=None):
        super().__init__(parent)
        self.stats = stats
        self.setMinimumSize(320, MIN_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAccessibleName("Cadence chart")
        self.setToolTip("Top: the engine time each second of the model's speech took (SPEAK time); under the "
                        "dashed 1 s line the model keeps up. Bottom: the engine time of each 80 ms step (frame).")

    def painted_words(self) -> tuple[str, ...]:
        """The words painted on the chart (for a test reading what the window says)."""
        return TITLES + LIMITS if _frames_shown(self.stats) else (TITLES[0], LIMITS[0])

    def paintEvent(self, event):
        painter = QPainter(self)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        title_h = painter.fontMetrics().height() + 2
        area = QRectF(self.rect()).adjusted(MARGIN_LEFT, MARGIN, -MARGIN, -MARGIN - title_h)
        text = palette.color(QPalette.ColorRole.Text)
        if not _frames_shown(self.stats):
            top = QRectF(area.left(), area.top() + title_h, area.width(), area.height() - title_h)
            self._title(painter, top, TITLES[0], text)
            first_second = self._draw_seconds(painter, top, text)
            self._time_axis(painter, top, float(first_second), text)
            painter.end()
            return
        seconds_h = (area.height() - 2 * title_h) * 0.62
        top = QRectF(area.left(), area.top() + title_h, area.width(), seconds_h)
        bottom = QRectF(area.left(), top.bottom() + title_h + 6, area.width(),
                        area.bottom() - top.bottom() - title_h - 6)
        self._title(painter, top, TITLES[0], text)
        self._title(painter, bottom, TITLES[1], text)
        self._draw_seconds(painter, top, text)
        first_frame = self._draw_frames(painter, bottom, text)
        self._time_axis(painter, bottom, first_frame * FRAME_S, text)
        painter.end()

    def _title(self, painter: QPainter, rect: QRectF, title: str, color: QColor):
        painter.setPen(color)
        painter.drawText(QPointF(rect.left(), rect.top() - 4), title)

    def _pixels_per_second(self, width: float) -> float:
        """One time axis for both parts, so a second's bar sits above its frames."""
        elapsed = self.stats.frames * FRAME_S
        return max(width / max(SPAN_S, elapsed), MIN_FRAME_PX / FRAME_S)

    def _draw_seconds(self, painter: QPainter, rect: QRectF, text: QColor) -> int:
        """The seconds that fit, the latest last; returns the index of the first one shown."""
        slot = self._pixels_per_second(rect.width())
        shown = self.stats.seconds[-int(rect.width() // slot):]
        scale = max([1.25] + [1.1 * s for s in shown])
        self._axes(painter, rect, scale, 1.0, LIMITS[0], text)
        for i, value in enumerate(shown):
            h = rect.height() * value / scale
            painter.fillRect(QRectF(rect.left() + (i + 0.15) * slot, rect.bottom() - h,
                                    0.7 * slot, h), colour(self, OVER if value > 1.0 else UNDER))
        return len(self.stats.seconds) - len(shown)

    def _draw_frames(self, painter: QPainter, rect: QRectF, text: QColor) -> int:
        """The frames that fit, the latest last; returns the index of the first one shown."""
        slot = self._pixels_per_second(rect.width()) * FRAME_S
        shown = self.stats.frame_times[-int(rect.width() // slot):]
        scale = max(0.1, 1.1 * float(shown.max())) if len(shown) else 0.1
        self._axes(painter, rect, scale, FRAME_S, LIMITS[1], text)
        for i, value in enumerate(shown):
            h = rect.height() * value / scale
            painter.fillRect(QRectF(rect.left() + i * slot, rect.bottom() - h, slot, h),
                             colour(self, OVER if value > FRAME_S else FRAME_UNDER))
        return self.stats.frames - len(shown)

    def _time_axis(self, painter: QPainter, rect: QRectF, start_s: float, text: QColor):
        """Conversation time under both parts: ticks at a round step that leaves the labels room."""
        per_second = self._pixels_per_second(rect.width())
        step = next((s for s in TICK_STEPS_S if s * per_second >= MIN_TICK_PX), TICK_STEPS_S[-1])
        metrics = painter.fontMetrics()
        painter.setPen(text)
        tick = int(start_s // step + (start_s % step > 0)) * step
        while (x := rect.left() + (tick - start_s) * per_second) <= rect.right():
            label = f"{tick // 60}:{tick % 60:02d}" if tick >= 60 else f"{tick} s"
            painter.drawLine(QPointF(x, rect.bottom()), QPointF(x, rect.bottom() + 3))
            left = min(max(x - metrics.horizontalAdvance(label) / 2, rect.left() - MARGIN_LEFT),
                       rect.right() - metrics.horizontalAdvance(label))
            painter.drawText(QPointF(left, rect.bottom() + 3 + metrics.ascent()), label)
            tick += step

    def _axes(self, painter: QPainter, rect: QRectF, scale: float, limit: float, label: str,
              text: QColor):
        grid = QColor(text)
        grid.setAlpha(60)
        painter.setPen(QPen(grid, 1))
        painter.drawLine(rect.bottomLeft(), rect.bottomRight())
        painter.drawLine(rect.bottomLeft(), rect.topLeft())
        y = rect.bottom() - rect.height() * limit / scale
        painter.setPen(QPen(text, 1, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        painter.setPen(text)
        metrics = painter.fontMetrics()
        painter.drawText(QPointF(rect.left() - metrics.horizontalAdvance(label) - 4,
                                 y + metrics.ascent() / 2 - 1), label)
        if rect.bottom() - y >= metrics.height():  # room for "0" under the limit's label
            painter.drawText(QPointF(rect.left() - metrics.horizontalAdvance("0") - 4, rect.bottom()), "0")


def colour(widget: QWidget, role: str) -> QColor:
    """A meaning's colour (UNDER, OVER, FRAME_UNDER) on `widget`'s palette."""
    return role_colour(widget.palette(), role)

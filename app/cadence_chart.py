"""The cadence chart: SPEAK time per second of conversation against the one-second
cadence (top), and engine time per frame against the 80 ms frame (bottom strip)."""
from __future__ import annotations

from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QColor, QPainter, QPalette, QPen
from PyQt6.QtWidgets import QSizePolicy, QWidget

from .cadence_stats import FRAME_S, CadenceStats

UNDER = QColor("#3aa757")
OVER = QColor("#d93f3f")
FRAME_UNDER = QColor("#4a8fd9")
SPAN_S = 30          # the chart fills from the left over this long, then compresses
MIN_FRAME_PX = 1.0   # ... until a frame is this wide, then scrolls
MARGIN_LEFT, MARGIN = 44, 8


class CadenceChart(QWidget):
    def __init__(self, stats: CadenceStats, parent=None):
        super().__init__(parent)
        self.stats = stats
        self.setMinimumSize(320, 220)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAccessibleName("Cadence chart")

    def paintEvent(self, event):
        painter = QPainter(self)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        area = QRectF(self.rect()).adjusted(MARGIN_LEFT, MARGIN, -MARGIN, -MARGIN)
        title_h = painter.fontMetrics().height() + 2
        seconds_h = (area.height() - 2 * title_h) * 0.62
        top = QRectF(area.left(), area.top() + title_h, area.width(), seconds_h)
        bottom = QRectF(area.left(), top.bottom() + title_h + 6, area.width(),
                        area.bottom() - top.bottom() - title_h - 6)
        text = palette.color(QPalette.ColorRole.Text)
        self._title(painter, top, "SPEAK time per second of conversation", text)
        self._title(painter, bottom, "Engine time per 80 ms frame", text)
        self._draw_seconds(painter, top, text)
        self._draw_frames(painter, bottom, text)
        painter.end()

    def _title(self, painter: QPainter, rect: QRectF, title: str, color: QColor):
        painter.setPen(color)
        painter.drawText(QPointF(rect.left(), rect.top() - 4), title)

    def _pixels_per_second(self, width: float) -> float:
        """One time axis for both parts, so a second's bar sits above its frames."""
        elapsed = self.stats.frames * FRAME_S
        return max(width / max(SPAN_S, elapsed), MIN_FRAME_PX / FRAME_S)

    def _draw_seconds(self, painter: QPainter, rect: QRectF, text: QColor):
        slot = self._pixels_per_second(rect.width())
        shown = self.stats.seconds[-int(rect.width() // slot):]
        scale = max([1.25] + [1.1 * s for s in shown])
        self._axes(painter, rect, scale, 1.0, "1 s", text)
        for i, value in enumerate(shown):
            h = rect.height() * value / scale
            painter.fillRect(QRectF(rect.left() + (i + 0.15) * slot, rect.bottom() - h,
                                    0.7 * slot, h), OVER if value > 1.0 else UNDER)

    def _draw_frames(self, painter: QPainter, rect: QRectF, text: QColor):
        slot = self._pixels_per_second(rect.width()) * FRAME_S
        shown = self.stats.frame_times[-int(rect.width() // slot):]
        scale = max(0.1, 1.1 * float(shown.max())) if len(shown) else 0.1
        self._axes(painter, rect, scale, FRAME_S, "80 ms", text)
        for i, value in enumerate(shown):
            h = rect.height() * value / scale
            painter.fillRect(QRectF(rect.left() + i * slot, rect.bottom() - h, slot, h),
                             OVER if value > FRAME_S else FRAME_UNDER)

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


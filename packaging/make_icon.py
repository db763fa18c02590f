"""Draws the app icon (assets/icon.png, 256 px): two voices' waveforms, one above the other
speaking at once, on a rounded tile. Run once; the PNG is committed, and the installers
convert it to .ico / .icns themselves.

    QT_QPA_PLATFORM=offscreen python packaging/make_icon.py
"""
import math
import sys
from pathlib import Path

from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QColor, QGuiApplication, QImage, QLinearGradient, QPainter, QPainterPath, QPen

SIZE = 256
OUT = Path(__file__).resolve().parent.parent / "assets" / "icon.png"


def wave(painter: QPainter, centre: float, colour: str, phase: float, amp: float) -> None:
    path = QPainterPath()
    for i in range(161):
        x = 40 + i
        envelope = math.sin(math.pi * i / 160) ** 1.5
        y = centre + amp * envelope * math.sin(i / 7.5 + phase) * (0.6 + 0.4 * math.sin(i / 23 + phase))
        path.moveTo(x, y) if i == 0 else path.lineTo(x, y)
    painter.setPen(QPen(QColor(colour), 9, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap,
                        Qt.PenJoinStyle.RoundJoin))
    painter.drawPath(path)


def main() -> None:
    _app = QGuiApplication(sys.argv[:1])
    image = QImage(SIZE, SIZE, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    tile = QLinearGradient(QPointF(0, 0), QPointF(0, SIZE))
    tile.setColorAt(0, QColor("#1d2b4f"))
    tile.setColorAt(1, QColor("#0e1528"))
    painter.setBrush(tile)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawRoundedRect(QRectF(8, 8, SIZE - 16, SIZE - 16), 52, 52)
    wave(painter, 98, "#4fd1c5", 0.0, 34)
    wave(painter, 160, "#f6ad55", 1.9, 30)
    painter.end()
    if not image.save(str(OUT)):
        raise SystemExit(f"could not write {OUT}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

"""The app's colours: the platform's, or Fusion with a light or dark palette (Settings ▸
Theme); and the colours it needs beyond a palette's roles (message bars, the error red, the
cadence chart's bars), derived from the palette in use so that none stays a light-theme colour
on a dark window."""
from __future__ import annotations

from typing import NamedTuple

from PyQt6.QtCore import Qt
from PyQt6.QtGui import QColor, QPalette
from PyQt6.QtWidgets import QApplication

THEMES = {"system": "Follow the system", "light": "Light", "dark": "Dark"}
"""Theme -> what the Settings dialog calls it."""

# (window, base, text, highlight): a palette's other roles are derived from these four.
_ANCHORS = {
    "light": ("#efefef", "#ffffff", "#1c1c1c", "#2f6fc7"),
    "dark": ("#2d2f33", "#1f2023", "#e6e6e6", "#3d82d9"),
}
ROLE_HUES = {"error": 0, "warning": 35, "info": 212, "good": 140}
"""Colours by meaning -> their hue (degrees): red, amber, blue, green."""
READABLE = 4.5  # WCAG's contrast for normal text
_PLATFORM_STYLE = "duplexcadence_platform_style"  # an application property: the style before any theme


class BarColours(NamedTuple):
    background: QColor
    border: QColor
    text: QColor


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio of two colours, 1 (same) to 21 (black on white)."""
    def luminance(c: QColor) -> float:
        linear = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4
                  for x in (c.redF(), c.greenF(), c.blueF())]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _mix(a: QColor, b: QColor, share_b: float) -> QColor:
    return QColor.fromRgbF(*(x + (y - x) * share_b for x, y in zip(a.getRgbF()[:3], b.getRgbF()[:3])))


def _readable(hue: int, on: QColor, saturation: float = 0.7) -> QColor:
    """The colour of this hue nearest mid-lightness that reads as text on `on`: darker on a
    light background, lighter on a dark one."""
    step = -0.02 if on.lightnessF() > 0.5 else 0.02
    lightness = 0.5
    colour = QColor.fromHslF(hue / 360, saturation, lightness)
    while contrast(colour, on) < READABLE and 0 < lightness + step < 1:
        lightness += step
        colour = QColor.fromHslF(hue / 360, saturation, lightness)
    return colour


def role_colour(palette: QPalette, role: str) -> QColor:
    """The colour for a meaning ("error", "warning", "info", "good": ROLE_HUES) readable on the
    palette's base (text fields, the cadence chart's background)."""
    return _readable(ROLE_HUES[role], palette.color(QPalette.ColorRole.Base))


def bar_colours(palette: QPalette, kind: str) -> BarColours:
    """A message bar of this kind ("info", "warning", "error"): the palette's base tinted with
    the kind's colour (a light tint on a light base, a deep one on a dark base), under the
    palette's window text, which its label draws with."""
    base = palette.color(QPalette.ColorRole.Base)
    tint = QColor.fromHslF(ROLE_HUES[kind] / 360, 0.8, 0.55)
    return BarColours(_mix(base, tint, 0.15 if base.lightnessF() > 0.5 else 0.22), _mix(base, tint, 0.55),
                      palette.color(QPalette.ColorRole.WindowText))


def palette(theme: str) -> QPalette:
    """The Fusion palette of "light" or "dark"."""
    window, base, text, highlight = map(QColor, _ANCHORS[theme])
    dark = theme == "dark"
    button = _mix(window, text, 0.06) if dark else window
    p = QPalette()
    R = QPalette.ColorRole
    roles = {R.Window: window, R.WindowText: text, R.Base: base, R.AlternateBase: _mix(base, window, 0.6),
             R.Text: text, R.Button: button, R.ButtonText: text, R.BrightText: QColor(Qt.GlobalColor.white),
             R.ToolTipBase: base, R.ToolTipText: text, R.PlaceholderText: _mix(text, base, 0.5),
             R.Highlight: highlight, R.HighlightedText: QColor(Qt.GlobalColor.white),
             R.Link: _readable(highlight.hue(), base), R.LinkVisited: _readable(280, base),
             R.Light: button.lighter(150), R.Midlight: button.lighter(125), R.Mid: button.darker(130),
             R.Dark: button.darker(200), R.Shadow: QColor(Qt.GlobalColor.black)}
    if hasattr(R, "Accent"):  # Qt 6.6
        roles[R.Accent] = highlight
    for role, colour in roles.items():
        p.setColor(role, colour)
    faded = _mix(text, window, 0.55)
    for role, colour in {R.WindowText: faded, R.Text: faded, R.ButtonText: faded, R.Base: window,
                         R.Highlight: _mix(highlight, window, 0.5)}.items():
        p.setColor(QPalette.ColorGroup.Disabled, role, colour)
    return p


def apply_theme(app: QApplication, theme: str) -> None:
    """"system": the platform's style and palette (as before any theme was applied); "light" or
    "dark": Fusion with that palette. Widgets that paint with their palette follow at once."""
    if theme not in THEMES:
        raise ValueError(f"unknown theme {theme!r}; choose one of {', '.join(THEMES)}")
    if app.property(_PLATFORM_STYLE) is None:
        app.setProperty(_PLATFORM_STYLE, app.style().name())
    hints = app.styleHints()
    if theme == "system":
        if hasattr(hints, "unsetColorScheme"):  # Qt 6.8
            hints.unsetColorScheme()
        app.setStyle(app.property(_PLATFORM_STYLE))
        app.setPalette(QPalette())  # nothing set: every role from the platform again
        return
    if hasattr(hints, "setColorScheme"):  # window frames and native dialogs follow (Qt 6.8)
        hints.setColorScheme(Qt.ColorScheme.Dark if theme == "dark" else Qt.ColorScheme.Light)
    app.setStyle("Fusion")
    app.setPalette(palette(theme))

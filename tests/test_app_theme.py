"""The theme: Fusion with a light or dark palette, or the platform's own again; the colours the
app uses beyond the palette (message bars, the error red, the chart's bars) follow it."""
import pytest
from PyQt6.QtGui import QColor, QPalette
from PyQt6.QtWidgets import QApplication, QVBoxLayout, QWidget

import tests.app_helpers  # noqa: F401  (chooses the offscreen platform before Qt starts)
from app.window.message_bar import KINDS, MessageBar
from app.window.theme import READABLE, ROLE_HUES, THEMES, apply_theme, bar_colours, contrast, palette, role_colour

WINDOW = QPalette.ColorRole.Window


@pytest.fixture(autouse=True)
def platform_theme_after(qapp):
    """The application is shared by every test in the process: each test here leaves it as it was."""
    yield
    apply_theme(qapp, "system")


def test_dark_and_light_set_the_applications_palette_and_system_restores_it(qapp):
    before = QApplication.palette(), qapp.style().name()
    apply_theme(qapp, "dark")
    assert QApplication.palette().color(WINDOW).lightnessF() < 0.5
    assert QApplication.palette().color(QPalette.ColorRole.Text).lightnessF() > 0.5
    assert qapp.style().name().lower() == "fusion"
    apply_theme(qapp, "light")
    assert QApplication.palette().color(WINDOW).lightnessF() > 0.5
    apply_theme(qapp, "system")
    assert (QApplication.palette(), qapp.style().name()) == before
    apply_theme(qapp, "dark")
    apply_theme(qapp, "system")
    assert (QApplication.palette(), qapp.style().name()) == before


def test_an_unknown_theme_is_refused_by_name(qapp):
    with pytest.raises(ValueError, match="unknown theme 'purple'; choose one of system, light, dark"):
        apply_theme(qapp, "purple")


@pytest.mark.parametrize("theme", [t for t in THEMES if t != "system"])
def test_role_colours_read_on_the_palettes_base(theme):
    p = palette(theme)
    base = p.color(QPalette.ColorRole.Base)
    for role in ROLE_HUES:
        assert contrast(role_colour(p, role), base) >= READABLE, role
    for kind in KINDS:
        colours = bar_colours(p, kind)
        assert contrast(colours.text, colours.background) >= READABLE, kind


def test_the_error_red_is_lighter_on_a_dark_theme():
    light, dark = (role_colour(palette(t), "error") for t in ("light", "dark"))
    assert dark.lightnessF() > light.lightnessF()
    assert abs(dark.hslHueF() - light.hslHueF()) < 0.01  # still the same red


def _pixel(bar: MessageBar) -> QColor:
    """The bar's background as painted, inside its border and left of its text."""
    return bar.grab().toImage().pixelColor(3, bar.height() // 2)


def _close(a: QColor, b: QColor) -> bool:
    return all(abs(x - y) <= 2 for x, y in zip(a.getRgb()[:3], b.getRgb()[:3]))


def test_message_bars_follow_the_theme(qtbot, qapp):
    root = QWidget()
    layout = QVBoxLayout(root)
    bars = {}
    for kind in KINDS:
        bars[kind] = MessageBar()
        bars[kind].show_message(f"A message of kind {kind}.", kind)
        layout.addWidget(bars[kind])
    qtbot.addWidget(root)
    root.show()
    for theme, dark in (("light", False), ("dark", True), ("light", False)):
        apply_theme(qapp, theme)
        qapp.processEvents()  # Qt tells existing widgets of the new palette through posted events
        for kind, bar in bars.items():
            colours = bar.colours()
            assert (colours.background.lightnessF() < 0.5) == dark, (theme, kind)
            assert _close(_pixel(bar), colours.background), (theme, kind, _pixel(bar).name())
            assert contrast(bar.label.palette().color(QPalette.ColorRole.WindowText), colours.background) >= READABLE
    assert len({bar.colours().background.name() for bar in bars.values()}) == len(KINDS)


def test_a_message_bar_refuses_an_unknown_kind(qtbot):
    bar = MessageBar()
    qtbot.addWidget(bar)
    with pytest.raises(ValueError, match="unknown message kind 'fatal'"):
        bar.show_message("x", "fatal")

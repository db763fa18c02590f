"""The window's size on the screen it opens on: the first start's default, the controls whose
contents must not widen it, and text cut to fit shown cut ("…"), never clipped mid-letter."""
from __future__ import annotations

from PyQt6.QtCore import QEvent, QObject, Qt
from PyQt6.QtGui import QPalette
from PyQt6.QtWidgets import QComboBox, QLabel, QSizePolicy, QStyle, QStyleOptionComboBox, QStylePainter, QWidget

DEFAULT_SIZE = (1240, 680)
"""The first start's window, shrunk to the screen's available area less FRAME_ALLOWANCE."""
FRAME_ALLOWANCE = (16, 40)
"""What a window manager's frame may add around the window: borders, and a title bar."""
COMBO_CHARACTERS = 18


def default_size(window: QWidget) -> tuple[int, int]:
    """DEFAULT_SIZE where the screen has room for it and its frame, else the available area
    less the frame; never below what the layout needs."""
    available = window.screen().availableGeometry()
    minimum = window.minimumSizeHint()
    return (max(minimum.width(), min(DEFAULT_SIZE[0], available.width() - FRAME_ALLOWANCE[0])),
            max(minimum.height(), min(DEFAULT_SIZE[1], available.height() - FRAME_ALLOWANCE[1])))


def keep_combos_narrow(*boxes: QWidget) -> None:
    """A long device or model name must not widen the window past the screen (Qt sizes a
    combo box to its longest entry): the list still shows it whole. A combo box that already
    chose its width keeps it."""
    adjust = QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
    for box in boxes:
        for combo in box.findChildren(QComboBox):
            if combo.sizeAdjustPolicy() != adjust:
                combo.setSizeAdjustPolicy(adjust)
                combo.setMinimumContentsLength(COMBO_CHARACTERS)


def elide_combos(root: QWidget) -> None:
    """Every combo box under `root` that shows a choice (not an editable one) ends a text it
    has no room for in "…": Qt's styles clip it mid-letter, and a cut device name reads as a
    different device."""
    for combo in root.findChildren(QComboBox):
        if not combo.isEditable() and combo.property("elides") is None:
            combo.installEventFilter(_COMBO_ELIDER)
            combo.setProperty("elides", True)


def combo_text_width(combo: QComboBox, option: QStyleOptionComboBox) -> int:
    """The room the style gives a combo box's current text (QCommonStyle's CE_ComboBoxLabel)."""
    field = combo.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                         QStyle.SubControl.SC_ComboBoxEditField, combo)
    icon = option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0
    return field.width() - 2 - icon


class _ComboElider(QObject):
    """Paints a combo box as QComboBox.paintEvent does, with its current text elided."""

    def eventFilter(self, combo: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Paint or not isinstance(combo, QComboBox) or combo.isEditable():
            return False
        option = QStyleOptionComboBox()
        try:
            combo.initStyleOption(option)
        except RuntimeError:  # PyQt's wrapper of a combo box going away (no longer Python's): Qt paints it
            return False
        painter = QStylePainter(combo)
        painter.setPen(combo.palette().color(QPalette.ColorRole.Text))
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        if combo.currentIndex() < 0 and combo.placeholderText():
            option.palette.setBrush(QPalette.ColorRole.ButtonText, option.palette.placeholderText())
            option.currentText = combo.placeholderText()
        option.currentText = combo.fontMetrics().elidedText(option.currentText, Qt.TextElideMode.ElideRight,
                                                            combo_text_width(combo, option))
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)
        painter.end()
        return True


_COMBO_ELIDER = _ComboElider()


class ElidedLabel(QLabel):
    """One line of plain text that never widens its layout: cut to the room it is given, ending
    in "…". text() is the whole text, as set; shown_text() what is on screen."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802  (Qt's name)
        self._full = text
        self._elide()

    def text(self) -> str:
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.contentsRect().width())
        super().setText(shown)

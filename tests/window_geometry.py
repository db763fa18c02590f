"""What a person would find cut or hidden in a window, found from the widgets themselves: a
widget outside its parent (or the window), one smaller than its layout needs, a scroll area
whose content is larger than its view with no scroll bar to reach the rest, text that does
not fit and is not elided ("…"). Used by tests/test_app_geometry.py."""
from __future__ import annotations

from PyQt6.QtCore import QPoint, QRect, Qt
from PyQt6.QtGui import QFontMetrics
from PyQt6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QGroupBox,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QStyle,
    QStyleOptionComboBox,
    QWidget,
)

ELLIPSIS = "…"


def describe(widget: QWidget) -> str:
    text = ""
    for getter in ("text", "title", "currentText", "accessibleName"):
        value = getattr(widget, getter, None)
        if callable(value) and value():
            text = value()
            break
    return f"{type(widget).__name__} {text[:60]!r}" if text else f"{type(widget).__name__} {widget.objectName()!r}"


def problems(window: QWidget) -> list[str]:
    """Every visible widget of `window` checked; one line per problem found."""
    found: list[str] = []
    for widget in window.findChildren(QWidget):
        if widget.isWindow() or not widget.isVisibleTo(window):
            continue
        found += [f"{describe(widget)}: {problem}" for problem in _problems(window, widget)]
    return found


def _problems(window: QWidget, widget: QWidget) -> list[str]:
    out = []
    parent = widget.parentWidget()
    scroll = _scroll_area_of_content(widget)
    if scroll is not None:  # a scroll area's content may be larger than its view, if it scrolls
        view = scroll.viewport().size()
        if widget.height() > view.height() and not scroll.verticalScrollBar().isVisible():
            out.append(f"taller ({widget.height()}) than its scroll area's view ({view.height()}), no scroll bar")
        if widget.width() > view.width() and not scroll.horizontalScrollBar().isVisible():
            out.append(f"wider ({widget.width()}) than its scroll area's view ({view.width()}), no scroll bar")
    elif parent is not None and not parent.rect().contains(widget.geometry()):
        out.append(f"lies outside its parent {describe(parent)}: {_rect(widget.geometry())} in {_rect(parent.rect())}")
    if not _in_scroll_content(widget):
        on_window = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
        if not window.rect().contains(on_window):
            out.append(f"lies outside the window: {_rect(on_window)} in {_rect(window.rect())}")
    out += _size_problems(widget)
    out += _text_problems(widget)
    return out


def _size_problems(widget: QWidget) -> list[str]:
    if isinstance(widget, QLabel) and widget.wordWrap():
        return []  # its height follows its width: _text_problems
    if isinstance(widget.parentWidget(), QAbstractSpinBox):
        return []  # its spin box's own part, sized by the spin box (checked itself)
    policy = widget.sizePolicy()
    # Below its hint by the layout's choice, not the window's lack of room: a maximum set by
    # hand (a thin level meter) also holds.
    need = widget.minimumSizeHint().boundedTo(widget.maximumSize())
    out = []
    if policy.horizontalPolicy() != QSizePolicy.Policy.Ignored and widget.width() < need.width():
        out.append(f"narrower ({widget.width()}) than it needs ({need.width()})")
    if policy.verticalPolicy() != QSizePolicy.Policy.Ignored and widget.height() < need.height():
        out.append(f"lower ({widget.height()}) than it needs ({need.height()})")
    return out


def _text_problems(widget: QWidget) -> list[str]:
    if isinstance(widget, QLabel) and widget.text():
        if widget.wordWrap():
            need = widget.heightForWidth(widget.width())
            return [f"its wrapped text needs {need} px of height, has {widget.height()}"
                    ] if need > widget.height() else []
        if widget.sizeHint().width() > widget.width() + 1:
            return [f"text cut without {ELLIPSIS}: needs {widget.sizeHint().width()} px, has {widget.width()}"]
    elif isinstance(widget, QAbstractButton) and widget.text() and widget.sizeHint().width() > widget.width():
        return [f"text cut: needs {widget.sizeHint().width()} px, has {widget.width()}"]
    elif isinstance(widget, QGroupBox) and widget.title():
        if widget.fontMetrics().horizontalAdvance(widget.title()) > widget.width():
            return ["its title is cut"]
    elif isinstance(widget, QComboBox) and not widget.isEditable() and widget.currentText():
        return combo_problems(widget)
    return []


def combo_option(combo: QComboBox) -> QStyleOptionComboBox:
    option = QStyleOptionComboBox()
    combo.initStyleOption(option)
    return option


def combo_label_width(combo: QComboBox) -> int:
    """The width Qt's style gives a combo box's current text (QCommonStyle's CE_ComboBoxLabel)."""
    option = combo_option(combo)
    field = combo.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                         QStyle.SubControl.SC_ComboBoxEditField, combo)
    icon = option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0
    return field.width() - 2 - icon


def combo_problems(combo: QComboBox) -> list[str]:
    """A current text that does not fit must be painted elided: the combo box as painted must
    look exactly as it does showing the elided text itself (which fits)."""
    text = combo.currentText()
    width = combo_label_width(combo)
    elided = QFontMetrics(combo.font()).elidedText(text, Qt.TextElideMode.ElideRight, width)
    if elided == text:
        return []
    index = combo.currentIndex()
    shown = combo.grab().toImage()
    combo.blockSignals(True)
    combo.setItemText(index, elided)
    expected = combo.grab().toImage()
    combo.setItemText(index, text)
    combo.blockSignals(False)
    return [] if shown == expected else [f"text cut without {ELLIPSIS} (should show {elided!r})"]


def _scroll_area_of_content(widget: QWidget) -> QScrollArea | None:
    viewport = widget.parentWidget()
    area = viewport.parentWidget() if viewport is not None else None
    if isinstance(area, QScrollArea) and area.viewport() is viewport and area.widget() is widget:
        return area
    return None


def _in_scroll_content(widget: QWidget) -> bool:
    """Inside a scroll area's content (where only the view's part is on screen)."""
    while widget is not None:
        if _scroll_area_of_content(widget) is not None:
            return True
        widget = widget.parentWidget()
    return False


def _rect(r: QRect) -> str:
    return f"{r.width()}×{r.height()}+{r.x()}+{r.y()}"

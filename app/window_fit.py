"""The window's size on the screen it opens on: the first start's default, and the controls
whose contents must not widen it."""
from __future__ import annotations

from PyQt6.QtWidgets import QComboBox, QWidget

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

"""The main window and its widgets: the layout, the message bar, the cadence panel (headline,
chart, statistics, the Engine details and the runtime switches), the Settings dialog with its
presets, the window's words (plain_words), its theme, size and shortcuts."""

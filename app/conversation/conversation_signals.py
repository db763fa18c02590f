"""The engine thread's signals to the window, queued across threads by Qt."""
from PyQt6.QtCore import QObject, pyqtSignal


class ConversationSignals(QObject):
    started = pyqtSignal()          # prompts done, audio running
    frame = pyqtSignal(object)      # FrameReport
    notice = pyqtSignal(str)        # something the user should know; the conversation goes on
    warning = pyqtSignal(str)       # the same, for the message bar: something went wrong
    failed = pyqtSignal(str)        # the conversation had to stop; says why
    finished = pyqtSignal(object)   # ConversationEnd, always last

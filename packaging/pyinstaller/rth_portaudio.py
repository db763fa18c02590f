# PyInstaller runtime hook (Linux). sounddevice finds PortAudio with
# ctypes.util.find_library("portaudio"), which only searches the system's library paths; the
# bundle carries its own libportaudio.so.2 so that a machine without libportaudio2 installed
# still has sound. Point that one lookup at the bundled copy and leave every other lookup alone.
import ctypes.util
import os
import sys

_bundled = os.path.join(sys._MEIPASS, "libportaudio.so.2")
if os.path.isfile(_bundled):
    _system_find_library = ctypes.util.find_library

    def _find_library(name):
        return _bundled if name == "portaudio" else _system_find_library(name)

    ctypes.util.find_library = _find_library

"""Run as `python -m tests.geometry_probe OUT.json [SHOTS_PREFIX]` on an offscreen screen of
the size under test (QT_QPA_PLATFORM=offscreen:configfile=...): the window at its default size,
with a long-named microphone on the private sound server, the demo model loaded, every
combination of its message bars shown, before and during a conversation, the Engine details
folded and open. Writes what tests.window_geometry finds in each case, and the conversation
pane's width in each. Qt fixes the screen per process, hence a process of its own."""
from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from PyQt6.QtWidgets import QApplication

LONG_MIC = "Jabra Evolve2 65 USB Headset Analog Mono Microphone"
# About two lines at the default width: the longest a bar usually carries.
LONG_TEXT = ("Could not download kyutai/moshiko-pytorch-bf16: the disk that holds the Hugging Face cache "
             "(/home/someone/.cache/huggingface) is full: 15.4 GiB needed, 2.1 GiB free. Free some space, "
             "then press Download again.")


def main(out: Path, shots: str | None) -> None:
    app = QApplication(sys.argv[:1])
    from app.audio.file_feed import FileFeed
    from app.window.message_bar import MessageBar
    from tests.app_helpers import isolated_settings, load_demo
    from tests.audio_fixture import VirtualAudio

    audio = VirtualAudio(Path(tempfile.mkdtemp(prefix="geometry-pulse-")))
    audio.start()
    try:
        audio.add_source("long_mic", LONG_MIC)
        audio.pactl("set-default-source", "long_mic")
        from app.audio import audio_devices
        from app.window.main_window import MainWindow
        audio_devices.rescan()
        window = MainWindow(isolated_settings(Path(tempfile.mkdtemp(prefix="geometry-"))), device="cpu")
        window.show()
        model = load_demo()
        window.model_picker.select("demo")
        window.models.set_model(model)
        window.model_picker.voice.setCurrentText("No voice prompt")  # short prompts: a fast start
        window.model_picker.role.setText("Hi.")
        bars = window.findChildren(MessageBar)
        # Each bar by the window's name for it (the settings bar, the hint bar, ...).
        names = {id(value): name for name, value in vars(window).items() if isinstance(value, MessageBar)}
        bar_name = {bar: names.get(id(bar), f"bar {i}") for i, bar in enumerate(bars)}
        cases: list[dict] = []

        def settle() -> None:
            for _ in range(5):
                app.processEvents()
                time.sleep(0.01)

        def check(stage: str) -> None:
            from tests.window_geometry import problems
            # The panel's words hold still while they are measured: a frame arriving between the
            # layout and the check would change a text the layout has not caught up with yet.
            window.conversation.signals.blockSignals(True)
            settle()
            for engine_open in (False, True):
                window.panel.engine_pane.set_expanded(engine_open)
                for count in range(len(bars) + 1):
                    for shown in itertools.combinations(bars, count):
                        for bar in bars:
                            if bar in shown:
                                bar.show_message(LONG_TEXT, bar.kind)
                            else:
                                bar.hide()
                        settle()
                        name = f"{stage}, engine details {'open' if engine_open else 'folded'}, bars: " + (
                            ", ".join(bar_name[bar] for bar in shown) or "none")
                        cases.append({"case": name, "problems": problems(window),
                                      "conversation_width": window.conversation_view.width(),
                                      "window": [window.width(), window.height()]})
                        if shots and count == len(bars):
                            window.grab().save(f"{shots}_{stage}_{'open' if engine_open else 'folded'}.png")
            window.panel.engine_pane.set_expanded(False)
            window.conversation.signals.blockSignals(False)

        settle()
        check("before")
        window.conversation.start(FileFeed(Path("assets/speech_sample.wav")))
        deadline = time.monotonic() + 60
        while window.panel.stats.frames < 30 and time.monotonic() < deadline:
            settle()
        check("during")
        running = window.conversation.running
        window.conversation.stop_and_wait()
        available = window.screen().availableGeometry()
        microphone = window.device_picker.microphone
        from tests.window_geometry import combo_label_width
        out.write_text(json.dumps({
            "bars": [bar_name[bar] for bar in bars], "cases": cases, "ran": running,
            "available": [available.width(), available.height()], "microphone": microphone.currentText(),
            "microphone_fits": microphone.fontMetrics().horizontalAdvance(microphone.currentText())
            <= combo_label_width(microphone)}))
    finally:
        audio.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)

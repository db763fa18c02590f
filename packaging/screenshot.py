"""Render the product screenshot (assets/screenshot.png) and the Audio box alone
(assets/audio_box.png): the main window of a first start, in
the middle of a conversation with the demo model through real audio devices: the bundled
speech played into a virtual microphone, the reply played to a virtual speaker (a private
PulseAudio server, the one the tests use: tests/audio_fixture.py), with a USB headset's
speaker and microphone plugged in beside its two virtual devices, and the virtual speaker
heard by the virtual microphone 60 ms later at about -13 dB, as loudspeakers are (the echo
canceller removes it).

Runs without a display (Qt's offscreen platform) and without touching the user's settings or
sound server; needs what `bash packaging/test.sh` installs:
    python packaging/screenshot.py [--output assets/screenshot.png] [--seconds 8]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runnable from a checkout, installed or not


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "assets" / "screenshot.png")
    parser.add_argument("--audio-box", type=Path, default=REPO / "assets" / "audio_box.png")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="conversation time to show before the shot")
    parser.add_argument("--size", default="1280x720", help="the window's size in logical pixels (at 150%% "
                        "scaling, QT_SCALE_FACTOR=1.5, 1280x720 fills a 1920x1080 screen)")
    parser.add_argument("--theme", choices=("light", "dark"), default="light", help="the window's colours")
    parser.add_argument("--model", default="demo",
                        help="the model talked with: demo, or a folder (e.g. tests/golden/minicpmo_tiny)")
    parser.add_argument("--diffuplex", action="store_true",
                        help="the demo's DiffuPlex predictor under SPEAK, the Engine details pane open")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PyQt6.QtCore import QSettings, QTimer
    from PyQt6.QtWidgets import QApplication

    from app.app_settings import AppSettings
    from app.window.main_window import MainWindow
    from app.window.theme import apply_theme
    from engine import RuntimeOptions
    from engine.files.paths import DEMO_MODEL_DIR
    from tests.audio_fixture import VirtualAudio

    app = QApplication(sys.argv[:1])
    apply_theme(app, args.theme)
    with tempfile.TemporaryDirectory() as scratch:
        audio = VirtualAudio(Path(scratch) / "pulse")
        audio.start()
        audio.add_sink("usb_headset", "USB headset")
        audio.add_source("usb_headset_mic", "USB headset microphone")
        audio.loop_speaker_into_microphone(60, "60%")  # loudspeakers: the echo canceller has work
        q = QSettings(str(Path(scratch) / "settings.ini"), QSettings.Format.IniFormat)
        q.setValue("recording/folder", str(Path(scratch) / "recordings"))
        settings = AppSettings(q)  # a first start: the headphones tip shows
        if args.diffuplex:
            settings.runtime_options = RuntimeOptions(policy="speak")
            settings.engine_pane_open = True
        window = MainWindow(settings, device="cpu")
        window.resize(*(int(n) for n in args.size.split("x")))
        window.show()
        frames_wanted = int(args.seconds / 0.08)
        failures: list[str] = []
        window.models.signals.failed.connect(lambda source, message: failures.append(message))
        window.conversation.signals.failed.connect(failures.append)

        def check() -> None:
            if failures or window.panel.stats.frames >= frames_wanted:
                if not failures:
                    args.output.parent.mkdir(parents=True, exist_ok=True)
                    window.grab().save(str(args.output))
                    window.device_picker.grab().save(str(args.audio_box))
                window.close()
                app.quit()

        timer = QTimer()
        timer.timeout.connect(check)
        timer.start(100)
        players = []  # the speech starts with the conversation (the demo loads first)
        window.conversation.signals.started.connect(
            lambda: players.append(audio.play_into_microphone(REPO / "assets" / "speech_sample.wav")))
        if args.model == "demo":
            window.model_picker.select("demo")
        else:
            window.model_picker.folder_chosen.emit(str(Path(args.model).resolve()))
        if args.diffuplex:  # the model, then its predictor, then the conversation
            window.models.ready.connect(
                lambda _: window.models.choose_predictor(str(DEMO_MODEL_DIR / "diffuplex.safetensors")))
            window.models.predictor_signals.predictor.connect(lambda *_: window.conversation.start())
            window.models.load()
        else:
            window.conversation.start()
        app.exec()
        for player in players:
            player.terminate()
        audio.stop()
    if failures:
        print(f"screenshot: {failures[0]}", file=sys.stderr)
        return 1
    print(f"wrote {args.output} and {args.audio_box}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

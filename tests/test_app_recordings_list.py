"""The Recordings window over real recordings (made by the app's recorder) and real broken
files: what it lists, in which order, what it says of a bad file, and that deleting and the
folder watcher work."""
import json
from datetime import datetime

import numpy as np
import pytest
from PyQt6.QtCore import QObject, Qt, QTimer, QUrl, pyqtSlot
from PyQt6.QtGui import QDesktopServices
from PyQt6.QtWidgets import QApplication, QMainWindow, QMessageBox

from app.conversation.recorder import ConversationRecorder
from app.conversation.recordings_list import COLUMNS, RecordingsDialog, RecordingsLauncher
from engine import FRAME_SIZE

SILENCE = np.zeros(FRAME_SIZE, dtype=np.float32)


@pytest.fixture(autouse=True)
def own_data_folder(tmp_path, monkeypatch):
    """The older recordings folder and the trash are under XDG_DATA_HOME: a test folder."""
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def record(folder, pieces, started=None, model="demo"):
    """A recording of len(pieces) frames (80 ms each) saying `pieces`; `started` rewritten."""
    recorder = ConversationRecorder(folder, model, {"policy": "AR"})
    for piece in pieces:
        recorder.add_frame(SILENCE, SILENCE, piece)
    recorder.close()
    if started:
        edit_json(recorder.json_path, started=started)
    return recorder.wav_path


def edit_json(path, **changes):
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))


def rows(dialog):
    tree = dialog.tree
    return [{c: tree.topLevelItem(i).text(n) for n, c in enumerate(COLUMNS)} for i in range(tree.topLevelItemCount())]


def dialog_on(qtbot, folder):
    dialog = RecordingsDialog(folder)
    qtbot.addWidget(dialog)
    return dialog


def select(dialog, row):
    dialog.tree.setCurrentItem(dialog.tree.topLevelItem(row))


def test_newest_first_with_time_length_model_transcript_and_size(qtbot, tmp_path):
    folder = tmp_path / "recordings"
    said = [" hello", " wor", "ld"] + [""] * 22  # 25 frames: 2 s
    january = record(folder, said, "2026-01-05T10:00:00")
    march = record(folder, [""] * 50, "2026-03-01T09:30:15", model="personaplex")
    february = record(folder, said, "2026-02-10T18:45:00")
    dialog = dialog_on(qtbot, folder)
    listed = rows(dialog)
    assert [r["Started"] for r in listed] == ["2026-03-01 09:30:15", "2026-02-10 18:45:00", "2026-01-05 10:00:00"]
    assert listed[0] == {"Started": "2026-03-01 09:30:15", "Length": "0:04", "Model": "personaplex",
                         "Transcript": "no words", "Size": listed[0]["Size"], "Note": ""}
    assert listed[1]["Length"] == "0:02" and listed[1]["Transcript"] == "2 words"
    size = february.stat().st_size + february.with_suffix(".json").stat().st_size
    assert listed[1]["Size"] == f"{size / 1000:.1f} kB"
    assert dialog.recordings[0].wav == march and dialog.recordings[2].wav == january


def test_the_preview_shows_the_words_with_time_marks(qtbot, tmp_path):
    folder = tmp_path / "recordings"
    # "hello world" at once, then 2 s of silence, then "again" at 2.4 s.
    record(folder, [" hello", " world"] + [""] * 28 + [" again"])
    dialog = dialog_on(qtbot, folder)
    assert dialog.preview.toPlainText() == ""
    select(dialog, 0)
    assert dialog.preview.toPlainText() == "[0:00] hello world\n[0:02] again"


def test_a_broken_transcript_a_missing_one_and_a_bad_wav_are_listed_not_fatal(qtbot, tmp_path):
    folder = tmp_path / "recordings"
    broken = record(folder, [""] * 25, "2026-01-03T00:00:00")
    broken.with_suffix(".json").write_text('{"model": "demo", "frames": ')
    alone = record(folder, [""] * 50, "2026-01-02T00:00:00")
    alone.with_suffix(".json").unlink()
    wrong = record(folder, [""] * 25, "2026-01-01T00:00:00")
    edit_json(wrong.with_suffix(".json"), words="hello")
    (folder / "conversation_2020-01-01_00-00-00.wav").write_bytes(b"not a wav file")
    dialog = dialog_on(qtbot, folder)
    by_name = {rec.wav.name: row for rec, row in zip(dialog.recordings, rows(dialog))}
    # The length from the WAV's header, the time from the file name.
    row = by_name[broken.name]
    assert (row["Length"], row["Model"], row["Transcript"]) == ("0:02", "?", "unreadable")
    assert row["Note"].startswith("transcript unreadable: Expecting value")
    stamp = datetime.strptime(broken.stem.removeprefix("conversation_"), "%Y-%m-%d_%H-%M-%S")
    assert row["Started"] == stamp.strftime("%Y-%m-%d %H:%M:%S")
    row = by_name[alone.name]
    assert (row["Length"], row["Transcript"], row["Note"]) == ("0:04", "none", "")
    assert by_name[wrong.name]["Note"] == 'transcript unreadable: words: not a list of {"word", "start", "end"}'
    row = by_name["conversation_2020-01-01_00-00-00.wav"]
    assert (row["Started"], row["Length"]) == ("2020-01-01 00:00:00", "?")
    assert row["Note"] == "audio unreadable: Format not recognised."
    select(dialog, [r.wav.name for r in dialog.recordings].index(broken.name))
    assert "unreadable" in dialog.preview.toPlainText()


def test_recordings_in_the_older_doubled_folder_are_listed_too(qtbot, tmp_path, own_data_folder):
    older = own_data_folder / "DuplexCadence" / "DuplexCadence" / "recordings"
    old = record(older, [""] * 25, "2025-12-24T20:00:00")
    # Earlier versions kept the model's pieces with their frame's time, and no words.
    earlier = json.loads(old.with_suffix(".json").read_text())
    del earlier["words"]
    earlier["transcript"] = [{"t": 0.0, "text": " merry"}, {"t": 0.08, "text": " christ"}, {"t": 0.16, "text": "mas"}]
    old.with_suffix(".json").write_text(json.dumps(earlier))
    record(tmp_path / "recordings", [""] * 25, "2026-01-01T00:00:00")
    dialog = dialog_on(qtbot, tmp_path / "recordings")
    assert [r.wav.parent for r in dialog.recordings] == [tmp_path / "recordings", older]
    assert str(older) in dialog.where.text()
    select(dialog, 1)
    assert dialog.preview.toPlainText() == "[0:00] merry christmas"


def answer_confirmation(button, seen):
    """Answers the confirmation once it is up (it is modal: exec() runs its own loop)."""
    def answer():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(10, answer)
            return
        seen.append(box.text())
        box.button(button).click()
    QTimer.singleShot(0, answer)


def test_delete_asks_naming_the_files_then_trashes_wav_and_transcript(qtbot, tmp_path, own_data_folder):
    folder = tmp_path / "recordings"
    keep = record(folder, [""] * 12, "2026-01-01T00:00:00")
    gone = record(folder, [""] * 12, "2026-01-02T00:00:00")
    dialog = dialog_on(qtbot, folder)
    select(dialog, 0)
    seen = []
    answer_confirmation(QMessageBox.StandardButton.Cancel, seen)
    dialog.delete_button.click()
    assert seen == [f"Delete {gone.name} and {gone.with_suffix('.json').name}?"]
    assert gone.exists() and gone.with_suffix(".json").exists()
    answer_confirmation(QMessageBox.StandardButton.Yes, seen)
    dialog.delete_button.click()
    assert not gone.exists() and not gone.with_suffix(".json").exists()
    assert keep.exists() and keep.with_suffix(".json").exists()
    assert [r.wav for r in dialog.recordings] == [keep]
    assert dialog.status.text() == f"Moved {gone.name} and {gone.with_suffix('.json').name} to the trash."
    trashed = own_data_folder / "Trash" / "files"
    assert sorted(p.name for p in trashed.iterdir()) == [gone.with_suffix(".json").name, gone.name]


def test_without_a_trash_delete_deletes_and_says_so(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "no such folder"))  # Qt finds no trash
    gone = record(tmp_path / "recordings", [""] * 12)
    dialog = dialog_on(qtbot, tmp_path / "recordings")
    select(dialog, 0)
    answer_confirmation(QMessageBox.StandardButton.Yes, [])
    dialog.delete_button.click()
    assert not gone.exists() and not gone.with_suffix(".json").exists() and dialog.recordings == []
    assert dialog.status.text() == f"Deleted {gone.name} and {gone.with_suffix('.json').name} (no trash here)."


def test_the_list_follows_the_folder_even_before_it_exists(qtbot, tmp_path):
    folder = tmp_path / "recordings"
    dialog = dialog_on(qtbot, folder)
    dialog.show()
    assert rows(dialog) == [] and "none yet" in dialog.where.text()
    first = record(folder, [""] * 12)
    qtbot.waitUntil(lambda: [r.wav for r in dialog.recordings] == [first])
    select(dialog, 0)
    second = record(folder, [""] * 12, "2030-01-01T00:00:00")
    qtbot.waitUntil(lambda: len(dialog.recordings) == 2)
    assert [r.wav for r in dialog.recordings] == [second, first]
    assert dialog.selected().wav == first  # a refresh keeps the selection


class UrlCatcher(QObject):
    def __init__(self):
        super().__init__()
        self.urls = []

    @pyqtSlot(QUrl)
    def open(self, url):
        self.urls.append(url)


def test_a_double_click_opens_the_wav_and_copy_path_copies_it(qtbot, tmp_path):
    wav = record(tmp_path / "recordings", [""] * 12)
    dialog = dialog_on(qtbot, tmp_path / "recordings")
    dialog.show()
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    try:
        item = dialog.tree.topLevelItem(0)
        centre = dialog.tree.visualItemRect(item).center()
        qtbot.mouseClick(dialog.tree.viewport(), Qt.MouseButton.LeftButton, pos=centre)
        qtbot.mouseDClick(dialog.tree.viewport(), Qt.MouseButton.LeftButton, pos=centre)
        dialog.reveal_button.click()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in catcher.urls] == [str(wav), str(wav.parent)]
    dialog.copy_button.click()
    assert QApplication.clipboard().text() == str(wav)


def test_the_recording_in_progress_is_shown_growing_and_cannot_be_deleted(qtbot, tmp_path):
    folder = tmp_path / "recordings"
    recorder = ConversationRecorder(folder, "demo", {})
    try:
        for _ in range(12):  # 12 frames: the first flush
            recorder.add_frame(SILENCE, SILENCE, "")
        dialog = dialog_on(qtbot, folder)
        dialog.set_live(recorder.wav_path)
        select(dialog, 0)
        assert rows(dialog)[0]["Note"] == "recording now"
        assert not dialog.delete_button.isEnabled()
        for _ in range(24):
            recorder.add_frame(SILENCE, SILENCE, "")
        qtbot.waitUntil(lambda: rows(dialog)[0]["Length"] == "0:02")
        dialog.set_live(None)
        assert dialog.delete_button.isEnabled() and rows(dialog)[0]["Note"] == ""
    finally:
        recorder.close()


def test_the_window_opens_one_non_modal_list_that_follows_folder_and_recording(qtbot, tmp_path):
    window = QMainWindow()
    qtbot.addWidget(window)
    quit_action = window.menuBar().addMenu("&Conversation").addAction("Quit")
    folder = {"now": tmp_path / "first"}
    first = record(folder["now"], [""] * 12)
    launcher = RecordingsLauncher(window, lambda: folder["now"])
    launcher.insert_before(quit_action)
    assert [a.text() for a in quit_action.associatedObjects()[-1].actions()] == ["Recordings…", "", "Quit"]
    launcher.action.trigger()
    dialog = launcher.dialog
    assert dialog.isVisible() and not dialog.isModal() and dialog.parent() is window
    assert [r.wav for r in dialog.recordings] == [first]
    launcher.button.click()
    assert launcher.dialog is dialog
    launcher.note_recording(first, "Recording to")
    assert dialog.live == first
    assert rows(dialog)[0]["Note"] == "recording now"
    launcher.note_recording(first, "Last recording")
    assert dialog.live is None and rows(dialog)[0]["Note"] == ""
    folder["now"] = tmp_path / "second"
    elsewhere = record(folder["now"], [""] * 12)
    launcher.note_recording(folder["now"], "Recordings")
    assert [r.wav for r in dialog.recordings] == [elsewhere]
    assert str(tmp_path / "second") in dialog.where.text()

"""The About box, and the offer to fetch GPU support driven through its dialog against a real
HTTP server on loopback. This machine has no NVIDIA GPU: the dialog is given the record of one
(a name and a driver's CUDA release), which is all it reads of the GPU."""
from __future__ import annotations

import pytest

from app.gpu.cuda_torch import CudaTorchInstaller, NvidiaGpu
from app.gpu.gpu_support_dialog import GpuSupportDialog
from app.project_info import project_info
from app.window.main_window import MainWindow
from tests.app_helpers import isolated_settings
from tests.wheel_server import WheelServer, make_wheel

GPU = NvidiaGpu("NVIDIA GeForce RTX 4070", (13, 0))


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    return [make_wheel(folder, "alpha", 2_000_000), make_wheel(folder, "beta")]


def test_about_box_shows_name_version_and_icon(qtbot, tmp_path):
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    info = project_info()
    assert window.windowTitle() == info.display_name and not window.windowIcon().isNull()
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    titles = [a.text() for a in help_menu.actions()]
    assert f"About {info.display_name}" in titles
    window.show_about()
    assert f"{info.display_name} {info.version}" in window.last_dialog.text()
    assert not window.last_dialog.iconPixmap().isNull()
    # A checkout carries no GPU-support manifest: nothing to offer.
    assert not window.gpu_action.isVisible()
    window.close()


def test_the_offer_states_the_size_downloads_and_asks_for_a_restart(qtbot, tmp_path, served):
    with WheelServer(served[0].parent) as server:
        manifest = server.manifest(served)
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)
        dialog = GpuSupportDialog(manifest, GPU, installer=installer)
        qtbot.addWidget(dialog)
        assert GPU.name in dialog.text.text() and "GB to download" in dialog.text.text()
        with qtbot.waitSignal(dialog.signals.finished, timeout=30_000) as finished:
            dialog.download_button.click()
        assert finished.args == [""]
    assert dialog.bar.value() == 1000 and "Restart" in dialog.status.text()
    assert dialog.restart_button.isVisibleTo(dialog) and not dialog.download_button.isVisibleTo(dialog)
    assert (installer.target / "installed.json").is_file()


def test_offline_is_said_plainly_and_the_download_resumes(qtbot, tmp_path, served):
    with WheelServer(served[0].parent) as server:
        manifest = server.manifest(served)
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key, timeout=5)
        dialog = GpuSupportDialog(manifest, GPU, installer=installer)
        qtbot.addWidget(dialog)
        server.drop_after = 700_000
        with qtbot.waitSignal(dialog.signals.finished, timeout=30_000) as finished:
            dialog.download_button.click()
        assert "No connection" in finished.args[0] and "kept" in finished.args[0]
        assert dialog.download_button.text() == "Resume download" and dialog.download_button.isEnabled()
        assert 0 < dialog.bar.value() < 1000
        with qtbot.waitSignal(dialog.signals.finished, timeout=30_000) as finished:
            dialog.download_button.click()
        assert finished.args == [""]
        assert server.ranges[-2:] == ["bytes=700000-", None]  # alpha resumed, then beta

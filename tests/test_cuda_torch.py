"""Fetching GPU support (app/cuda_torch.py): real wheels from a real HTTP server on loopback,
with range requests; resuming after a dropped connection; a corrupt download refused;
offline reported as such; the installed folder put first on the import path of an installed
(frozen) app only."""
from __future__ import annotations

import json
import os
import sys

import pytest

from app import cuda_torch
from app.cuda_torch import Cancelled, CudaTorchInstaller, OfflineError, load_manifest
from tests.wheel_server import WheelServer, make_wheel


@pytest.fixture
def wheels(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    return [make_wheel(folder, "alpha"), make_wheel(folder, "beta", 500_000)]


def test_installs_every_wheel_with_progress(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        target = tmp_path / "data" / manifest.key
        seen = []
        assert CudaTorchInstaller(manifest, target).run(lambda done, total: seen.append((done, total))) == target
    site = target / "site"
    assert (site / "alpha" / "__init__.py").read_text() == "NAME = 'alpha'\n"
    assert (site / "beta_extra.py").is_file()            # .data/purelib lands in site
    assert not list(site.rglob("*-tool"))                # scripts are not needed
    assert os.access(site / "alpha" / "bin" / "tool", os.X_OK)
    assert json.loads((target / "installed.json").read_text())["key"] == manifest.key
    assert seen[-1] == (manifest.download_bytes, manifest.download_bytes)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert not (target.parent / "downloads").exists()    # the wheels are removed once unpacked


def test_a_dropped_connection_resumes_where_it_stopped(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)
        server.drop_after = 100_000
        with pytest.raises(OfflineError, match="dropped"):
            installer.run()
        assert installer.downloaded_bytes() == 100_000
        installer.run()
        assert server.ranges == [None, "bytes=100000-", None]  # alpha resumed, beta from the start
    assert (tmp_path / "data" / manifest.key / "installed.json").is_file()


def test_a_corrupt_download_is_refused_and_discarded(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        wheels[1].write_bytes(wheels[1].read_bytes()[::-1])  # same size, other bytes
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)
        with pytest.raises(ValueError, match=f"{wheels[1].name}: its SHA-256"):
            installer.run()
    assert not (tmp_path / "data" / manifest.key).exists()
    assert not (tmp_path / "data" / "downloads" / (wheels[1].name + ".part")).exists()


def test_offline_names_the_host_and_keeps_nothing_half_installed(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
    # The server is gone: the port refuses connections.
    installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key, timeout=5)
    with pytest.raises(OfflineError, match="cannot reach 127.0.0.1"):
        installer.run()
    assert not cuda_torch.is_installed(manifest) and not installer.target.exists()


def test_cancel_stops_the_download(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)
        installer.cancel()
        with pytest.raises(Cancelled):
            installer.run()


def test_activation_only_in_an_installed_app(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        manifest_file = tmp_path / "cuda_torch.json"
        manifest_file.write_text(json.dumps({
            "torch": manifest.torch, "cuda": manifest.cuda, "python": manifest.python,
            "platform": manifest.platform, "installed_bytes": manifest.installed_bytes,
            "files": [vars(f) for f in manifest.files]}))
        monkeypatch.setattr(cuda_torch, "MANIFEST", manifest_file)
        assert load_manifest() == manifest
        CudaTorchInstaller(manifest).run()
    site = str(cuda_torch.install_dir(manifest) / "site")
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert not cuda_torch.activate_installed() and site not in sys.path  # a checkout: untouched
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert cuda_torch.activate_installed() and sys.path[0] == site


@pytest.mark.skipif(cuda_torch.find_nvidia_gpu() is not None, reason="a machine without an NVIDIA GPU "
                    "(tests/gpu/test_gpu_support_cuda.py covers one with)")
def test_why_this_device_on_a_machine_without_gpu():
    assert cuda_torch.why_this_device("cpu") == "CPU: no NVIDIA GPU found"

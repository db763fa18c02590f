"""Fetching GPU support (app/gpu/cuda_torch.py): real wheels from a real HTTP server on loopback,
with range requests; resuming after a dropped connection; a corrupt download refused; what is
not the manifest's file (an HTML page, a longer or shorter file, a wrong file already on disk)
refused before it is saved or unpacked; a refused range started again once; offline reported
as such; the installed folder put first on the import path of an installed (frozen) app only."""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from app.gpu import cuda_torch
from app.gpu.cuda_torch import CudaTorchInstaller, load_manifest
from app.gpu.wheel_fetch import Cancelled, OfflineError
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
        data = bytearray(wheels[1].read_bytes())
        data[len(data) // 2] ^= 0xFF  # a wheel still, of the same size, with one byte wrong
        wheels[1].write_bytes(data)
        installer = CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)
        with pytest.raises(ValueError, match=f"{wheels[1].name}: its SHA-256"):
            installer.run()
    assert not (tmp_path / "data" / manifest.key).exists()
    assert not (tmp_path / "data" / "downloads" / (wheels[1].name + ".part")).exists()



def _installer(tmp_path, manifest) -> CudaTorchInstaller:
    return CudaTorchInstaller(manifest, tmp_path / "data" / manifest.key)


@pytest.mark.parametrize("send_length,refusal", [
    (True, "the server's file is 3000[0-9]{3} bytes, the manifest says"),  # told by Content-Length
    (False, "the server sent more than the manifest's"),                    # seen while reading
])
def test_a_body_longer_than_the_manifest_says_is_not_kept(tmp_path, wheels, send_length, refusal):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        make_wheel(wheels[0].parent, "alpha", 3_000_000)  # another, larger file under alpha's name
        server.send_length = send_length
        seen = []
        installer = _installer(tmp_path, manifest)
        with pytest.raises(ValueError, match=refusal):
            installer.run(lambda done, total: seen.append(done))
    assert max(seen, default=0) <= manifest.files[0].size
    assert installer.downloaded_bytes() == 0 and not list(installer.downloads.iterdir())


def test_an_html_page_is_refused_before_it_is_saved(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = _installer(tmp_path, manifest)
        server.portal = b"<!DOCTYPE html><html><body>Sign in to use this network</body></html>"
        with pytest.raises(ValueError, match="an HTML page, not a wheel; nothing was saved"):
            installer.run()
        assert installer.downloaded_bytes() == 0
        server.portal = None
        installer.run()
        assert server.ranges == [None, None, None]  # nothing of the page was resumed from


def test_a_body_that_is_not_a_zip_is_refused_and_a_kept_page_is_not_resumed(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = _installer(tmp_path, manifest)
        good = wheels[0].read_bytes()
        wheels[0].write_bytes(b"<html>" + bytes(len(good) - 6))  # binary Content-Type, right size
        with pytest.raises(ValueError, match=r"not a wheel \(it starts with b'<html>"):
            installer.run()
        assert installer.downloaded_bytes() == 0
        wheels[0].write_bytes(good)
        part = installer.downloads / (wheels[0].name + ".part")
        part.write_bytes(b"<html>kept by an earlier version</html>")
        installer.run()
        assert server.ranges == [None, None, None]
    assert (installer.target / "site" / "alpha" / "__init__.py").is_file()


def test_a_file_found_in_downloads_is_checked_before_it_is_unpacked(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = _installer(tmp_path, manifest)
        installer.downloads.mkdir(parents=True)
        (installer.downloads / wheels[0].name).write_bytes(wheels[0].read_bytes()[::-1])  # right size only
        installer.run()
        assert server.paths == [f"/{wheels[0].name}", f"/{wheels[1].name}"]  # fetched again
    assert (installer.target / "site" / "alpha" / "__init__.py").read_text() == "NAME = 'alpha'\n"


def test_a_refused_range_starts_the_file_again_once(tmp_path, wheels):
    with WheelServer(wheels[0].parent) as server:
        manifest = server.manifest(wheels)
        installer = _installer(tmp_path, manifest)
        server.drop_after = 100_000
        with pytest.raises(OfflineError, match="dropped"):
            installer.run()
        server.refuse_ranges = True  # a proxy that will not resume: HTTP 416
        installer.run()
        assert server.ranges == [None, "bytes=100000-", None, None]
    assert (installer.target / "installed.json").is_file()


@pytest.mark.parametrize("send_length", [True, False])
def test_a_manifest_size_larger_than_the_file_fails_plainly_without_looping(tmp_path, wheels, send_length):
    with WheelServer(wheels[0].parent) as server:
        served = server.manifest(wheels)
        real = served.files[0].size
        manifest = dataclasses.replace(served, files=[dataclasses.replace(served.files[0], size=real + 1000),
                                                      served.files[1]])
        server.send_length = send_length
        installer = _installer(tmp_path, manifest)
        part = installer.downloads / (wheels[0].name + ".part")
        refusal = f"the server's file is {real} bytes, the manifest says {real + 1000}"
        if send_length:  # the headers tell at once
            with pytest.raises(ValueError, match=refusal):
                installer.run()
            assert installer.downloaded_bytes() == 0
            part.write_bytes(wheels[0].read_bytes())  # the whole file, as an earlier version kept it
        else:  # a body without a length that ends early looks like a dropped connection
            with pytest.raises(OfflineError, match=f"dropped after {real} of {real + 1000} bytes"):
                installer.run()
        with pytest.raises(ValueError, match=refusal):  # the resume is refused with 416
            installer.run()
        assert server.ranges == [None, f"bytes={real}-"] and not part.exists()


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

"""Asking the Hugging Face Hub about a model and downloading the files the loader needs, into
the client's normal cache (so the Hugging Face CLI and other tools share it). Every failure
becomes a HubError whose one line names the repository, what failed and what was kept."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ...config.checks import MAX_CONFIG_BYTES, read_json
from ...errors import CheckpointError, HubError
from .cache_layout import downloaded_for, record_downloaded_for, remove_incomplete, repo_folder
from .catalogue import needed_files
from .hub_failures import describe_failure
from .progress import DownloadCancelled, Progress, ProgressMeter, size_text

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RemoteModel:
    """A repository as the Hub describes it, narrowed to the files the loader needs."""
    repo: str
    revision: str
    """The commit `main` pointed at when asked: every file comes from this one."""
    files: dict[str, int]
    """File name -> size in bytes, in download order (the LM last)."""
    gated: bool
    config: dict | None
    """Its config.json, when it has one and it could be read (a gated one needs the token)."""
    entry: str = ""
    """The library entry it is downloaded for, when not itself (a bf16 entry's int8 twin)."""

    @property
    def size(self) -> int:
        return sum(self.files.values())


class HubClient:
    """`endpoint`, `cache_dir` and `token` default to what huggingface_hub takes from the
    environment (HF_ENDPOINT, HF_HOME / HF_HUB_CACHE, HF_TOKEN or the token it stored)."""

    def __init__(self, endpoint: str | None = None, cache_dir: str | Path | None = None, token: str | None = None):
        from huggingface_hub import HfApi, constants
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.cache_dir = Path(cache_dir or constants.HF_HUB_CACHE)
        self._token = token
        self._api = HfApi(endpoint=self.endpoint)

    @property
    def token(self) -> str | None:
        from huggingface_hub import get_token
        return self._token or get_token()

    def page(self, repo: str) -> str:
        """The repository's page on the Hub (where a gated model's licence is accepted)."""
        return f"{self.endpoint}/{repo}"

    def gated_hint(self, repo: str) -> str:
        return (f"{repo} is gated: accept its licence at {self.page(repo)} and give a Hugging Face access "
                "token (huggingface.co/settings/tokens)")

    # --- asking -------------------------------------------------------------------------
    def remote(self, repo: str, weights: str | None = None) -> RemoteModel:
        """What downloading `repo` (for `weights`) would fetch: the files and their sizes."""
        with self._errors(repo):
            info = self._api.model_info(repo, files_metadata=True, token=self.token or False)
            sizes = {s.rfilename: s.size or 0 for s in info.siblings or ()}
            gated = bool(getattr(info, "gated", False))
            _check_config_size(repo, "config.json", sizes)
            config = self._config(repo, info.sha) if "config.json" in sizes else None
        try:
            names = needed_files(set(sizes), config, weights, repo, lambda name: self._small_json(repo, info.sha, name,
                                                                                                  sizes))
        except HubError:
            raise
        except ValueError as exc:
            raise HubError(str(exc), "not_a_model") from None
        for name in names:
            _check_config_size(repo, name, sizes)
        names.sort(key=lambda name: sizes[name])  # small files first: the LM, when it comes, completes the model
        return RemoteModel(repo, info.sha, {name: sizes[name] for name in names}, gated, config)

    def _config(self, repo: str, revision: str) -> dict | None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import GatedRepoError
        try:
            path = hf_hub_download(repo, "config.json", revision=revision, cache_dir=self.cache_dir,
                                   endpoint=self.endpoint, token=self.token or False)
        except GatedRepoError:  # read once the licence is accepted and a token given
            return None
        try:
            return read_json(path)  # the loader's bounds: the size on disk too, and nesting
        except CheckpointError as exc:
            raise HubError(str(exc).replace(str(path), f"{repo}/config.json"), "not_a_model") from None

    def _small_json(self, repo: str, revision: str, name: str, sizes: dict[str, int]) -> object:
        """A small JSON file of the repository a family needs to choose its files (a sharded
        checkpoint's index), through the cache; None where the repository has none."""
        from huggingface_hub import hf_hub_download
        if name not in sizes:
            return None
        _check_config_size(repo, name, sizes)
        with self._errors(repo):
            path = hf_hub_download(repo, name, revision=revision, cache_dir=self.cache_dir, endpoint=self.endpoint,
                                   token=self.token or False)
        try:
            return read_json(path)
        except CheckpointError as exc:
            raise HubError(str(exc).replace(str(path), f"{repo}/{name}"), "not_a_model") from None

    def tensor_names(self, remote: RemoteModel, filename: str) -> list[str] | None:
        """The tensor names in a safetensors file on the Hub, from its header alone (ranged
        reads); None when it cannot be read (no access yet, not safetensors)."""
        try:
            with self._errors(remote.repo):
                meta = self._api.parse_safetensors_file_metadata(remote.repo, filename, revision=remote.revision,
                                                                 token=self.token or False)
        except Exception as exc:  # no access yet (HubError), or a header the client cannot parse
            log.info("no header for %s/%s: %s", remote.repo, filename, exc)
            return None
        return list(meta.tensors)

    def cached_bytes(self, remote: RemoteModel) -> int:
        """How much of `remote` is in the cache already (complete files only)."""
        return sum(size for name, size in remote.files.items() if self._cached(remote, name))

    def _cached(self, remote: RemoteModel, name: str) -> bool:
        from huggingface_hub import try_to_load_from_cache
        return isinstance(try_to_load_from_cache(remote.repo, name, cache_dir=self.cache_dir,
                                                 revision=remote.revision), str)

    def check_disk(self, remote: RemoteModel) -> None:
        """Refuses, before anything is written, a download the disk cannot hold."""
        need = remote.size - self.cached_bytes(remote)
        free = free_bytes(self.cache_dir)
        if need > free:
            raise HubError(f"{remote.repo}: the download needs {size_text(need)} and {_existing(self.cache_dir)} "
                           f"has {size_text(free)} free; free some space or set HF_HOME to a larger disk", "disk")

    def snapshot_folder(self, repo: str, revision: str) -> Path:
        """Where the client keeps the files of `repo` at `revision` (its cache layout)."""
        from huggingface_hub.file_download import repo_folder_name
        return self.cache_dir / repo_folder_name(repo_id=repo, repo_type="model") / "snapshots" / revision

    # --- downloading --------------------------------------------------------------------
    def download(self, remote: RemoteModel, report: Callable[[Progress], None] = lambda p: None,
                 cancel: threading.Event | None = None) -> Path:
        """Fetches the files of `remote` not yet in the cache; returns the snapshot folder.
        A file becomes part of the snapshot only once complete and checked (the client's
        size and hash checks); a cancelled or failed download keeps the complete files, and
        the next download fetches only the rest. A file left half-written (`.incomplete`) is
        kept while it is still to be fetched (a resume needs it), and removed on cancel or
        once its file is complete. Raises HubError or DownloadCancelled."""
        if remote.gated and not self.token:  # said before a byte is fetched, not after a refusal
            raise HubError(self.gated_hint(remote.repo), "gated")
        self.check_disk(remote)
        meter = ProgressMeter(remote.repo, remote.size, report, cancel or threading.Event())
        folder = repo_folder(self.cache_dir, remote.repo)
        try:
            snapshot = self._fetch(remote, meter)
        except DownloadCancelled:
            remove_incomplete(folder)
            raise
        remove_incomplete(folder, finished_only=True)
        return snapshot

    def _fetch(self, remote: RemoteModel, meter: ProgressMeter) -> Path:
        from huggingface_hub import hf_hub_download
        snapshot = self.snapshot_folder(remote.repo, remote.revision)
        for index, (name, size) in enumerate(remote.files.items()):
            meter.start_file(name)
            with self._errors(remote.repo, kept=meter.done):
                # The first file by branch name, so that the cache records what `main` is
                # (tools that load "main" find this snapshot); the rest from that commit.
                path = hf_hub_download(remote.repo, name, revision="main" if index == 0 else remote.revision,
                                       cache_dir=self.cache_dir, endpoint=self.endpoint,
                                       token=self.token or False, tqdm_class=meter.hook())
            meter.finish_file(size)
            # The Xet path reports progress from its own thread, where a cancel raised in the
            # hook is only logged: the file completes, and the download stops here.
            meter.check_cancelled()
            if index == 0 and snapshot not in Path(path).parents:
                raise HubError(f"{remote.repo}: the repository changed while downloading; try again", "server")
            if index == 0:  # its folder exists now; a twin's download belongs to its entry from here on
                folder = repo_folder(self.cache_dir, remote.repo)
                with self._errors(remote.repo):
                    record_downloaded_for(folder, downloaded_for(folder) | {remote.entry or remote.repo})
        return snapshot

    def save_token(self, token: str) -> str:
        """Checks an access token with the Hub and stores it where huggingface_hub keeps it
        (HF_HOME/token), never in our settings. Returns the account name."""
        from huggingface_hub import constants
        token = token.strip()
        with self._errors("the token"):
            who = self._api.whoami(token=token)
        path = Path(constants.HF_TOKEN_PATH)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        with os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            file.write(token)  # readable by the user alone from its first byte
        os.replace(part, path)
        return str(who.get("name", ""))

    # --- errors -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, repo: str, kept: int = 0):
        """Turns what the client raises into one line for the user (and the log); anything that
        is neither the Hub's nor the network's nor the disk's is a bug, raised as it is."""
        try:
            yield
        except (HubError, DownloadCancelled):
            raise
        except Exception as exc:
            described = describe_failure(exc, repo, self)
            if described is None:
                raise
            message, reason = described
            if kept:
                message += f"; kept the {size_text(kept)} already downloaded"
            log.info("%s (%s: %s)", message, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            raise HubError(message, reason) from None


_CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".toml")
_VOCABULARIES = ("vocab.json", "tokenizer.json")
"""JSON files that are a tokenizer's data, megabytes in the released models, not a config."""


def _check_config_size(repo: str, name: str, sizes: dict[str, int]) -> None:
    """A config file larger than the loader reads is refused from the Hub's listing, before
    its bytes are fetched."""
    if name.rsplit("/", 1)[-1] in _VOCABULARIES:
        return
    if name.endswith(_CONFIG_SUFFIXES) and sizes.get(name, 0) > MAX_CONFIG_BYTES:
        raise HubError(f"{repo}/{name}: {size_text(sizes[name])} on the Hub, too large for a config file (at most "
                       f"{size_text(MAX_CONFIG_BYTES)}); not downloaded", "not_a_model")


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(_existing(folder)).free


def _existing(folder: Path) -> Path:
    """The folder, or its nearest parent that exists (the cache may not exist yet)."""
    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


"""The model library from a terminal: `duplexcadence models` (what can be talked with, where it
is, what it needs), `download`, `remove` and `login` (a token for gated models). The same
library as the app's model list, through the same engine calls."""
from __future__ import annotations

import getpass
import sys
import threading
import time

from engine import KNOWN_MODELS, WEIGHTS

PROGRESS_EVERY_S = 0.2


def add_model_commands(sub) -> None:
    models = sub.add_parser("models", help="the models you can talk with: built in, on the Hub, downloaded, in "
                                           "folders; their size, where they are, and whether they fit")
    models.add_argument("--device", default=None, help="check the fit on cpu, cuda or cuda:N (default: cuda if "
                                                       "available)")
    models.add_argument("--folder", action="append", default=[], help="a checkpoint folder to list too")
    models.set_defaults(func=_models)
    download = sub.add_parser("download", help="download a model from the Hugging Face Hub into its cache "
                                               "(files an earlier download completed are kept)")
    download.add_argument("name", help=f"a repository name, e.g. {KNOWN_MODELS[0].repo} (`models` lists them)")
    download.add_argument("--weights", choices=list(WEIGHTS),
                          help="int8, int4: the official -q8 twin where one exists, else the bf16 files (quantized "
                               "on load); default: as the repository holds them")
    download.add_argument("--device", default=None, help="check the fit on this device first")
    download.set_defaults(func=_download)
    remove = sub.add_parser("remove", help="delete a downloaded model's files from the Hugging Face cache, and "
                                           "the quantized copies kept of them")
    remove.add_argument("name", help="its repository name")
    remove.set_defaults(func=_remove)
    login = sub.add_parser("login", help="store a Hugging Face access token (for gated models: `models` marks "
                                         "them) where huggingface_hub keeps it")
    login.set_defaults(func=_login)


def _models(args) -> None:
    from engine import READY, REMOTE, HubClient, HubError, free_bytes, list_models, select_device, size_text

    client = HubClient()
    device = select_device(args.device)
    print(f"Downloads go to {client.cache_dir} ({size_text(free_bytes(client.cache_dir))} free); fit checked on "
          f"{device}.")
    reachable = True
    for entry in list_models(client.cache_dir, args.folder):
        size = f"{size_text(entry.size_on_disk)} on disk" if entry.size_on_disk else ""
        print(f"\n{entry.name}  [{entry.state}{', gated' if entry.gated else ''}]  {size}")
        print(f"    {entry.about}")
        if entry.location is not None:
            print(f"    at {entry.location}")
        if entry.state == READY:
            print("    " + _local_fit(entry.name, device))
            for note in filter(None, (entry.weights_note(w) for w in ("int8", "int4"))):
                print("    " + note)
            continue
        if not reachable:
            continue
        for weights in WEIGHTS:
            try:
                print("    " + _remote_fit(client, entry.name, weights, device))
            except HubError as exc:
                print(f"    {exc}")
                reachable = "cannot reach" not in str(exc)
                break
        if entry.state != REMOTE:
            print(f"    finish it: duplexcadence download {entry.name}")


def _local_fit(name: str, device) -> str:
    from engine import CheckpointError, plan_memory
    try:
        plan = plan_memory(name, None, device)
    except CheckpointError as exc:
        return f"cannot be loaded: {exc}"
    return ("fits: " if plan.fits else "does not fit: ") + plan.describe()


def _remote_fit(client, name: str, weights: str, device) -> str:
    from engine import plan_download, size_text
    plan = plan_download(client, name, weights, device)
    text = f"{weights}: download {size_text(plan.to_download)}"
    if plan.note:
        text += f" ({plan.note.removeprefix(weights + ': ')})"
    if plan.memory is None:
        return text + "; its memory is known once it can be read (accept its licence, give a token)"
    return text + ("; fits: " if plan.memory.fits else "; does not fit: ") + plan.memory.describe()


_TOKEN_HINTS = {"gated": "; set HF_TOKEN, or run `duplexcadence login`",
                "token": "; store it with `duplexcadence login` (or set HF_TOKEN)"}
"""What a token failure's next step is from a terminal (the engine's message says what failed)."""


def _download(args) -> None:
    from engine import HubError
    try:
        _fetch(args)
    except HubError as exc:
        raise ValueError(f"{exc}{_TOKEN_HINTS.get(exc.reason, '')}") from None


def _fetch(args) -> None:
    from huggingface_hub.utils import logging as hub_logging

    from engine import DownloadCancelled, HubClient, HubError, plan_download, select_device, size_text
    hub_logging.set_verbosity_error()  # its retries are its own; the one line it ends in is ours
    client = HubClient()
    plan = plan_download(client, args.name, args.weights, select_device(args.device))
    if plan.remote.gated and not client.token:
        raise HubError(client.gated_hint(plan.remote.repo), "gated")
    if plan.note:
        print(plan.note, file=sys.stderr)
    if plan.memory is not None and not plan.memory.fits:
        print(f"note: it will not fit this machine now: {plan.memory.describe()}", file=sys.stderr)
    print(f"{plan.remote.repo}: {size_text(plan.to_download)} to download into {client.cache_dir}", file=sys.stderr)
    cancel, bar = threading.Event(), _ProgressLine()
    try:
        folder = client.download(plan.remote, bar.show, cancel)
    except (KeyboardInterrupt, DownloadCancelled):
        cancel.set()
        raise ValueError(f"{plan.remote.repo}: download stopped; the complete files are kept, run the same "
                         "command to fetch the rest") from None
    finally:
        bar.end()  # an error, too, is a line of its own
    print(f"downloaded {plan.remote.repo} to {folder}; talk with it: duplexcadence --model {plan.remote.repo}",
          file=sys.stderr)


class _ProgressLine:
    """On a terminal, one line on stderr redrawn a few times a second; piped (to a log, or
    another program), plain lines: one as each file starts, and one at each tenth of the whole."""

    def __init__(self):
        self._last, self._shown = 0.0, False
        self._plain = not sys.stderr.isatty()
        self._file, self._tenth = None, 0

    def show(self, progress) -> None:
        if self._plain:
            tenth = 10 * progress.done_bytes // max(1, progress.total_bytes)
            if progress.file != self._file or tenth > self._tenth:
                self._file, self._tenth = progress.file, tenth
                print(f"{progress.file}: {progress.describe()}", file=sys.stderr, flush=True)
            return
        now = time.monotonic()
        if now - self._last < PROGRESS_EVERY_S and progress.done_bytes < progress.total_bytes:
            return
        self._last, self._shown = now, True
        filled = 30 * progress.done_bytes // max(1, progress.total_bytes)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {progress.describe()} ({progress.file})\033[K")
        sys.stderr.flush()

    def end(self) -> None:
        if self._shown and not self._plain:
            sys.stderr.write("\n")


def _remove(args) -> None:
    from engine import HubClient, remove_model, size_text
    client = HubClient()
    freed = remove_model(args.name, client.cache_dir)
    print(f"removed {args.name} from {client.cache_dir}: {size_text(freed)} freed", file=sys.stderr)


def _login(args) -> None:
    from engine import HubClient
    token = getpass.getpass("Hugging Face access token (huggingface.co/settings/tokens; not shown): ") \
        if sys.stdin.isatty() else sys.stdin.readline()
    if not token.strip():
        raise ValueError("no token given")
    user = HubClient().save_token(token)
    print(f"token stored for {user or 'your account'} where huggingface_hub keeps it", file=sys.stderr)

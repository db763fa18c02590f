"""The app's identity (command name, display name, version, summary, icon), read from
pyproject.toml: the one place it is written. The About box, the window icon, the desktop
entry and the installers' file names all come from here. The installers carry pyproject.toml
beside the `app` package, where it is in a checkout."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


@dataclass(frozen=True)
class ProjectInfo:
    name: str           # the command and package name: duplexcadence
    display_name: str   # DuplexCadence
    version: str
    summary: str
    icon: Path
    app_id: str         # reverse-DNS id for desktop entries and bundle identifiers

    def artifact(self, system: str, arch: str, ext: str) -> str:
        """An installer's file name, e.g. duplexcadence-0.1.0-linux-x86_64.deb."""
        return f"{self.name}-{self.version}-{system}-{arch}.{ext}"


@functools.cache
def project_info(path: Path = PYPROJECT) -> ProjectInfo:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        project, app = data["project"], data["tool"]["duplexcadence"]["app"]
        return ProjectInfo(name=project["name"], display_name=app["display-name"], version=project["version"],
                           summary=project["description"], icon=path.parent / app["icon"], app_id=app["app-id"])
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise RuntimeError(f"{path}: cannot read the app's name and version ({exc!r}); "
                           "the installation is incomplete") from exc

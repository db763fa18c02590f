"""The command line explains itself as the window does: every subcommand has a description and
every option its help; without a display the window says so in one line instead of Qt aborting."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

from app.cli.commands import build_parser


def _undocumented(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            missing += [f"subcommand {c.dest}" for c in action._choices_actions if not c.help]
            for sub_name, sub in action.choices.items():
                missing += _undocumented(sub, sub_name)
        elif not action.help:
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_subcommand_and_option_has_help():
    assert _undocumented(build_parser(), "duplexcadence") == []


def test_without_a_display_the_installed_command_says_where_to_go_and_exits_0(tmp_path):
    """The README's first command ends on the installed `duplexcadence --model demo`: on a machine
    without a display that is a successful install, not a failure (rc 0, one line, no Qt abort)."""
    command = Path(sys.executable).with_name("duplexcadence")
    assert command.is_file(), f"{command}: the project is not installed in this environment"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([str(command), "--model", "demo"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("installed; no display here"), done.stdout
    assert "duplexcadence offline --model demo --input " in lines[0]
    assert done.stderr == ""

"""An output that is the job's input (however it is spelled: a relative path, a link, a hard
link, standard input redirected from it) or another of its outputs is refused in one line
before any work, and the input is left as it was. Through the installed command."""
import os

import pytest

from tests.installed_cli import duplexcadence, one_line, speech_clip


def _spellings(folder):
    """(what the output is given as, the option it is given to, what the refusal names)."""
    return {
        "the same name": lambda: ("in.wav", "--output", "--input in.wav"),
        "a relative spelling": lambda: (f"../{folder.name}/./in.wav", "--output", "--input in.wav"),
        "a link to it": lambda: (_link(folder / "link.wav", "in.wav"), "--output", "--input in.wav"),
        "a hard link to it": lambda: (_hard_link(folder / "hard.wav"), "--output", "--input in.wav"),
        "the transcript": lambda: ("in.wav", "--transcript", "--input in.wav"),
    }


def _link(path, target):
    path.symlink_to(target)
    return path.name


def _hard_link(path):
    os.link(path.with_name("in.wav"), path)
    return path.name


@pytest.mark.parametrize("spelling", list(_spellings(None)))
def test_an_output_that_is_the_input_is_refused_before_any_work(tmp_path, spelling):
    source = speech_clip(tmp_path / "in.wav")
    before = source.read_bytes()
    output, option, named = _spellings(tmp_path)[spelling]()
    extra = [option, output] if option == "--output" else ["--output", "reply.wav", option, output]
    # A model that does not exist: the refusal must come before loading one.
    done = duplexcadence("offline", "--model", tmp_path / "no-such-model", "--input", "in.wav", *extra,
                         cwd=tmp_path)
    line = one_line(done.stderr)
    assert done.returncode == 2 and f"{option} is the same file as {named}" in line
    assert source.read_bytes() == before and not source.is_symlink()
    assert not (tmp_path / "reply.wav").exists()


def test_standard_input_redirected_from_the_output_is_refused(tmp_path):
    source = speech_clip(tmp_path / "in.wav")
    before = source.read_bytes()
    with open(source, "rb") as stdin:
        done = duplexcadence("offline", "--model", "demo", "--input", "-", "--output", source, stdin=stdin)
    assert done.returncode == 2 and "--output is the same file as --input -" in one_line(done.stderr)
    assert source.read_bytes() == before


def test_two_outputs_that_are_one_file_are_refused(tmp_path):
    speech_clip(tmp_path / "in.wav")
    (tmp_path / "words.json").symlink_to("reply.wav")  # the transcript would land on the reply
    done = duplexcadence("offline", "--model", tmp_path / "no-such-model", "--input", "in.wav", "--output",
                         "reply.wav", "--transcript", "words.json", cwd=tmp_path)
    assert done.returncode == 2
    assert "words.json: --transcript is the same file as --output reply.wav" in one_line(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "words.json"]


def test_codec_refuses_its_input_as_output(tmp_path):
    source = speech_clip(tmp_path / "in.wav")
    before = source.read_bytes()
    done = duplexcadence("codec", "--model", "demo", "--input", source, "--output", tmp_path / "." / "in.wav")
    assert done.returncode == 2 and "--output is the same file as --input" in one_line(done.stderr)
    assert source.read_bytes() == before


def test_a_different_file_is_written(tmp_path):
    """The check refuses only the same file: a reply beside the input is written."""
    speech_clip(tmp_path / "in.wav")
    done = duplexcadence("offline", "--model", "demo", "--device", "cpu", "--input", "in.wav", "--output",
                         "in2.wav", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "in2.wav").stat().st_size > 44

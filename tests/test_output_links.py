"""An output given as a link is written through it: the file it leads to is locked (a job
writing that file under any of its names excludes this one) and replaced, the link kept."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import soundfile as sf

from engine.files.outputs import OutputBusyError, OutputError, OutputFiles
from tests.installed_cli import duplexcadence, one_line, speech_clip

REPO_ROOT = Path(__file__).resolve().parent.parent


def _holder(target: Path) -> subprocess.Popen:
    """Another job: holds `target` until its stdin closes, then writes "A" to it."""
    script = textwrap.dedent(f"""
        import sys
        from engine.files.outputs import OutputFiles
        with OutputFiles({str(target)!r}) as out:
            print("locked", flush=True)
            sys.stdin.read()
            out.temporary({str(target)!r}).write_text("A")
    """)
    job = subprocess.Popen([sys.executable, "-c", script], cwd=str(REPO_ROOT), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "locked"
    return job


@pytest.fixture
def linked(tmp_path):
    """out/reply.wav, a link to data/real.wav (an existing file) in another folder."""
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    real = tmp_path / "data" / "real.wav"
    real.write_text("old")
    link = tmp_path / "out" / "reply.wav"
    link.symlink_to(real)
    return link, real


def test_a_link_is_written_through_and_kept(linked):
    link, real = linked
    with OutputFiles(link) as out:
        temporary = out.temporary(link)
        assert temporary.parent == real.parent  # beside the file it replaces: one rename, same disk
        temporary.write_text("new")
    assert link.is_symlink() and link.resolve() == real and real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.wav"]
    assert sorted(p.name for p in link.parent.iterdir()) == ["reply.wav"]


@pytest.mark.parametrize("held,given", [("real", "link"), ("link", "real")])
def test_a_job_writing_the_file_under_another_name_excludes_this_one(linked, held, given):
    link, real = linked
    names = {"link": link, "real": real}
    first = _holder(names[held])
    try:
        with pytest.raises(OutputBusyError, match="another job is writing it"), OutputFiles(names[given]):
            pass
    finally:
        first.communicate("")
    assert first.returncode == 0 and real.read_text() == "A" and link.is_symlink()


def test_a_dangling_link_makes_the_file_it_names(tmp_path):
    link = tmp_path / "reply.wav"
    link.symlink_to("made.wav")
    with OutputFiles(link) as out:
        out.temporary(link).write_text("new")
    assert link.is_symlink() and (tmp_path / "made.wav").read_text() == "new"


def test_a_loop_of_links_is_refused_in_one_line(tmp_path):
    (tmp_path / "a.wav").symlink_to("b.wav")
    (tmp_path / "b.wav").symlink_to("a.wav")
    with pytest.raises(OutputError, match=r"a\.wav: a loop of links"):
        OutputFiles(tmp_path / "a.wav")
    done = duplexcadence("offline", "--model", "demo", "--input", speech_clip(tmp_path / "in.wav"), "--output",
                         tmp_path / "a.wav")
    assert done.returncode == 2 and "a loop of links" in one_line(done.stderr)


def test_two_names_of_one_file_in_a_set_are_refused(linked):
    link, real = linked
    with pytest.raises(OutputError, match="is the same file as"):
        OutputFiles(real, link)


def test_offline_writes_through_a_link_and_keeps_it(linked, tmp_path):
    link, real = linked
    done = duplexcadence("offline", "--model", "demo", "--device", "cpu", "--input",
                         speech_clip(tmp_path / "in.wav"), "--output", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == real
    assert sf.info(real).duration == pytest.approx(1.0, abs=0.05)
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.wav"]


def test_offline_through_a_link_to_a_file_being_written_refuses(linked, tmp_path):
    link, real = linked
    first = _holder(real)
    try:
        done = duplexcadence("offline", "--model", "demo", "--input", speech_clip(tmp_path / "in.wav"), "--output",
                             link)
    finally:
        first.communicate("")
    assert done.returncode == 2 and f"{link}: another job is writing it" in one_line(done.stderr)
    assert real.read_text() == "A" and link.is_symlink()  # the first job's output, whole

"""PersonaPlex's prompt frames replay graphs on CUDA (one per kind of prompt frame: voice,
role): a graph re-runs the work it was captured from, reading its inputs where they lay then.
On the CPU that is emulated for the prompt backbone, the stage that reads the frame's inputs:
the work of each kind's first frame is run for every later frame of that kind. The
conversation that follows must be the eager one's, bit for bit: the inputs travel through
buffers at fixed addresses."""
from engine.families.moshi.frame import is_prompt_key
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.runtime.stages import StageRunner
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import assert_identical, demo_with, run

PERSONA = Persona("DEMO", "Be brief.")


def test_prompt_frames_read_their_inputs_from_fixed_buffers(tmp_path, monkeypatch):
    model = demo_with(tmp_path, {"context": 16})
    audio = varied_audio(12, seed=2).reshape(12, -1)
    options = RuntimeOptions(seed=5)
    expected = run(DuplexSession(model, options, PERSONA), audio)

    first, run_stage, kinds = {}, StageRunner.run, []

    def as_replayed(self, stage, replay=True):
        if is_prompt_key(stage.key) and stage.key[1] == "backbone":
            kinds.append(stage.key)
            stage = stage._replace(work=first.setdefault(stage.key, stage.work))
        return run_stage(self, stage, replay)

    monkeypatch.setattr(StageRunner, "run", as_replayed)
    out = run(DuplexSession(model, options, PERSONA), audio)
    assert_identical(out, expected)
    assert len(first) == 2 and len(kinds) > 20  # voice frames and role frames, each kind one work

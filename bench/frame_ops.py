"""How many ATen operations the small pieces of a frame dispatch: the backbone's inputs
(`MoshiFrame.frame_rows`: outside tokens into the delay lines and the summed input embedding)
and the commit to the delay lines, in one steady conversation frame of the demo model. Views
and allocations are not counted; on CUDA nearly every counted operation is one kernel, so this
counts those kernels without a GPU (the fused products, attention and sampling are Triton's on
CUDA and not counted here).

    python3 -m bench.frame_ops [--frames 10]
"""
from __future__ import annotations

import argparse
import collections
import json
from unittest import mock

from torch.utils._python_dispatch import TorchDispatchMode

UNCOUNTED = ("aten.view.", "aten.slice.", "aten.select.", "aten.unsqueeze.", "aten.t.", "aten.transpose.",
             "aten._unsafe_view.", "aten.alias.", "aten.expand.", "aten.detach.", "aten.empty.", "aten.lift_fresh.",
             "aten.as_strided.", "aten.permute.")


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not str(func).startswith(UNCOUNTED):
            self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def count(frames: int) -> dict[str, int]:
    """The ops of each piece in the last of `frames` frames of the bundled speech."""
    from engine import SPEECH_SAMPLE, DuplexSession, Persona, RuntimeOptions, load_model, read_audio, split_frames
    from engine.families.moshi.frame import MoshiFrame
    from engine.families.moshi.lm.token_delays import DelayLines

    last: dict[str, int] = {}

    def counted(name: str, method):
        def run(*args, **kwargs):
            with _Counting() as mode:
                out = method(*args, **kwargs)
            last[name] = sum(mode.ops.values())
            return out
        return run

    session = DuplexSession(load_model("demo"), RuntimeOptions(seed=1), Persona(None, ""))
    with mock.patch.object(MoshiFrame, "frame_rows", counted("frame_rows", MoshiFrame.frame_rows)), \
            mock.patch.object(DelayLines, "commit", counted("commit", DelayLines.commit)):
        for pcm in split_frames(read_audio(SPEECH_SAMPLE))[:frames]:
            session.step(pcm)
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10, help="frames to run; the last is counted (default: 10)")
    print(json.dumps(count(parser.parse_args().frames)))


if __name__ == "__main__":
    main()

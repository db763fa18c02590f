"""The stage runner names the stages that ran eagerly with graph replay on (each a stall a live
conversation would feel): the benchmarks print them, so a shape `prepare` missed is found from one
run. CUDA graphs cannot exist on the CPU: `RunningGraphs` stands in for engine.runtime.graphs.Graphs
(a "capture" keeps the key's work, a "replay" runs it), which is all the runner's policy sees."""
import torch

from engine.options import RuntimeOptions
from engine.runtime.stages import Stage, StageRunner
from engine.state import FullStore


class RunningGraphs:
    def __init__(self):
        self.graphs = {}

    def capture(self, key, work, into=None):
        self.graphs[key] = work

    def run(self, key):
        return self.graphs[key]()

    def clear(self):
        self.graphs.clear()


def test_the_stages_not_prepared_ahead_are_counted_and_named():
    runner = StageRunner(FullStore([], torch.device("cpu")), torch.device("cpu"))
    runner.graphs = RunningGraphs()
    runner.configure(RuntimeOptions(graph_replay=True))
    prepared, missed = Stage(("llm", 10), lambda: "ten rows"), Stage(("tail", 8), lambda: "eight tokens")
    runner.prepare([prepared])
    assert runner.eager_runs == 0 and runner.eager_keys == []  # prepare's own runs are no stalls
    ran = [runner.run(prepared), runner.run(missed), runner.run(missed)]
    assert ran == ["ten rows", "eight tokens", "eight tokens"]
    assert runner.eager_runs == 1 and runner.eager_keys == [("tail", 8)]  # its second run replayed
    assert runner.run(missed, replay=False) == "eight tokens" and runner.eager_keys == [("tail", 8)]  # asked eager

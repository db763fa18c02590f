"""The stage runner: how keyed pieces of device work run over one store, knowing no model. A family
gives its work as `Stage`s (a key naming one exact-shape piece of work, the function queuing it,
the clocks it advances); the runner owns the rest. It ticks a stage's clocks before the stage
writes its new entries, outside capture, and nothing else does: demand-sized state is backed before
it is written, and no captured graph sees a clock move. With graph replay on CUDA a key runs eagerly
first (every lazy initialisation: Triton, cuBLAS/cuFFT plans, constant tables), then replays its
graph, captured on first need; `prepare` does both ahead for given stages, `prepare_through` for
stages reading one another's outputs, by running the family's step. Graphs point into the store and
bake in what stages close over: moving the state, replacing the store or `invalidate` drops them.
A key's graph writes where its first capture put its outputs and the runner keeps the captured work,
so `Regeneration` records every graph anew for a configuration not in use yet (new sampling, another
state placement), a few keys at a time while the graphs in use replay, then swaps them in.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import torch

from ..options import RuntimeOptions
from ..state import SavedState, Store, copy_state, restore_state
from .graphs import Graphs


class Stage(NamedTuple):
    """One piece of a family's device work."""
    key: Any
    """Names the work's exact shapes: equal keys, equal work (and one graph)."""
    work: Callable[[], Any]
    """Queues the work; a function of tensors at fixed addresses and the store only."""
    ticks: tuple[tuple[str, int], ...] = ()
    """(clock, ticks) to advance before the work runs."""


class StageRunner:
    """Runs the stages of one stream (a conversation, a codec pass, a token2wav stream) over
    one store. A generator given here is registered with each graph, so a replay draws the
    random numbers the eager path draws."""

    def __init__(self, store: Store, device: torch.device, generator: torch.Generator | None = None,
                 options: RuntimeOptions | None = None):
        self.store, self.device, self.generator = store, torch.device(device), generator
        self.graphs = Graphs(self.device, generator) if self.device.type == "cuda" else None
        self._ran: set[Any] = set()
        """Keys run eagerly in this store: their lazy initialisation is done, so they may be captured."""
        self._works: dict[Any, Callable[[], Any]] = {}
        """The work each key's graph was captured from: what a regeneration records again."""
        self._outputs: dict[Any, Any] = {}
        """Each key's outputs as its first capture recorded them: every later graph of the key
        writes there, so graphs that read them (and the works above) stay valid."""
        self._capture_s: dict[Any, float] = {}
        """How long each key's last capture took (host time): how a regeneration budgets."""
        self.replay = False
        self.eager_keys: list[Any] = []
        """The keys of stages run eagerly while replay was on (a key's first use, not prepared ahead),
        in order: each a stall."""
        self.configure(options or RuntimeOptions())

    # --- between runs ------------------------------------------------------------------------

    @property
    def can_replay(self) -> bool:
        return self.graphs is not None

    @property
    def eager_runs(self) -> int:
        return len(self.eager_keys)

    @property
    def captured(self) -> set[Any]:
        """The keys whose graphs are captured now."""
        return set() if self.graphs is None else set(self.graphs.graphs)

    def configure(self, options: RuntimeOptions) -> None:
        """Takes effect at the next run: graph replay where the device can replay."""
        self.replay = options.graph_replay and self.can_replay

    def may_replay(self, keys: Iterable[Any]) -> bool:
        """Whether stages with these keys would replay now: replay is on and each ran eagerly.
        Stages that read one another's outputs ask for all of them at once (all replay or none)."""
        return self.replay and self._ran.issuperset(keys)

    def stale(self, skip: Callable[[Any], bool] = lambda key: False) -> bool:
        """Some key once captured (but those `skip` names: see regenerate) has no graph now
        (dropped while replay was off): turning replay on needs a regeneration first."""
        return not self.captured.issuperset(key for key in self._works if not skip(key))

    def prepared(self, keys: Iterable[Any]) -> bool:
        """Whether stages with these keys would neither run eagerly for the first time nor be
        captured when they next run: each has run and, with replay on, has its graph."""
        keys = set(keys)
        return self._ran.issuperset(keys) and (not self.replay or self.captured.issuperset(keys))

    def invalidate(self) -> None:
        """Drop every graph (what they read changed: sampling parameters, a predictor's weights)."""
        if self.graphs is not None:
            self.graphs.clear()

    def move_state(self, store: Store) -> None:
        """Go on in another placement: the live state is copied over and the graphs (which point
        into the old store) go. If the copy fails, the old placement stays in use."""
        try:
            copy_state(self.store, store)
        except BaseException:
            store.close()
            raise
        self.invalidate()
        old, self.store = self.store, store
        old.close()

    def replace_store(self, store: Store) -> None:
        """Start over in a store of other sizes (nothing is copied): new shapes, so every key
        runs eagerly once again before it is captured."""
        self.invalidate()
        self._ran.clear()
        self._works.clear()
        self._outputs.clear()
        old, self.store = self.store, store
        old.close()

    def reset(self) -> None:
        """State to zero at the same addresses: graphs stay valid."""
        self.store.reset()

    def restart(self, clock: str) -> None:
        """One clock's state to zero at the same addresses (a cache whose positions start again, a
        turn's), outside capture as every tick: graphs stay valid."""
        self.store.restart(clock)

    def restore(self, saved: SavedState) -> None:
        """The state as `saved` (engine.state.save_state), at the same addresses: graphs stay valid."""
        restore_state(self.store, saved)

    def close(self) -> None:
        """Graphs first: they may point into state mapped outside torch's allocator."""
        self.invalidate()
        self.store.close()

    # --- running -----------------------------------------------------------------------------

    def run(self, stage: Stage, replay: bool = True) -> Any:
        """Tick the stage's clocks, then run it: from its graph when `replay` (the family's own
        condition, e.g. output has started) and `may_replay`, else eagerly. A replay returns
        the outputs its capture recorded, rewritten by each replay: read or copy them before
        another graph replays."""
        for clock, ticks in stage.ticks:
            self.store.advance(clock, ticks)
        if replay and self.may_replay((stage.key,)):
            if stage.key not in self.graphs.graphs:
                self._capture(self.graphs, stage.key, stage.work)
            return self.graphs.run(stage.key)
        if replay and self.replay:
            self.eager_keys.append(stage.key)
        self._ran.add(stage.key)
        return stage.work()

    def prepare(self, stages: Iterable[Stage]) -> None:
        """The capture policy ahead of time: each stage that has not run eagerly runs now (its
        clocks ticked), then, with replay on, each is captured, so its first use replays. The
        eager runs write state: the caller resets the store afterwards."""
        stages = list(stages)
        for stage in stages:
            if stage.key not in self._ran:
                self.run(stage, replay=False)
        if self.replay:
            for stage in stages:
                if stage.key not in self.graphs.graphs:
                    self._capture(self.graphs, stage.key, stage.work)

    def prepare_through(self, step: Callable[[], Any], keys: Iterable[Any], limit: int) -> None:
        """The capture policy ahead of time for stages that read one another's outputs (a
        frame's, a wake's): `step` (the family's own work, running them through `run`) runs
        until each of `keys` is `prepared`, so they are captured together as they run. `limit`
        steps at most: a step that never runs one of the keys would otherwise loop forever.
        The steps write state: the caller resets the store afterwards."""
        keys = list(keys)
        for _ in range(limit):
            if self.prepared(keys):
                return
            step()
        if not self.prepared(keys):
            raise RuntimeError(f"{limit} steps left {[k for k in keys if not self.prepared((k,))]} unprepared")

    def _capture(self, graphs: Graphs, key: Any, work: Callable[[], Any]) -> None:
        start = time.perf_counter()
        outputs = graphs.capture(key, work, self._outputs.get(key))
        self._outputs.setdefault(key, outputs)
        self._works[key] = work
        self._capture_s[key] = time.perf_counter() - start

    # --- generations -------------------------------------------------------------------------

    def regenerate(self, configured: Callable[[], AbstractContextManager] = contextlib.nullcontext,
                   store: Store | None = None, skip: Callable[[Any], bool] = lambda key: False) -> Regeneration:
        """A new generation of every graph captured so far but those whose key `skip`s (work
        the family runs only outside a conversation: they are captured again at their next
        use), recorded under `configured()` (the family's new settings, e.g. sampling, in force
        only while it records) and, given `store`, into that store (another placement of the
        same regions)."""
        return Regeneration(self, configured, store, skip)

    def _take(self, graphs: Graphs, store: Store | None) -> None:
        """The regenerated graphs (and their store, the live state copied in) take over."""
        if store is not None:
            copy_state(self.store, store)
        self.invalidate()  # the old generation first: it points into the old store
        self.graphs = graphs
        if store is not None:
            old, self.store = self.store, store
            old.close()


STARVED = 25
"""Steps in a row a regeneration may record nothing (2 s of frames) before it records a graph
that does not fit a frame's cadence: late rather than never."""


class Regeneration:
    """A runner's graphs recorded anew, a few keys at a time between frames. A capture records
    without running anything, so until `finish` the conversation goes on exactly as it was,
    replaying the graphs in use (or eagerly, with replay off)."""

    def __init__(self, runner: StageRunner, configured: Callable[[], AbstractContextManager], store: Store | None,
                 skip: Callable[[Any], bool]):
        self.runner, self.configured, self.store = runner, configured, store
        self.graphs = Graphs(runner.device, runner.generator)
        self.todo = [key for key in runner._works if not skip(key)]
        self.total = len(self.todo)
        self._spent = 0.0  # seconds its captures took
        self._idle = 0  # steps in a row that recorded nothing

    @property
    def done(self) -> bool:
        return not self.todo

    def step(self, deadline: float, limit: float) -> None:
        """Capture keys while each is expected to end before `deadline` (perf_counter time),
        and the first even after it while it is expected to end before `limit` (always with
        replay off, where eager frames leave no room, or after STARVED steps that recorded
        nothing: the change must come). Expected: the mean
        of this regeneration's captures so far (a key's first capture, at load, also paid for
        one-time set-up), before any its last capture's."""
        runner, live = self.runner, self.runner.store
        with self.configured():
            runner.store = self.store or live  # the works read the runner's store as they run
            try:
                first = True
                while self.todo:
                    ends = time.perf_counter() + self._expected(self.todo[0])
                    anyway = not runner.replay or self._idle >= STARVED
                    if not (ends <= deadline or (first and (ends <= limit or anyway))):
                        break
                    key, first = self.todo.pop(0), False
                    runner._capture(self.graphs, key, runner._works[key])
                    self._spent += runner._capture_s[key]
            finally:
                runner.store = live
        self._idle = self._idle + 1 if first else 0

    def _expected(self, key: Any) -> float:
        done = self.total - len(self.todo)
        return self._spent / done if done else self.runner._capture_s[key]

    def finish(self) -> None:
        """Capture what is left, then the new graphs (and store) take over."""
        while self.todo:
            self.step(float("inf"), float("inf"))
        self.runner._take(self.graphs, self.store)
        self.store = None

    def cancel(self) -> None:
        self.graphs.clear()
        if self.store is not None:
            self.store.close()
            self.store = None

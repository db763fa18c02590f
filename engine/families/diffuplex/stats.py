"""What DiffuPlex did, frame by frame and summed up: plain data (no torch), shared by the
session, `offline`'s summary and the app's panel."""
from __future__ import annotations

import dataclasses

from ...frame import FRAME_RATE


@dataclasses.dataclass(frozen=True)
class WakeReport:
    """What DiffuPlex did in one frame."""
    woke: bool
    """The backbone ran this frame (False: a predicted frame was played)."""
    discarded: int
    """Planned frames thrown away by this frame's wake (a revision when > 0)."""


@dataclasses.dataclass
class DiffuPlexStats:
    frames: int = 0
    wakes: int = 0
    revisions: int = 0
    backbone_s: float = 0.0
    """Backbone and depformer time, over every frame."""

    def add(self, report: WakeReport | None, timings: dict[str, float]) -> None:
        if report is None:
            return
        self.frames += 1
        self.wakes += report.woke
        self.revisions += report.discarded > 0
        self.backbone_s += timings.get("backbone", 0.0) + timings.get("depformer", 0.0)

    @property
    def wakes_per_second(self) -> float:
        return self.wakes * FRAME_RATE / max(self.frames, 1)

    @property
    def frames_per_wake(self) -> float:
        """Frames each wake covered: its own, and the predicted ones played after it."""
        return self.frames / max(self.wakes, 1)

    @property
    def backbone_ms_per_frame(self) -> float:
        return 1000 * self.backbone_s / max(self.frames, 1)

    def summary(self) -> str:
        return (f"DiffuPlex: {self.wakes_per_second:.2f} wakes/s, {self.frames_per_wake:.2f} frames per wake, "
                f"{self.revisions} revisions, backbone {self.backbone_ms_per_frame:.1f} ms per frame")

"""Echo cancellation on the microphone path (WebRTC's audio processing, AEC3, through livekit)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EchoSettings:
    """What the microphone path does before the model hears it."""
    echo_cancellation: bool = True
    noise_suppression: bool = False
    high_pass: bool = True
    auto_gain: bool = False

"""The conversation's cadence as data: what one frame is, in samples and seconds. Every model
of the Moshi family shares it (Mimi at 24 kHz, 12.5 codec frames a second); nothing here
imports torch."""

SAMPLE_RATE = 24000
FRAME_SIZE = 1920
"""Samples in one frame: 80 ms at 24 kHz."""
FRAME_RATE = SAMPLE_RATE / FRAME_SIZE
"""Frames a second (12.5)."""
FRAME_SECONDS = FRAME_SIZE / SAMPLE_RATE

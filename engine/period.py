"""The session's audio as data: what the app and `offline` exchange with the engine, whatever
the model's family hears and speaks (engine.runtime.step_audio converts). 24 kHz in periods of
80 ms; nothing here imports torch."""

SAMPLE_RATE = 24000
FRAME_SIZE = 1920
"""Samples in one period: 80 ms at 24 kHz."""
FRAME_RATE = SAMPLE_RATE / FRAME_SIZE
"""Periods a second (12.5)."""
FRAME_SECONDS = FRAME_SIZE / SAMPLE_RATE

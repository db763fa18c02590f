"""A 30-minute MiniCPM-o conversation (1,800 one-second units of the tiny random checkpoint, on the
CPU, nearly every unit spoken) keeps working with bounded memory: the LLM's context stays under the
window's high mark plus a unit, each cache's store stops growing once its clock's bound is reached
(the LLM's window, the encoder's table, the TTS's turn), and the process's resident memory is the
same in the last twenty minutes as after the first ten. About 3.5 minutes on one core."""
from __future__ import annotations

import os

import numpy as np
import torch

from engine.families.minicpmo.audio_encoder import ENCODER_KV
from engine.families.minicpmo.conversation import MiniCPMOConversation
from engine.families.minicpmo.model import load
from engine.families.minicpmo.protocol_settings import UnitSettings
from engine.families.minicpmo.qwen3 import KV
from engine.families.minicpmo.speech_tokens import TTS_KV
from engine.options import RuntimeOptions
from engine.persona import Persona

from .test_minicpmo_units import FOLDER

UNITS = 1800
SETTLED = 600
"""By then every bound has been reached at least once (the window fills near unit 300)."""
RSS_SLACK = 32 << 20


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_thirty_minutes_stay_bounded():
    model = load(FOLDER, None, torch.device("cpu"), torch.float32)
    options = RuntimeOptions()
    conversation = MiniCPMOConversation(model, torch.Generator().manual_seed(7), options, Persona())
    conversation.reset(options, lambda: False, None)
    store = conversation.runner.store
    high = UnitSettings().basic_window_high_tokens
    rng = np.random.default_rng(3)
    spoken, lengths, held, settled_rss, peak_rss = 0, [], {}, 0, 0
    with torch.no_grad():
        for unit in range(UNITS):
            pcm = torch.from_numpy(rng.standard_normal(16000).astype(np.float32) * 0.1)
            _, _, report = conversation.step(pcm, options, lambda stage: None)
            spoken += not report.listen
            lengths.append(conversation.llm.length)
            for part in ("llm", "tts", "encoder"):
                held.setdefault(part, []).append(store.nbytes(part))
            if unit == SETTLED:
                settled_rss = _resident_bytes()
            elif unit > SETTLED and unit % 100 == 0:
                peak_rss = max(peak_rss, _resident_bytes())
    assert spoken > UNITS / 2  # the TTS's turns and clock restarts are exercised, not only listening
    assert max(lengths) <= high + max(b - a for a, b in zip(lengths, lengths[1:]))
    assert min(lengths[SETTLED:]) > high / 2  # it kept a context: the window slid, never emptied
    for part, region in (("llm", KV), ("tts", TTS_KV), ("encoder", ENCODER_KV)):
        assert max(held[part]) <= store.regions[region].bytes_full(), part  # each cache within its capacity
    # The LLM's clock outruns its capacity once the window slides (it never goes back): held whole from
    # then on, no more; the TTS's and the encoder's restart (each turn, each forgotten cache).
    assert max(held["llm"][SETTLED:]) == max(held["llm"][:SETTLED]) == store.regions[KV].bytes_full()
    assert min(held["tts"][SETTLED:]) < max(held["tts"]) / 4 and min(held["encoder"][SETTLED:]) < max(held["encoder"])
    assert peak_rss <= settled_rss + RSS_SLACK, (peak_rss, settled_rss)

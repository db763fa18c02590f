"""A conversation with MiniCPM-o 4.5 (engine.families.protocol.FamilyConversation): each step
is a one-second unit, run as the reference's `DuplexCapability` runs it — the audio encoder's
rows prefilled after `<unit>`, the listen/speak decision and the unit's text, the TTS's 25
speech tokens conditioned on the text's hidden states, and the token2wav tail's audio with the
reference's buffering (three silence tokens start each turn; a turn's end flushes). One
generator serves the LLM's and the TTS's draws in the reference's order, so a seeded run
draws what the reference draws. With graph replay (CUDA), every pass of the LLM and every draw
of the TTS a unit can make replays a graph captured in `prepare`; the tail is one stream for the
whole conversation, restarted at each turn in the same state and graphs. The output is the same
with graph replay on or off."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from ...options import RuntimeOptions
from ...persona import Persona
from ...runtime.stages import Regeneration, Stage, StageRunner
from ...state import Region
from ...state.placement import new_store, placement_for
from ...token2wav.prompt import Prompt
from ...token2wav.token2wav_stream import Token2wavStream
from .audio_encoder import ENCODER_CLOCK, StreamingAudioEncoder
from .audio_features import UnitFeatures
from .protocol_settings import UnitSettings
from .qwen3 import CLOCK, Qwen3Model
from .speech_tokens import TTS_CLOCK, SpeechTokenGenerator
from .turn_audio import TurnAudio
from .units import UnitProtocol, UnitResult
from .voices import Voice

STAGES = ("encode", "prefill", "decide", "speech tokens", "audio", "finalize")
DEFAULT_ROLE = "Streaming Omni Conversation."  # core/processors/unified.py prepare()'s default
UNIT_ROWS = 10  # the encoder's rows a second: the LLM's prefill after `<unit>`


def system_prompt(role: str) -> tuple[str, str]:
    """The demo's prefix and suffix around the system text (core/processors/unified.py prepare)."""
    return f"<|im_start|>system\n{role or DEFAULT_ROLE}\n<|audio_start|>", "<|audio_end|><|im_end|>"


@dataclasses.dataclass(frozen=True)
class UnitReport:
    """What a unit did, in the family's words."""
    unit: int
    listen: bool
    text: str
    end_of_turn: bool
    speech_tokens: int

    def figures(self) -> dict[str, str]:
        return {"unit": str(self.unit), "decision": "listen" if self.listen else "speak", "text": self.text}


class MiniCPMOConversation:
    stages = STAGES
    stage_words = {"encode": "hearing the second", "prefill": "reading it", "decide": "deciding and writing",
                   "speech tokens": "choosing speech", "audio": "making audio", "finalize": "closing the unit"}
    predictor = None
    interruptible = True  # the reference's break: talking over it ends its turn
    prompt_s = 0.0
    default_role = DEFAULT_ROLE

    def __init__(self, model, generator: torch.Generator | None, options: RuntimeOptions, persona,
                 predictor=None, settings: UnitSettings | None = None):
        if predictor is not None:
            raise ValueError(f"{model.name} has no predicting policy")
        self.model, self.generator = model, generator
        self.settings = settings or UnitSettings()
        self.output_width = self.settings.max_new_speak_tokens_per_chunk
        device, dtype, w = model.device, model.dtype, model.weights_by_name
        self.options = options
        self.runner = StageRunner(new_store(self._regions(), device, options), device, generator, options)
        self.encoder = StreamingAudioEncoder(model.config, w, device, dtype, runner=self.runner)
        self.llm = Qwen3Model(model.config, w, device, dtype, capacity=self._capacity, runner=self.runner)
        self.units = UnitProtocol(self.llm, model.tokens, self.settings)
        self.tts = SpeechTokenGenerator(model.config, w, device, dtype, runner=self.runner)
        self._persona = Persona()
        self.set_persona(persona)
        self.prepared = Prompt.read(model.voice_file, device) if model.tail is not None and model.voice_file else None
        self._voice_rows: dict[str, torch.Tensor] = {}
        self.turn_audio = TurnAudio(model.tail, device)
        self.turn_audio.use(self._prompt_of(self._voice(None)))
        self.unit = 0
        self._interrupt = False

    # --- what a person sets, and what it can run ------------------------------------------

    def capabilities(self) -> dict[str, str | None]:
        return {"policy.ar": None}

    def refusal(self, options: RuntimeOptions) -> str | None:
        return None if options.policy == "ar" else f"{self.model.name} has one policy (ar)"

    def load_predictor(self, path) -> None:
        if path is not None:
            raise ValueError(f"{self.model.name} has no predicting policy")

    @property
    def persona(self) -> Persona:
        return self._persona

    def set_persona(self, persona) -> None:
        self.check_persona(persona or Persona())
        self._persona = persona or Persona()

    def check_persona(self, persona) -> None:
        if persona.voice and persona.voice not in self.model.voices:
            have = ", ".join(self.model.voices) or "none: it speaks with its prepared voice or in text"
            raise ValueError(f"{self.model.name} has no voice {persona.voice!r} (have: {have})")

    def _voice(self, name: str | None) -> Voice | None:
        """The voice a conversation speaks with: the one chosen, else the model's own (a prepared
        prompt beside the tail, else its first voice made from a recording)."""
        if name:
            return self.model.voices[name]
        return None if self.prepared is not None else next(iter(self.model.voices.values()), None)

    def _prompt_of(self, voice: Voice | None) -> Prompt | None:
        return voice.prompt if voice is not None else self.prepared

    @property
    def voices(self) -> list[str]:
        return list(self.model.voices)

    @property
    def stream(self) -> Token2wavStream | None:
        """The tail's stream (None before the first turn, or without a tail or a voice)."""
        return self.turn_audio.stream

    @property
    def prompt(self) -> Prompt | None:
        return self.turn_audio.prompt

    def configure(self, options: RuntimeOptions) -> None:
        self.options = options
        self.runner.configure(options)
        if self.stream is not None:
            self.stream.runner.configure(options)

    @property
    def eager_runs(self) -> int:
        """Stages run eagerly with graph replay on, since the conversation began: each one a stall."""
        return self.runner.eager_runs + (self.stream.runner.eager_runs if self.stream is not None else 0)

    @property
    def _capacity(self) -> int:
        """The LLM cache's positions: the window's high mark and a unit's most past it."""
        return self.settings.basic_window_high_tokens + 512

    def _regions(self) -> list[Region]:
        config, dtype = self.model.config, self.model.dtype
        return (Qwen3Model.regions(config, dtype, self._capacity) + SpeechTokenGenerator.regions(config, dtype)
                + StreamingAudioEncoder.regions(config, dtype))

    def change(self, old: RuntimeOptions, new: RuntimeOptions) -> Regeneration | None:
        """Another placement of the state moves the encoder's, the LLM's and the TTS's caches now; the graphs
        that pointed at the old ones are captured again at their next use (the next unit runs a few captures).
        Graph replay and sampling need nothing: the graphs in use serve them. The tail's stream takes the new
        placement at the next turn."""
        if placement_for(self.model.device, new) is not type(self.runner.store):
            store = new_store(self._regions(), self.model.device, new)
            self.runner.move_state(store)
            for part in (self.encoder, self.llm, self.tts):
                part.place(store)
        return None

    # --- a conversation ---------------------------------------------------------------------

    def reset(self, options: RuntimeOptions, cancelled: Callable[[], bool], progress) -> tuple[RuntimeOptions, bool]:
        self.runner.reset()  # the cache back to no position backed
        self.encoder.reset()
        self.tts.reset()
        voice = self._voice(self._persona.voice)
        self.units.prepare(*system_prompt(self._persona.role.strip()),
                           reference_rows=None if voice is None else self._reference_rows(voice))
        self.turn_audio.use(self._prompt_of(voice))
        self._new_turn_audio()
        self.unit = 0
        self._interrupt = False
        return options, True

    def _reference_rows(self, voice: Voice) -> torch.Tensor:
        """The voice's rows in the system prompt, made once (the encoder's reference pass, eager)."""
        if voice.name not in self._voice_rows:
            self._voice_rows[voice.name] = self.encoder.encode_reference(voice.samples16k)
        return self._voice_rows[voice.name]

    def prepare(self, pcm: torch.Tensor, options: RuntimeOptions) -> None:
        """Every pass and draw a unit can make runs once and, with graph replay, is captured: the encoder's first
        unit and its steady one at each span of its cache; the LLM's `<unit>`, a second's rows and the two-token
        finalize (a decode step is a `<unit>`'s shape) at each span of its cache; the TTS's condition rows (one
        to a unit's most) and its steps at each span of its own; the tail's chunks (its stream, made here). The
        work runs on the state as it is and the state goes back to zero (positions; the generator is seeded at
        the reset); the text draws' kernels load. Without graphs (the CPU) there is nothing to prepare."""
        self.configure(options)
        if self.runner.replay:
            self._ready_split_sums()
            self.prepare_stages(lambda stage: self.runner.prepare([stage]))
            self.units.decoder.warm_up(self.llm.sizes.vocab, self.model.device)

    def _ready_split_sums(self) -> None:
        """The split products' arrival counters made on the capture stream before any capture: made inside
        the two-row LLM pass's capture, only that graph's replay would zero them, and the ten-row pass,
        replayed first in a unit, would count from garbage (where an H100's NaN rows likely came from)."""
        from ...kernels import unavailable_reason

        if unavailable_reason() is None:
            from ...kernels import split_sums

            with torch.cuda.stream(self.runner.graphs.capture_stream()):
                split_sums.ready(self.model.device)

    @torch.no_grad()  # as the session steps: a buffer made under inference_mode could not be written there
    def prepare_stages(self, run: Callable[[Stage], object]) -> None:
        """`run` on every pass and draw a unit can make, each from the first position and draw
        (a stage's run and its capture's warm-up move them on: all in a row would run past the
        caches and a unit's draws); then the state goes back to a conversation's start."""
        self.tts.generator = self.generator
        llm_spans = sorted({self.llm.span(end) for end in range(1, self.llm.capacity + 1)})
        stages = [self.llm.stage(count, span) for span in llm_spans for count in (1, 2, UNIT_ROWS)]
        tts_spans = sorted({self.tts.span(end) for end in range(1, self.tts.capacity + 1)})
        condition_rows = range(1, self.settings.max_new_speak_tokens_per_chunk + 1)
        stages += [self.tts.stage(rows, span) for span in tts_spans for rows in (None, *condition_rows)]
        encoder_spans = sorted({self.encoder.span(end) for end in range(1, self.encoder.sizes.positions + 1)})
        stages += [self.encoder.stage(*shape, span) for shape in self._encoder_shapes() for span in encoder_spans]
        # Every span is read from the first position: the whole cache backed while they run.
        self.runner.store.ensure({CLOCK: self._capacity, TTS_CLOCK: self.tts.capacity,
                                  ENCODER_CLOCK: self.encoder.sizes.positions})
        for stage in stages:
            self.encoder.position.zero_()
            self.llm.position.zero_()
            self.tts.position.zero_()
            self.tts.step.zero_()
            run(stage)
        self.llm.reset()
        self.tts.reset()
        self.runner.reset()
        self._new_turn_audio()

    def _encoder_shapes(self) -> list[tuple[int, int, int]]:
        """(frames, context frames before, after) of the encoder's first units, from the feature stream
        itself run over three seconds of silence: the first unit's, then the steady one's."""
        features = UnitFeatures(self.encoder.features.sizes, self.model.device)
        second = np.zeros(features.sizes.sample_rate, dtype=np.float32)
        units = [features.push(second) for _ in range(3)]
        return sorted({(u.mel.shape[-1], u.prefix_frames, u.suffix_frames) for u in units if u is not None})

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark):
        samples = pcm.detach().to("cpu", torch.float32).numpy()
        rows = self.encoder.encode(samples)
        mark("encode")
        self.units.prefill(rows)
        mark("prefill")
        result = self.units.generate(self.generator, interrupt=self._interrupt)
        self._interrupt = False
        if result.broke_turn:
            self._new_turn_audio()  # the reference resets the tail, not the TTS's cache
        mark("decide")
        speech, drawn = None, 0
        if not result.listen:
            speech, drawn = self._speak(result, mark)
        self.units.finalize()
        mark("finalize")
        tokens = torch.full((self.output_width,), -1, dtype=torch.int64)
        spoken = [token for token, _ in result.spoken][: self.output_width]
        tokens[: len(spoken)] = torch.tensor(spoken, dtype=torch.int64)
        report = UnitReport(self.unit, result.listen, result.text, result.end_of_turn, drawn)
        self.unit += 1
        return tokens, speech, report

    def interrupt(self) -> None:
        """The break override for the next unit (its turn ends; it listens)."""
        self._interrupt = True

    def spare(self, until: float) -> None:
        """Between turns, the tail's shorter pushes prepared (TurnAudio.spare)."""
        self.turn_audio.spare(until)

    def _speak(self, result: UnitResult, mark) -> tuple[torch.Tensor | None, int]:
        ids = [token for token, _ in result.spoken]
        hidden = torch.cat([h for _, h in result.spoken]) if result.spoken else None
        condition = self.tts.condition(ids, hidden)
        if self.tts.length + condition.shape[0] + self.tts.cfg.steps_per_unit > self.tts.capacity:
            # A turn past the TTS's positions (minutes of speech without a pause): its speech goes on
            # as a new segment. The reference's cache grows without bound; ours keeps memory bounded.
            self.tts.reset()
        speech_tokens = self.tts.generate(condition, self.generator, end_of_turn=result.end_of_turn)
        mark("speech tokens")
        audio = self.turn_audio.audio(list(speech_tokens), result.end_of_turn)
        mark("audio")
        if result.end_of_turn:
            self._new_turn_audio()
        return audio, len(speech_tokens)

    def _new_turn_audio(self) -> None:
        self.turn_audio.new_turn(self.options)

    def tally(self) -> UnitTally:
        return UnitTally()

    def text(self, tokens: np.ndarray) -> str:
        ids = [int(t) for t in tokens if t >= 0]
        return self.model.tokens.decode(ids) if ids else ""


@dataclasses.dataclass
class UnitTally:
    units: int = 0
    spoken: int = 0

    def add(self, report: UnitReport | None, timings: dict[str, float]) -> None:
        if report is not None:
            self.units += 1
            self.spoken += not report.listen

    def summary(self) -> str:
        return f"MiniCPM-o: spoke in {self.spoken} of {self.units} seconds" if self.units else ""

    def lines(self, options) -> list[tuple[str, str]]:
        if not self.units:
            return []
        return [(f"Spoke in {self.spoken} of {self.units} seconds",
                 "Once a second the model decides to listen or to speak.")]

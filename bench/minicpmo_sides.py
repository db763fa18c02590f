"""The two runtimes bench.minicpmo compares, each loaded from the same folder and driven one unit
at a time: the reference (OpenBMB MiniCPM-o-Demo's DuplexCapability over its MiniCPMO, loaded as
the demo's worker loads it, with the stock Step-Audio2 token2wav) and ours
(engine.families.minicpmo's conversation). Nothing of the reference is edited: its objects are
wrapped from outside (instance attributes) to force the schedule's tokens, lift the 28-character
cut, time its stages and count what each unit made."""
from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .minicpmo_schedule import Forcing, StageClock
from .minicpmo_weights import TAIL, VOICE, import_reference

TAIL_STEPS = 5  # MiniCPMO.init_token2wav's n_timesteps (fp32: enable_float16 False)
MAX_CHARACTERS = 10 ** 6
"""The unit's character cut, lifted on both sides: forced units say 19 tokens of ordinary words."""
# The demo's worker (core/processors/unified.py _load_model / init_unified) with DuplexConfig's defaults.
DUPLEX = dict(generate_audio=True, ls_mode="explicit", max_new_speak_tokens_per_chunk=20, temperature=0.7,
              top_k=20, top_p=0.8, force_listen_count=3)
# DuplexView.generate's streaming_generate arguments (DuplexConfig's defaults).
GENERATE = dict(decode_mode="sampling", temperature=0.7, top_k=20, top_p=0.8, listen_prob_scale=1.0,
                listen_top_k=None, text_repetition_penalty=1.05, text_repetition_window_size=512,
                length_penalty=1.1)
ROLE = "Streaming Omni Conversation."  # DuplexView.prepare's default system text


def build_processor(folder: Path):
    """The processor as MiniCPMOProcessor.from_pretrained builds it, without tokenizer.json or
    trust_remote_code (packaging/make_minicpmo_golden.py does the same)."""
    from MiniCPMO45.processing_minicpmo import MiniCPMAAudioProcessor, MiniCPMOProcessor, MiniCPMVImageProcessor
    from MiniCPMO45.tokenization_minicpmo_fast import MiniCPMOTokenizerFast

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    return MiniCPMOProcessor(image_processor=MiniCPMVImageProcessor(**pre),
                             audio_processor=MiniCPMAAudioProcessor(**pre),
                             tokenizer=MiniCPMOTokenizerFast.from_pretrained(str(folder)),
                             audio_pool_step=pre["audio_pool_step"])


def _lift_character_cut(tokenizer) -> None:
    """streaming_generate cuts a unit when `len(tokenizer.decode(_test_ids, ...)) >= 28`: that
    one call (told by its caller's frame and its argument, the list `_test_ids`) gets the
    decoded text cut to 27 characters; every other decode is untouched."""
    decode = tokenizer.decode

    def lifted(ids, *args, **kwargs):
        text = decode(ids, *args, **kwargs)
        caller = sys._getframe(1)
        if caller.f_code.co_name == "streaming_generate" and caller.f_locals.get("_test_ids") is ids:
            return text[:27]
        return text

    tokenizer.decode = lifted


def _prepared_prompt(folder: Path, device: torch.device):
    """The prepared voice prompt, as the stock Token2wav's `_prepare_prompt` returns one for a
    WAV file (bench.stock_token2wav.start_stock_stream builds the same tuple)."""
    from engine.token2wav.prompt import Prompt

    prompt = Prompt.read(folder / TAIL / VOICE)
    lens = torch.tensor([prompt.tokens.shape[1]], dtype=torch.int32, device=device)
    return (prompt.tokens.to(device, torch.int32), lens, prompt.speaker.to(device, torch.float32),
            prompt.mel.to(device, torch.float32), lens * 2)


def cache_bytes(*owners) -> int:
    """Bytes of the tensors reachable from the owners' cache attributes (names holding "cache" or
    "past_key_values": the reference's DynamicCache objects, its encoder's, its TTS's and its
    tail's stream caches), each storage once; modules (weights) are not walked."""
    seen: set[int] = set()

    def walk(value, depth: int) -> int:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            if storage.data_ptr() in seen or storage.nbytes() == 0:
                return 0
            seen.add(storage.data_ptr())
            return storage.nbytes()
        if depth > 6 or isinstance(value, (torch.nn.Module, str, bytes, int, float)) or value is None:
            return 0
        if isinstance(value, dict):
            return sum(walk(v, depth + 1) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(walk(v, depth + 1) for v in value)
        return sum(walk(v, depth + 1) for v in getattr(value, "__dict__", {}).values())

    return sum(walk(value, 0) for owner in owners for name, value in getattr(owner, "__dict__", {}).items()
               if "cache" in name or "past_key_values" in name)


class Reference:
    name = "reference"

    def __init__(self, demo: Path, folder: Path, device: torch.device, dtype: torch.dtype, forcing: Forcing,
                 clock: StageClock, seed: int, window: str):
        from .stock_token2wav import load_stock, stock_token2wav_runtime

        _, modeling = import_reference(demo)
        # Each speaking unit warns "incomplete result. hit max_new_token: 26" (26 steps is the plan).
        modeling.logger.setLevel(logging.ERROR)
        began = time.perf_counter()
        # The demo: from_pretrained (float32: no torch_dtype), then .bfloat16().eval(), then .cuda().
        model = modeling.MiniCPMO.from_pretrained(str(folder), _attn_implementation="sdpa")
        model = model.to(dtype).eval().to(device)
        _sync(device)
        self.load_s = time.perf_counter() - began
        self.memory_at_load = memory_now(device)
        model.processor = build_processor(folder)
        # init_token2wav(streaming=True) builds Token2wav(assets/token2wav, float16=False, n_timesteps=5),
        # whose constructor also loads the ONNX speech tokenizer and speaker model the prepared prompt
        # replaces: the same modules, loaded by bench.stock_token2wav as Token2wav.__init__ loads them.
        tail = (folder / TAIL / VOICE).is_file()
        if tail:
            flow, hift = load_stock(folder / TAIL, device, fp16=False)
            runtime = stock_token2wav_runtime(flow, hift, TAIL_STEPS, fp16=False)
            prompt = _prepared_prompt(folder, device)
            runtime._prepare_prompt = lambda wav: prompt  # set_stream_cache's preparation of "the WAV file"
            model.tts.audio_tokenizer = runtime
        duplex = modeling.DuplexCapability(model=model, device=device.type, sliding_window_mode=window, **DUPLEX)
        self.model, self.duplex, self.forcing, self.clock = model, duplex, forcing, clock
        duplex.decoder.decode = forcing.wrap(duplex.decoder.decode)
        _lift_character_cut(duplex.tokenizer)
        self._count()
        for obj, name, stage in ((duplex, "streaming_prefill", "llm_prefill"),
                                 (duplex.processor, "process_audio_streaming", "encoder"),
                                 (model, "get_audio_embedding_streaming", "encoder"),
                                 (duplex, "streaming_generate", "llm_decode"),
                                 (duplex, "_convert_results_to_tts_input", "tts"), (model.tts, "generate_chunk", "tts"),
                                 (duplex, "_generate_waveform_from_tokens", "tail"),
                                 (duplex, "_reset_token2wav_for_new_turn", "tail"),
                                 (duplex, "finalize_unit", "finalize")):
            clock.wrap(obj, name, stage)
        # The server's session start: cleanup's reset_session, then DuplexView.prepare with the
        # default system text and a TTS prompt (named here; its preparation is the prepared prompt's).
        # Without a tail, no TTS prompt: its token2wav is not initialised and it makes no audio.
        model.reset_session(reset_token2wav_cache=True)
        with contextlib.redirect_stdout(io.StringIO()):
            duplex.prepare(prefix_system_prompt=f"<|im_start|>system\n{ROLE}\n<|audio_start|>",
                           suffix_system_prompt="<|audio_end|><|im_end|>", prompt_wav_path="voice" if tail else None)
        torch.manual_seed(seed)  # its draws come from the process's generators
        _sync(device)
        self.ready_s = time.perf_counter() - began
        self.memory_at_ready = memory_now(device)

    def _count(self) -> None:
        """Speech tokens and audio samples per unit, read off the calls that make them."""
        self.made = {"speech_tokens": 0, "audio_samples": 0}
        tts, duplex = self.model.tts, self.duplex
        generate_chunk, waveform = tts.generate_chunk, duplex._generate_waveform_from_tokens

        def counted_chunk(*args, **kwargs):
            tokens, cache = generate_chunk(*args, **kwargs)
            self.made["speech_tokens"] += int(tokens.shape[1])
            return tokens, cache

        def counted_waveform(*args, **kwargs):
            audio = waveform(*args, **kwargs)
            self.made["audio_samples"] += 0 if audio is None else len(audio)
            return audio

        tts.generate_chunk, duplex._generate_waveform_from_tokens = counted_chunk, counted_waveform

    def unit(self, samples: np.ndarray) -> dict:
        self.made.update(speech_tokens=0, audio_samples=0)
        with contextlib.redirect_stdout(io.StringIO()):  # its per-unit prints, made all the same
            ok = self.duplex.streaming_prefill(audio_waveform=samples)
            if not ok["success"]:
                raise RuntimeError(f"streaming_prefill: {ok['reason']}")
            result = self.duplex.streaming_generate(**GENERATE)
            self.duplex.finalize_unit()
        return {"listen": bool(result["is_listen"]), "end_of_turn": bool(result["end_of_turn"]), **self.made,
                "context": self.duplex.decoder.get_cache_length()}

    def state_bytes(self) -> int:
        """Its streaming state: what its cache objects hold now."""
        model = self.model
        return cache_bytes(self.duplex, self.duplex.decoder, model, model.tts, model.tts.audio_tokenizer)

    def close(self) -> None:
        self.model = self.duplex = None


GRANULE = 2 << 20
"""The device's mapping granule (engine.state.vmm)."""


class Ours:
    name = "ours"
    STAGE_OF = {"encode": "encoder", "prefill": "llm_prefill", "decide": "llm_decode", "speech tokens": "tts",
                "audio": "tail", "finalize": "finalize"}

    def __init__(self, demo: Path, folder: Path, device: torch.device, dtype: torch.dtype, forcing: Forcing,
                 clock: StageClock, seed: int, window: str, graphs: bool = True, weights: str = "bf16"):
        from engine.families.minicpmo.conversation import MiniCPMOConversation
        from engine.families.minicpmo.model import load
        from engine.families.minicpmo.protocol_settings import UnitSettings
        from engine.options import RuntimeOptions
        from engine.persona import Persona

        began = time.perf_counter()
        model = load(folder, None, device, dtype, weights=weights)
        _sync(device)
        self.load_s = time.perf_counter() - began
        self.memory_at_load = memory_now(device)
        self.options = RuntimeOptions(seed=seed, graph_replay=graphs)
        generator = torch.Generator(device=device).manual_seed(seed)
        settings = UnitSettings(max_unit_characters=MAX_CHARACTERS, sliding_window_mode=window)
        conversation = MiniCPMOConversation(model, generator, self.options, Persona(), settings=settings)
        conversation.prepare(torch.zeros(16000), self.options)  # as the session does before a conversation
        generator.manual_seed(seed)
        conversation.reset(self.options, lambda: False, None)
        _sync(device)
        self.ready_s = time.perf_counter() - began
        self.memory_at_ready = memory_now(device)
        self.model, self.conversation, self.clock = model, conversation, clock
        self.eager_at_ready = conversation.eager_runs  # the system prompt's pass is the reset's, not a unit's
        self._eager_seen: dict[int, int] = {}
        self._new_eager_keys()  # the reset's, left out
        units = conversation.units
        units.decoder.decode = forcing.wrap(units.decoder.decode)
        clock.wrap(conversation, "_new_turn_audio", "tail")  # the reference's turn reset is its tail's too
        self.made = {"speech_tokens": 0}
        generate = conversation.tts.generate

        def counted(*args, **kwargs):
            tokens = generate(*args, **kwargs)
            self.made["speech_tokens"] += len(tokens)
            return tokens

        conversation.tts.generate = counted

    def unit(self, samples: np.ndarray) -> dict:
        self.made["speech_tokens"] = 0
        self._unit_began = time.perf_counter()

        def mark(key: str) -> None:
            self.clock.lap(self.STAGE_OF[key])

        _, speech, report = self.conversation.step(torch.from_numpy(samples), self.options, mark)
        return {"listen": report.listen, "end_of_turn": report.end_of_turn, **self.made,
                "audio_samples": 0 if speech is None else int(speech.numel()), "context": self.conversation.llm.length,
                "eager_runs": self.conversation.eager_runs - self.eager_at_ready, "eager_keys": self._new_eager_keys()}

    def spare(self) -> float:
        """What the session does after a unit (engine.session's SPARE_SHARE of the second): the tail's
        shorter pushes prepared between turns. Its milliseconds, not a unit's."""
        from engine.session import SPARE_SHARE

        began = time.perf_counter()
        self.conversation.spare(self._unit_began + SPARE_SHARE * 1.0)
        return (time.perf_counter() - began) * 1000

    def _new_eager_keys(self) -> list[str]:
        """The keys of the stages run eagerly since the last unit (or ready): the LLM's, TTS's and tail's runners."""
        conversation, new = self.conversation, []
        for runner in (conversation.runner, conversation.stream and conversation.stream.runner):
            if runner is not None:
                seen = self._eager_seen.get(id(runner), 0)
                new += [str(key) for key in runner.eager_keys[seen:]]
                self._eager_seen[id(runner)] = len(runner.eager_keys)
        return new

    def graph_memory(self) -> dict[str, dict[str, int]]:
        """Its graphs by kind of work (a key's first part): how many, and the memory outside torch's they took."""
        kinds: dict[str, dict[str, int]] = {}
        for runner in (self.conversation.runner, self.conversation.stream and self.conversation.stream.runner):
            for key, size in (runner.graphs.outside_bytes.items() if runner and runner.graphs else ()):
                kind = kinds.setdefault(str(key[0] if isinstance(key, tuple) else key), {"graphs": 0, "bytes": 0})
                kind["graphs"] += 1
                kind["bytes"] += size
        return kinds

    def state_bytes(self) -> int:
        """Its streaming state: what its stores hold (the encoder's, the LLM's and the TTS's caches; the
        tail's)."""
        c = self.conversation
        return c.runner.store.nbytes() + (c.stream.nbytes() if c.stream is not None else 0)

    def state_against_clocks(self) -> dict:
        """Each region's bytes held against what its clock requires now (its live entries): the bytes
        past them summed, the largest region's excess, and the regions more than one 2 MiB granule
        over (the tail's saved prompt state is a copy of live entries: not counted)."""
        c = self.conversation
        stores = [c.runner.store] + ([c.stream.store] if c.stream is not None else [])
        held, excess = {}, {}
        for store in stores:
            for name, size in store.region_bytes().items():
                held[name], excess[name] = size, size - store.regions[name].bytes_at(store.ticks(name))
        largest = max(excess, key=excess.get)
        return {"excess_bytes": sum(excess.values()), "largest": [largest, excess[largest]],
                "over_a_granule": sorted(n for n, e in excess.items() if e > GRANULE),
                "held_bytes": held, "excess_by_region": excess}

    def close(self) -> None:
        if self.conversation is not None and self.conversation.stream is not None:
            self.conversation.stream.close()
        self.model = self.conversation = None


def memory_now(device: torch.device) -> dict | None:
    """Where the process's device memory is: in use on the device (the CUDA context and whatever
    the allocator does not hold included), held by torch's allocator (its graph pools apart) and
    allocated in it."""
    if device.type != "cuda":
        return None
    _sync(device)
    pools: dict[str, int] = {}
    for segment in torch.cuda.memory_snapshot():
        pool = "default" if tuple(segment.get("segment_pool_id", (0, 0))) == (0, 0) else "graphs"
        pools[pool] = pools.get(pool, 0) + segment["total_size"]
    return {"device_used_bytes": device_used(device), "reserved_bytes": torch.cuda.memory_reserved(device),
            "allocated_bytes": torch.cuda.memory_allocated(device), "reserved_by_pool_bytes": pools}


def device_used(device: torch.device) -> int:
    """Device memory in use, by this process and any other."""
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def on_card(args, device: torch.device, out: dict):
    """Our side, with --card-gib under that card's budget, less the context in use before it loads
    (measured once the side before is gone: run_side frees it but leaves torch's cache)."""
    if device.type != "cuda" or args.card_gib is None:
        yield
        return
    from engine.state.memory_budget import GIB, memory_budget

    gc.collect()
    torch.cuda.empty_cache()
    out.update(card_gib=args.card_gib, budget_bytes=round(args.card_gib * GIB) - device_used(device))
    with memory_budget(out["budget_bytes"], device):
        yield

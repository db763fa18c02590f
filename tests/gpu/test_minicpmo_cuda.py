"""MiniCPM-o in bf16 on CUDA stays within the reference's own bf16 noise (tests/minicpmo_forced.py): our
family loaded in bf16 on the GPU, teacher-forced through the golden's fp32 runs, against the fp32
reference, bounded by the reference's own bf16 run (recorded on the CPU, loaded as the demo loads it for
the GPU: fp32, then .bfloat16()) — the LLM's logits, the TTS head's and the encoder's rows. Then the
seeded sampling run as distributions: the first draw's distribution (KL over the columns the golden
keeps, the recorded token's log-probability) no farther from the fp32 one than the reference bf16's."""
import pytest
import torch

from engine.families.minicpmo.model import load
from tests import minicpmo_forced as forcing

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def trace():
    return forcing.load_trace()


@pytest.fixture(scope="module")
def model():
    return load(forcing.FOLDER, None, torch.device("cuda"), torch.bfloat16)


def test_ours_in_bf16_on_cuda_is_within_the_reference_bf16_noise(trace, model, record):
    runs = forcing.BF16_RUNS
    ours = {}
    for run in runs:
        ours.update(forcing.forced(model, trace, run))
    mine = forcing.fidelity(ours, trace, runs)
    ref = forcing.fidelity(forcing.reference_bf16(trace), trace, runs)
    record("minicpmo_bf16_fidelity", {"ours_cuda": mine, "reference_bf16_cpu": ref})
    print(forcing.format_fidelity(mine, ref))
    assert mine["llm"]["steps"] == ref["llm"]["steps"] and mine["tts"]["steps"] == ref["tts"]["steps"]
    exceeded = forcing.within_reference_noise(mine, ref)
    assert not exceeded, exceeded


def test_the_seeded_sampling_run_draws_from_the_reference_distribution(trace, model, record):
    mine = forcing.fidelity(forcing.forced(model, trace, "sampled", seed=forcing.META["seed"]), trace, ["sampled"])
    ref = forcing.fidelity(forcing.reference_bf16(trace), trace, ["sampled"])
    record("minicpmo_bf16_sampled", {"ours_cuda": mine["llm"], "reference_bf16_cpu": ref["llm"]})
    print(forcing.format_fidelity(mine, ref, parts=("llm",)))
    # The distribution's measures only: its 38 steps are too few for top-1 agreement (one flip is 0.026).
    exceeded = [line for line in forcing.within_reference_noise(mine, ref, parts=("llm",))
                if line.split()[1].startswith(("kl_", "token_logprob_err_"))]
    assert not exceeded, exceeded


def _conversation_outputs(model, replay: bool, units: int = 24) -> tuple[list, int]:
    """`units` seconds of the bench's forced schedule (listening and speaking runs, turn ends) on
    speech: each unit's decision, text, speech tokens, output tokens and audio; and the stages that ran
    eagerly with replay on after `prepare` (what would stall a live conversation)."""
    import numpy as np
    import soundfile as sf
    from scipy.signal import resample_poly

    from bench.minicpmo_schedule import TEXT, Forcing, schedule
    from engine.families.minicpmo import protocol_settings as names
    from engine.families.minicpmo.conversation import MiniCPMOConversation
    from engine.options import RuntimeOptions
    from engine.persona import Persona

    options = RuntimeOptions(graph_replay=replay, seed=5)
    generator = torch.Generator("cuda")
    conversation = MiniCPMOConversation(model, generator, options, Persona())
    conversation.prepare(torch.zeros(16000), options.replace(graph_replay=True))
    conversation.configure(options)
    generator.manual_seed(options.seed)
    conversation.reset(options, lambda: False, None)
    tokens = model.tokens
    plan = schedule(units)
    forcing = Forcing(plan, tokens.id(names.LISTEN), tokens.id(names.TURN_EOS), tokens.encode(TEXT))
    conversation.units.decoder.decode = forcing.wrap(conversation.units.decoder.decode)
    drawn: list[list[int]] = []
    generate = conversation.tts.generate

    def recorded(*args, **kwargs):
        drawn.append(generate(*args, **kwargs))
        return drawn[-1]

    conversation.tts.generate = recorded
    speech, rate = sf.read("assets/speech_sample.wav", dtype="float64")
    pcm = resample_poly(speech, 2, 3).astype(np.float32)
    eager_before = conversation.eager_runs
    outputs = []
    for i in range(units):
        forcing.begin(i)
        second = torch.from_numpy(pcm[(i * 16000) % (len(pcm) - 16000):][:16000].copy())
        out_tokens, speech, report = conversation.step(second, options, lambda stage: None)
        outputs.append((report.listen, report.text, report.end_of_turn, out_tokens.tolist(), report.speech_tokens,
                        None if speech is None else speech.cpu().numpy().tobytes()))
    return outputs + drawn, conversation.eager_runs - eager_before


def test_graph_replay_changes_nothing_and_nothing_runs_eagerly(model):
    """The same conversation with every LLM pass and TTS draw replayed from graphs captured in
    `prepare`, and with graph replay off: the same decisions, text, speech tokens, bit for bit; and
    with replay on, no stage of a unit ran eagerly (the system prompt is the reset's, not a unit's)."""
    eager, _ = _conversation_outputs(model, replay=False)
    replayed, stalls = _conversation_outputs(model, replay=True)
    assert any(not listen for listen, *_ in eager[:24]), "the schedule speaks"
    assert replayed == eager
    assert stalls == 0


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_int8_and_int4_on_cuda(weights, trace, record):
    """int8 and int4 through the fused kernels, teacher-forced: within the CPU test's bounds."""
    from tests.test_minicpmo_quantized import check_quantized

    got = check_quantized(weights, trace, torch.device("cuda"))
    record(f"minicpmo_{weights}_fidelity", {"llm": got["llm"], "tts": got["tts"]})
    print(weights, {part: {k: round(got[part][k], 4) for k in ("rel_err_mean", "top1_agreement")}
                    for part in ("llm", "tts")})


@pytest.fixture(scope="module")
def spoken_folder(tmp_path_factory):
    """The tiny checkpoint with the full-size random tail and a prepared voice beside it: it speaks."""
    import shutil

    from bench.minicpmo_weights import write_tail

    folder = tmp_path_factory.mktemp("spoken") / "minicpmo"
    shutil.copytree(forcing.FOLDER, folder)
    write_tail(folder, seed=0)
    return folder


@pytest.mark.parametrize("weights", ["bf16", "int4"])  # a float table and int8 rows, the flow in fp32 and fp16
def test_lookup_tables_stay_on_the_host_and_change_nothing(weights, spoken_folder):
    """A CUDA load keeps the LLM's and the TTS's token tables and the vocoder's noise on the host
    (host_tables.py, engine.ops.host_rows); a conversation replayed from graphs gives the same
    bits, audio included, as with all three on the device."""
    import dataclasses

    from engine.families.minicpmo.host_tables import LLM_TABLE, TTS_TABLE, device_of

    hosted = load(spoken_folder, None, torch.device("cuda"), torch.bfloat16, weights=weights)
    assert {device_of(hosted.weights_by_name[key]).type for key in (LLM_TABLE, TTS_TABLE)} == {"cpu"}
    on_device = {key: type(t)(*(part.cuda() for part in t)) if isinstance(t, tuple) else t.cuda()
                 for key, t in hosted.weights_by_name.items() if key in (LLM_TABLE, TTS_TABLE)}
    resident = dataclasses.replace(hosted, weights_by_name={**hosted.weights_by_name, **on_device})
    source = hosted.tail.vocoder.m_source
    assert source.noise.device.type == "cpu" and source.noise.is_pinned()
    expected = _conversation_outputs(hosted, replay=True)
    source.noise = source.noise.cuda()
    assert any(speech for *_, speech in expected[0][:24]) and _conversation_outputs(resident, True) == expected

"""The `duplexcadence` command: the GUI by default, plus headless subcommands.

Errors the user can fix (bad checkpoint, bad audio file) are printed as one line and
exit non-zero; tracebacks are for bugs only.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine import WEIGHTS

from .model_commands import add_model_commands


def _codec(args) -> None:
    from engine import (
        SAMPLE_RATE,
        AudioInput,
        AudioOutput,
        CodecSession,
        OutputFiles,
        check_distinct,
        check_writable,
        limit_cpu_threads,
        load_model_mimi,
        output_format,
        select_device,
    )

    check_distinct({"--input": args.input, "--model": args.model}, {"--output": args.output})
    check_writable(args.output)
    output_format(args.output)
    device = select_device(args.device)
    limit_cpu_threads(device)
    source = AudioInput(args.input)
    with OutputFiles(args.output) as out:
        codec = CodecSession(load_model_mimi(args.model, device=device))
        try:
            with AudioOutput(out.temporary(args.output), format_of=args.output) as audio:
                for frame, samples in source.frames():
                    audio.write(codec.roundtrip(frame)[:samples])
        finally:
            codec.close()
    print(f"wrote {args.output} ({source.given / SAMPLE_RATE:.2f} s)", file=sys.stderr)
    from app.cli.offline import note_nonfinite
    note_nonfinite(codec.nonfinite_samples)


def _offline(args) -> None:
    from app.cli.offline import run_offline
    run_offline(args)


def _token2wav(args) -> None:
    from .token2wav_run import run_token2wav

    run_token2wav(args)


def _quantize(args) -> None:
    from engine import export_int4, export_q8, select_device

    export = export_int4 if args.weights == "int4" else export_q8
    path = export(args.model, args.output, select_device(args.device))
    print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) and the checkpoint's other files")


def _train(args) -> None:
    from engine import SPEECH_SAMPLE, TrainSettings, limit_cpu_threads, load_model, select_device, train_predictor

    out = Path(args.out)
    if out.suffix != ".safetensors":
        raise ValueError(f"{out}: a predictor is a .safetensors file")
    if not out.resolve().parent.is_dir():
        raise ValueError(f"{out}: the folder to write it in does not exist")
    if args.resume and not out.is_file():
        raise ValueError(f"{out}: nothing to resume (no such file)")
    settings = TrainSettings(steps=args.steps, block=args.block, rank=args.rank, lr=args.lr, batch=args.batch,
                             window=args.window, seed=args.seed, checkpoint_every=args.checkpoint_every)
    device = select_device(args.device)
    limit_cpu_threads(device)
    model = load_model(args.model, device=device, dtype=torch_dtype(device))
    train_predictor(model, Path(args.data) if args.data else SPEECH_SAMPLE, out, settings, args.resume,
                    _print_training_progress)
    print(f"wrote {out}", file=sys.stderr)


def _print_training_progress(step: int, steps: int, loss: float) -> None:
    """One line on stderr, redrawn every step, ended with the last."""
    filled = 30 * step // steps
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] step {step}/{steps} loss {loss:.3f}")
    if step == steps:
        sys.stderr.write("\n")
    sys.stderr.flush()


def torch_dtype(device: str):
    """Training keeps the base model in fp32 on the CPU, bf16 on a GPU (as it runs there)."""
    import torch
    return torch.float32 if device == "cpu" else torch.bfloat16


def _gui(args) -> int:
    missing = no_display()
    if missing:
        # Not a failure: the install worked, and the README's first command ends here on a server.
        print(missing)
        return 0
    from app.window.main_window import run_app
    return run_app(model=args.model)


def no_display() -> str | None:
    """Why the window cannot open here (Linux without X11 or Wayland), in one line; else None.
    Asked before Qt loads: without a display Qt aborts with a message about its xcb plugin."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return None
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    from engine import SPEECH_SAMPLE
    sample = SPEECH_SAMPLE if SPEECH_SAMPLE.is_file() else "IN.wav"
    return ("installed; no display here (neither DISPLAY nor WAYLAND_DISPLAY is set), so the window cannot "
            f"open — try a conversation file to file: duplexcadence offline --model demo --input {sample} "
            "--output reply.wav")


MODELS = ("'demo' (the bundled untrained model), a checkpoint folder, a Hugging Face cache snapshot, or a "
          "downloaded repository name (`duplexcadence models` lists them; `duplexcadence download NAME` gets one)")
INPUT = "any audio file soundfile reads (WAV, FLAC, OGG...), any rate and channel count"
OUTPUT = "mono 24 kHz, 16-bit PCM; the extension picks the format (WAV without one)"


def build_parser() -> argparse.ArgumentParser:
    from app.project_info import project_info

    info = project_info()
    parser = argparse.ArgumentParser(prog=info.name, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"{info.display_name} {info.version}")
    parser.add_argument("--model", default=None, help=f"model to preselect in the app: {MODELS}")
    sub = parser.add_subparsers(dest="command")
    _add_codec(sub)
    _add_offline(sub)
    _add_token2wav(sub)
    _add_quantize(sub)
    _add_train_predictor(sub)
    add_model_commands(sub)
    return parser


def _add_codec(sub) -> None:
    codec = sub.add_parser("codec", help="encode then decode an audio file through Mimi, frame by frame")
    codec.add_argument("--model", required=True, help="a Mimi checkpoint file, or " + MODELS)
    codec.add_argument("--input", required=True, help=INPUT)
    codec.add_argument("--output", required=True, help=OUTPUT)
    codec.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    codec.set_defaults(func=_codec)


def _add_offline(sub) -> None:
    offline = sub.add_parser("offline", help="run a conversation file to file")
    offline.add_argument("--model", required=True, help=MODELS)
    offline.add_argument("--input", required=True, help="the user's side of the conversation: " + INPUT)
    offline.add_argument("--output", required=True,
                         help="the model's reply, as long as the input: " + OUTPUT)
    offline.add_argument("--transcript", help="write the model's words with start and end times as JSON")
    offline.add_argument("--seed", type=int, default=0, help="sampling seed (default 0): same seed, same reply")
    offline.add_argument("--greedy", action="store_true", help="take the most likely token instead of sampling")
    offline.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    offline.add_argument("--voice", help="a voice the model declares (the window lists them)")
    offline.add_argument("--role", help="a text role prompt, for a model that takes one")
    offline.add_argument("--policy", choices=["ar", "listen", "speak"], default="ar",
                         help="ar: the model runs every step; listen / speak: guessing ahead, for a model with "
                              "predicting policies (needs a predictor)")
    offline.add_argument("--adapter", help="a predictor file for the predicting policies (default: the one shipped "
                                           "beside the model, if any)")
    offline.add_argument("--tau", type=float, default=0.5, help="guessing ahead: confidence a predicted step needs")
    offline.add_argument("--block", type=int, default=4, help="guessing ahead: future steps one run predicts")
    offline.add_argument("--verify", choices=["semantic", "off"], default="semantic",
                         help="guessing ahead: check each predicted step against the user's real audio")
    offline.add_argument("--weights", choices=list(WEIGHTS),
                         help="the LM's linear weights: int8 quantizes a bf16 checkpoint on load (default: as the "
                              "checkpoint holds them; an official model.q8.safetensors is int8)")
    offline.set_defaults(func=_offline)


def _add_token2wav(sub) -> None:
    t2w = sub.add_parser("token2wav", help="speech tokens to audio through Step-Audio2's token2wav, streamed in "
                                           "one-second chunks, each timed against the cadence")
    t2w.add_argument("--model", required=True, help="a Step-Audio2 token2wav folder (flow.yaml, flow.pt, "
                                                    "config.yaml, hift.pt)")
    t2w.add_argument("--tokens", required=True, help="speech tokens (25 a second): a .npy array or a text file of "
                                                     "integers")
    t2w.add_argument("--prompt", required=True, help="the voice prompt, prepared: a .safetensors file with tokens "
                                                     "[T], speaker [192] (CAM++) and mel [2T, 80]")
    t2w.add_argument("--output", required=True, help=OUTPUT)
    t2w.add_argument("--steps", type=int, default=10, help="flow-matching (ODE) steps per chunk (default 10)")
    t2w.add_argument("--fp16", action="store_true", help="run the flow in float16 (the vocoder stays float32)")
    t2w.add_argument("--seed", type=int, default=0, help="seed of the noise tables (default 0): same seed, same audio")
    t2w.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    t2w.set_defaults(func=_token2wav)


def _add_quantize(sub) -> None:
    quantize = sub.add_parser("quantize", help="write a checkpoint's LM with int8 weights in the official q8 "
                                                "layout (model.q8.safetensors) or with int4 weights in ours "
                                                "(model.int4.safetensors), beside copies of its other files")
    quantize.add_argument("--model", required=True, help=MODELS)
    quantize.add_argument("--output", required=True, help="the checkpoint folder to write")
    quantize.add_argument("--weights", choices=("int8", "int4"), default="int8",
                          help="int8: the official q8 layout, which the stock runtime reads too; int4: 4-bit "
                               "weights, one bf16 scale per 64 inputs, for 8 GB cards (default: %(default)s)")
    quantize.add_argument("--device", default=None, help="where to quantize: cpu, cuda or cuda:N "
                                                         "(default: cuda if available)")
    quantize.set_defaults(func=_quantize)


def _add_train_predictor(sub) -> None:
    trainer = sub.add_parser("train-predictor", help="train a predictor (adapter) for a model's guessing-ahead "
                                                     "policies (listen, speak) by self-distillation")
    trainer.add_argument("--model", required=True, help=MODELS)
    trainer.add_argument("--out", required=True, help="the adapter file to write (.safetensors); checkpoints go there")
    trainer.add_argument("--data", help="a folder of audio files, or one file: mono = the user; stereo = a "
                                        "conversation, user left (default: the bundled speech)")
    trainer.add_argument("--steps", type=int, default=400, help="optimizer steps (default 400)")
    trainer.add_argument("--block", type=int, choices=range(1, 17), default=4, metavar="K",
                         help="future steps one run of the model predicts (1..16; default 4)")
    trainer.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8)")
    trainer.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate (default 0.003)")
    trainer.add_argument("--batch", type=int, default=8, help="windows per step (default 8)")
    trainer.add_argument("--window", type=int, default=24,
                         help="frames of real history before each block (default 24)")
    trainer.add_argument("--seed", type=int, default=0,
                         help="seed of the adapter's first weights and of the windows drawn (default 0)")
    trainer.add_argument("--checkpoint-every", type=int, default=100,
                         help="write the adapter every this many steps, to resume from (default 100)")
    trainer.add_argument("--resume", action="store_true", help="continue from the steps --out already holds")
    trainer.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    trainer.set_defaults(func=_train)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        return _gui(args) or 0
    return run_command(func, args, "duplexcadence")


def run_command(func, args, prog: str) -> int:
    """`func(args)` as a command runs it: bad input (files, options, devices) is the user's to
    fix, so it is one line naming `prog` and exit status 2, never a traceback; Ctrl-C is 130."""
    import soundfile

    try:
        func(args)
    except (ValueError, OSError, soundfile.SoundFileError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

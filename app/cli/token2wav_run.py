"""`duplexcadence token2wav`: speech tokens to a WAV file through Step-Audio2's token2wav,
streamed in one-second chunks as a live conversation would stream them, each chunk timed
against the one-second cadence (its SPEAK time: seconds of compute per second of audio)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine import AudioOutput, OutputFiles, check_writable, output_format

from .offline import Progress

TOKENS_PER_SECOND = 25


def read_tokens(path: str | Path, vocab: int) -> np.ndarray:
    """Speech token ids from a .npy array or a text file (numbers separated by spaces, commas
    or new lines); each must be in [0, vocab)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such tokens file")
    try:
        if path.suffix == ".npy":
            tokens = np.load(path, allow_pickle=False)
        else:
            tokens = np.array(path.read_text().replace(",", " ").split(), dtype=np.int64)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path}: not a list of integer speech tokens ({exc})") from None
    tokens = np.asarray(tokens).reshape(-1)
    if tokens.size == 0:
        raise ValueError(f"{path}: no speech tokens")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{path}: speech tokens must be integers, got {tokens.dtype}")
    bad = tokens[(tokens < 0) | (tokens >= vocab)]
    if bad.size:
        raise ValueError(f"{path}: token {int(bad[0])} is outside the model's vocabulary [0, {vocab})")
    return tokens.astype(np.int64)


def run_token2wav(args) -> None:
    import torch

    from engine import Prompt, Token2wavStream, limit_cpu_threads, load_token2wav, select_device

    check_writable(args.output)
    output_format(args.output)
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, got {args.steps}")
    device = select_device(args.device)
    limit_cpu_threads(device)
    # Locked before the model loads: a second job on the same output refuses at once.
    with OutputFiles(args.output) as out:
        model = load_token2wav(args.model, device=device, fp16=args.fp16, seed=args.seed)
        tokens = torch.from_numpy(read_tokens(args.tokens, model.flow_cfg.vocab_size)).view(1, -1).to(device)
        prompt = Prompt.read(args.prompt)
        stream = Token2wavStream(model, prompt, steps=args.steps)
        plan = stream.chunks(tokens.shape[1], TOKENS_PER_SECOND)
        rate = model.vocoder_cfg.sampling_rate
        try:
            report, samples = _stream(stream, tokens, plan, device, AudioOutput(out.temporary(args.output), rate,
                                                                                format_of=args.output))
        finally:
            stream.close()
    for i, spent, fresh in report:
        if not fresh:  # a last call with no tokens only flushes the vocoder
            print(f"chunk {i + 1}: {spent:.3f} s, flushing the vocoder")
            continue
        over = "  over the cadence" if spent > fresh else ""
        print(f"chunk {i + 1}: {spent:.3f} s for {fresh:.2f} s of speech (SPEAK {spent / fresh:.2f}){over}")
    print(f"wrote {args.output} ({samples / rate:.2f} s)")


def _stream(stream, tokens, plan, device: str, audio: AudioOutput) -> tuple[list[tuple[int, float, float]], int]:
    """Each chunk timed, clipped and written as it comes: (chunk, seconds spent, seconds of
    new speech) for each, and the samples written."""
    import torch

    report, samples = [], 0
    with audio, Progress(len(plan), unit="chunks") as progress:
        for i, (start, stop, last) in enumerate(plan):
            began = time.perf_counter()
            out = stream.push(tokens[:, start:stop], last)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            spent = time.perf_counter() - began
            fresh = (stop - start if last else stop - start - stream.lookahead) / TOKENS_PER_SECOND
            report.append((i, spent, fresh))
            chunk = np.clip(out[0].float().cpu().numpy(), -1.0, 1.0)  # before the next push reuses the output
            audio.write(chunk)
            samples += len(chunk)
            progress.update(i + 1)
    return report, samples

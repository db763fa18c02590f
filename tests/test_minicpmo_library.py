"""MiniCPM-o 4.5 in the model library, against a Hub server of ours (tests/fake_hub.py) through the real
huggingface_hub client: the repository lists it with the files its audio path needs, chosen from the index
the Hub serves (a shard holding only vision weights is skipped, one holding both is fetched whole, the
token2wav tail where the repository has it), their size asked from the Hub and a memory plan per format
from config.json; downloaded, it is complete, listed as ready and loads as this family."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import READY, REMOTE, HubClient, list_models, load_model, plan_download
from engine.families.minicpmo.layout import INDEX, TAIL_FOLDER
from engine.families.minicpmo.text_tokens import TOKENIZER_FILES
from engine.loading.library.catalogue import KNOWN, needed_files
from engine.loading.library.removal import remove_model
from engine.token2wav.token2wav_loading import FILES as TAIL_FILES
from engine.token2wav.voice_prompt import FILES as VOICE_FILES
from tests.fake_hub import FakeHub
from tests.test_model_library import cache  # noqa: F401  (a fixture: the client's cache)

REPO = "openbmb/MiniCPM-o-4_5"
TINY = Path(__file__).parent / "golden" / "minicpmo_tiny"
VISION_ONLY = "model-00004-of-00004.safetensors"


def repository(tail: bool = False, voice: bool = True) -> dict[str, bytes | Path]:
    """The tiny golden checkpoint as the Hub would hold it, with vision weights in the index: a
    vision-only shard of its own, and a vision tensor in the first (mixed) shard."""
    files: dict[str, bytes | Path] = {p.name: p for p in TINY.iterdir() if p.is_file()}
    index = json.loads((TINY / INDEX).read_text())
    index["weight_map"] |= {"vpm.encoder.layers.0.mlp.fc1.weight": VISION_ONLY,
                            "resampler.query": "model-00001-of-00003.safetensors"}
    files[INDEX] = json.dumps(index).encode()
    files[VISION_ONLY] = b"V" * 50_000
    files["README.md"] = b"# MiniCPM-o 4.5\n"
    if tail:
        files |= {f"{TAIL_FOLDER}/{name}": name.encode() * 100 for name in TAIL_FILES + (VOICE_FILES if voice else ())}
    return files


def test_only_the_audio_paths_files_are_planned_downloaded_and_loaded(cache):
    assert REPO in KNOWN
    with FakeHub() as hub:
        hub.add_repo(REPO, repository())
        client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
        assert next(e for e in list_models(cache) if e.name == REPO).state == REMOTE
        plan = plan_download(client, REPO, None, "cpu")
        shards = {p.name for p in TINY.glob("model-*.safetensors")}
        # What the loader reads: no vision-only shard, no README, no tokenizer file it does not read.
        assert set(plan.remote.files) == {"config.json", INDEX, *TOKENIZER_FILES} | shards
        assert plan.remote.files == {name: (TINY / name).stat().st_size if name != INDEX else
                                     len(repository()[INDEX]) for name in plan.remote.files}
        assert plan.weights == "bf16" and plan.memory is not None and plan.memory.fits
        int8, int4 = (plan_download(client, REPO, w, "cpu") for w in ("int8", "int4"))
        assert "quantized to int8 once, on the first int8 load, and the copy kept" in int8.note
        assert int8.remote.files == plan.remote.files
        assert int4.memory.weight_bytes < int8.memory.weight_bytes < plan.memory.weight_bytes

        folder = client.download(plan.remote)
        entry = next(e for e in list_models(cache) if e.name == REPO)
        assert entry.state == READY and entry.location == folder
        model = load_model(REPO, device="cpu")
        assert model.family == "minicpmo" and "text only" in model.notice

        # int8 is quantized once and kept; the list shows the copy and Remove takes it along
        load_model(REPO, device="cpu", weights="int8")
        entry = next(e for e in list_models(cache) if e.name == REPO)
        (copy,) = entry.kept_copies
        assert copy.weights == "int8" and copy.path.is_file()
        assert entry.weights_note("int8").startswith("int8: quantized once and kept: ")
        assert not entry.weights_note("int4")
        assert remove_model(REPO, cache) > 0 and not copy.path.exists()


def test_the_tail_comes_with_it_where_the_repository_has_it():
    files = repository(tail=True)
    index = json.loads(files[INDEX])
    needed = needed_files(set(files), {"model_type": "minicpmo"}, None, REPO,
                          lambda name: index if name == INDEX else None)
    tail = [f"{TAIL_FOLDER}/{n}" for n in TAIL_FILES + VOICE_FILES]  # the voice's front end with it
    assert [name for name in needed if name.startswith(TAIL_FOLDER)] == tail
    without_voice = repository(tail=True, voice=False)
    assert [name for name in needed_files(set(without_voice), {"model_type": "minicpmo"}, None, REPO,
                                          lambda name: index if name == INDEX else None)
            if name.startswith(TAIL_FOLDER)] == tail[:len(TAIL_FILES)]
    partial = {name for name in files if not name.endswith("hift.pt")}
    assert not any(name.startswith(TAIL_FOLDER) for name in needed_files(
        partial, {"model_type": "minicpmo"}, None, REPO, lambda name: index if name == INDEX else None))


@pytest.mark.parametrize("shard", ["../../outside.safetensors", "/etc/passwd"])
def test_an_index_naming_files_outside_the_repository_is_refused(shard):
    index = {"weight_map": {"llm.model.norm.weight": shard}}
    with pytest.raises(ValueError, match="outside the model's folder"):
        needed_files(set(repository()), {"model_type": "minicpmo"}, None, REPO, lambda name: index)

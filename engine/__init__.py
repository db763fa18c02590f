"""DuplexCadence engine: models and runtime. Never imports Qt.

Exports load on first use, so `import engine.errors` (the CLI, the GUI's first paint) does
not pay for importing torch.
"""
import importlib

_EXPORTS = {
    "AudioInputError": ".errors", "CheckpointError": ".errors", "DeviceMemoryError": ".errors",
    "HubError": ".errors",
    "DuplexModel": ".families.protocol",
    "load_model": ".loading.models", "check_persona": ".loading.models", "plan_memory": ".loading.models",
    "reporting_progress": ".loading.safetensors_files",
    "Mimi": ".families.moshi.mimi", "MimiStream": ".families.moshi.mimi", "load_mimi": ".families.moshi.mimi",
    "RuntimeOptions": ".options", "POLICIES": ".options", "TOGGLES": ".options", "WEIGHTS": ".options",
    "MAX_BLOCK": ".options",
    "DuplexSession": ".session", "FrameOutput": ".session", "Preparing": ".session",
    "Persona": ".persona",
    "CodecSession": ".families.moshi.codec_session",
    "load_model_mimi": ".families.moshi.model",
    "SAMPLE_RATE": ".period", "FRAME_SIZE": ".period", "FRAME_SECONDS": ".period",
    "select_device": ".device", "limit_cpu_threads": ".device",
    "read_audio": ".files.audio", "write_audio": ".files.audio", "check_writable": ".files.audio",
    "output_format": ".files.audio", "split_frames": ".files.audio", "AudioInput": ".files.audio",
    "AudioOutput": ".files.audio",
    "OutputFiles": ".files.outputs", "check_distinct": ".files.outputs",
    "MemoryPlan": ".loading.memory_plan",
    "HubClient": ".loading.library.hub_client", "RemoteModel": ".loading.library.hub_client",
    "free_bytes": ".loading.library.hub_client",
    "DownloadCancelled": ".loading.library.progress", "Progress": ".loading.library.progress",
    "size_text": ".loading.library.progress",
    "KNOWN_MODELS": ".loading.library.catalogue",
    "ModelEntry": ".loading.library.listing", "DownloadPlan": ".loading.library.listing",
    "list_models": ".loading.library.listing", "plan_download": ".loading.library.listing",
    "READY": ".loading.library.listing", "PARTIAL": ".loading.library.listing",
    "REMOTE": ".loading.library.listing",
    "remove_model": ".loading.library.removal",
    "missing_files": ".loading.library.local",
    "export_q8": ".weights.export", "export_int4": ".weights.export",
    "SPEECH_SAMPLE": ".files.paths",
    "DiffuPlexStats": ".families.moshi.diffuplex.stats",
    "TrainSettings": ".training.diffuplex", "train_predictor": ".training.diffuplex",
    "Token2wavStream": ".token2wav", "Prompt": ".token2wav", "load_token2wav": ".token2wav",
}
__all__ = sorted(_EXPORTS)
EXPORT_MODULES = tuple(sorted({__name__ + module for module in _EXPORTS.values()}))
"""The modules behind the exports: a freezer (the installers' PyInstaller) cannot see imports
made on first use, so it is told to collect these."""


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)

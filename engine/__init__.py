"""DuplexCadence engine: models and runtime. Never imports Qt.

Exports load on first use, so `import engine.errors` (the CLI, the GUI's first paint) does
not pay for importing torch.
"""
import importlib

_EXPORTS = {
    "AudioInputError": ".errors", "CheckpointError": ".errors",
    "DuplexModel": ".families.protocol", "load_model": ".model_loading", "reporting_progress": ".checkpoint",
    "check_persona": ".model_loading",
    "Mimi": ".families.moshi.mimi", "MimiStream": ".families.moshi.mimi", "load_mimi": ".families.moshi.mimi",
    "RuntimeOptions": ".options", "POLICIES": ".options", "TOGGLES": ".options",
    "DuplexSession": ".session", "FrameOutput": ".session", "Preparing": ".session",
    "Persona": ".persona",
    "CodecSession": ".families.moshi.codec_session",
    "DeviceMemoryError": ".errors",
    "load_model_mimi": ".families.moshi.model",
    "WEIGHTS": ".options", "MAX_BLOCK": ".options",
    "SAMPLE_RATE": ".frame", "FRAME_SIZE": ".frame", "FRAME_SECONDS": ".frame",
    "select_device": ".device", "limit_cpu_threads": ".device",
    "read_audio": ".audio_files", "write_audio": ".audio_files", "check_writable": ".audio_files",
    "output_format": ".audio_files", "split_frames": ".audio_files",
    "AudioInput": ".audio_files", "AudioOutput": ".audio_files",
    "OutputFiles": ".output_files", "check_distinct": ".output_files",
    "plan_memory": ".model_loading", "MemoryPlan": ".memory_plan",
    "HubError": ".errors", "HubClient": ".library.hub_client", "RemoteModel": ".library.hub_client",
    "free_bytes": ".library.hub_client",
    "DownloadCancelled": ".library.progress", "Progress": ".library.progress", "size_text": ".library.progress",
    "KNOWN_MODELS": ".library.catalogue",
    "ModelEntry": ".library.listing", "DownloadPlan": ".library.listing", "list_models": ".library.listing",
    "plan_download": ".library.listing", "READY": ".library.listing", "PARTIAL": ".library.listing",
    "REMOTE": ".library.listing",
    "remove_model": ".library.removal", "missing_files": ".library.local",
    "export_q8": ".q8_export",
    "export_int4": ".q8_export",
    "SPEECH_SAMPLE": ".paths",
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

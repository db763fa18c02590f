"""DuplexCadence engine: models and runtime. Never imports Qt.

Exports load on first use, so `import engine.errors` (the CLI, the GUI's first paint) does
not pay for importing torch.
"""
import importlib

_EXPORTS = {
    "AudioInputError": ".errors", "CheckpointError": ".errors",
    "DuplexModel": ".model", "load_model": ".model",
    "Mimi": ".mimi", "MimiStream": ".mimi", "load_mimi": ".mimi",
    "RuntimeOptions": ".options", "POLICIES": ".options", "TOGGLES": ".options",
    "DuplexSession": ".session", "FrameOutput": ".session", "Persona": ".session",
    "CodecSession": ".codec",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)

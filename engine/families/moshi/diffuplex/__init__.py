"""DiffuPlex: one backbone wake predicts a block of future frames, and the conversation plays a
confident prefix of it. Everything of it lives here: the predictor (LoRA + MASK embeddings,
its file), the wake over catch-up, current and masked future positions and the plan it leaves
(`wake`), the per-frame loop and its policies (`loop`, `acceptance`), what it did (`stats`:
plain data, no torch) and its self-distillation training (`training`).

Nothing is imported here, so `stats` stays importable without torch."""

"""Turn a reference-runtime (moshi 0.2.13) state dict into the official on-disk layout.

The reference splits stacked attention weights into `in_projs.{i}` / `out_projs.{i}` when it
loads; official checkpoints store them stacked as `in_proj_weight` / `out_proj.weight`.
"""
import re

import torch

_SPLIT = re.compile(r"^(.*)\.(in_projs|out_projs)\.(\d+)\.weight$")


def to_official_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    stacks: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for key, value in state.items():
        m = _SPLIT.match(key)
        if m:
            prefix, kind, idx = m.groups()
            name = f"{prefix}.in_proj_weight" if kind == "in_projs" else f"{prefix}.out_proj.weight"
            stacks.setdefault(name, []).append((int(idx), value))
        else:
            out[key] = value
    for name, parts in stacks.items():
        out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])], dim=0)
    return {k: v.detach().clone().contiguous() for k, v in out.items()}

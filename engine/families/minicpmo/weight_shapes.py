"""The audio path's tensors and the shapes `config.json` implies for them, so that a checkpoint
is checked against its configuration from the headers alone, before any tensor is read (and a
memory plan is made from the same list). Module names as in the reference's MiniCPMO:
`apm` (MiniCPMWhisperEncoder), `audio_projection_layer` (MultiModalProjector), `llm`
(Qwen3ForCausalLM) and `tts` (MiniCPMTTS, its Llama backbone and heads)."""
from __future__ import annotations

from .audio_encoder import EncoderSizes, encoder_shapes
from .qwen3_weights import Qwen3Sizes
from .speech_tokens import SpeechTokensConfig

Shapes = dict[str, tuple[int, ...]]


def _projector(prefix: str, into: int, out: int) -> Shapes:
    return {f"{prefix}linear1.weight": (out, into), f"{prefix}linear1.bias": (out,),
            f"{prefix}linear2.weight": (out, out), f"{prefix}linear2.bias": (out,)}


def _llm(config: dict) -> Shapes:
    s = Qwen3Sizes.from_config(config)
    h, q, kv = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim
    shapes: Shapes = {"llm.model.embed_tokens.weight": (s.vocab, h), "llm.model.norm.weight": (h,)}
    if not s.tied:
        shapes["llm.lm_head.weight"] = (s.vocab, h)
    for i in range(s.layers):
        p = f"llm.model.layers.{i}."
        shapes.update({f"{p}self_attn.q_proj.weight": (q, h), f"{p}self_attn.k_proj.weight": (kv, h),
                       f"{p}self_attn.v_proj.weight": (kv, h), f"{p}self_attn.o_proj.weight": (h, q),
                       f"{p}self_attn.q_norm.weight": (s.head_dim,), f"{p}self_attn.k_norm.weight": (s.head_dim,),
                       f"{p}input_layernorm.weight": (h,), f"{p}post_attention_layernorm.weight": (h,),
                       f"{p}mlp.gate_proj.weight": (s.intermediate, h), f"{p}mlp.up_proj.weight": (s.intermediate, h),
                       f"{p}mlp.down_proj.weight": (h, s.intermediate)})
    return shapes


def _tts(config: dict) -> Shapes:
    c = SpeechTokensConfig.from_config(config)
    h, hd = c.hidden_size, c.head_dim
    shapes: Shapes = {"tts.emb_text.weight": (c.num_text_tokens, h), "tts.emb_code.0.weight": (c.num_audio_tokens, h),
                      "tts.head_code.0.parametrizations.weight.original0": (c.num_audio_tokens, 1),
                      "tts.head_code.0.parametrizations.weight.original1": (c.num_audio_tokens, h),
                      "tts.model.norm.weight": (h,), **_projector("tts.projector_semantic.", c.llm_dim, h)}
    for i in range(c.num_hidden_layers):
        p = f"tts.model.layers.{i}."
        q, kv, ffn = c.num_attention_heads * hd, c.num_key_value_heads * hd, c.intermediate_size
        shapes.update({f"{p}self_attn.q_proj.weight": (q, h), f"{p}self_attn.k_proj.weight": (kv, h),
                       f"{p}self_attn.v_proj.weight": (kv, h), f"{p}self_attn.o_proj.weight": (h, q),
                       f"{p}input_layernorm.weight": (h,), f"{p}post_attention_layernorm.weight": (h,),
                       f"{p}mlp.gate_proj.weight": (ffn, h), f"{p}mlp.up_proj.weight": (ffn, h),
                       f"{p}mlp.down_proj.weight": (h, ffn)})
    return shapes


def audio_path_shapes(config: dict) -> Shapes:
    """Every tensor the audio path reads, with its shape (the TTS's speaker projector and its
    backbone's own token embedding are in the checkpoint but unused in duplex mode: not read)."""
    return {**encoder_shapes(EncoderSizes.from_config(config)), **_llm(config), **_tts(config)}

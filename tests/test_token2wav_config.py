"""Reading the numbers of Step-Audio2's token2wav YAML files without executing them."""
import pytest

from engine.errors import CheckpointError
from engine.token2wav.config import DiTConfig, EncoderConfig, read_flow_config, read_vocoder_config

FLOW_YAML = """\
# HyperPyYAML as the official files write it (object tags, references)
sample_rate: 24000
token_frame_rate: 25
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: 192
    output_type: 'mel'
    vocab_size: 6561
    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
        output_size: 512
        attention_heads: 8
        linear_units: 2048
        num_blocks: 6
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        pre_lookahead_len: 3
        num_up_blocks: 4
        up_stride: 2
        up_scale_factor: 2
        key_bias: True
    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
        inference_cfg_rate: 0.7
        estimator: !new:cosyvoice2.flow.decoder_dit.DiT
            in_channels: 320
            out_channels: 80
            mlp_ratio: 4.0
            depth: 16
            num_heads: 8
            head_dim: 64
            hidden_size: 512
"""

VOCODER_YAML = """\
sample_rate: 24000
hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: 512
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: 512
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: 8000
    center: False
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_flow_numbers_are_read_without_executing_anything(tmp_path):
    cfg = read_flow_config(_write(tmp_path, "flow.yaml", FLOW_YAML))
    assert (cfg.input_size, cfg.output_size, cfg.spk_embed_dim, cfg.vocab_size) == (512, 80, 192, 6561)
    assert cfg.inference_cfg_rate == 0.7
    assert cfg.encoder == EncoderConfig()
    assert cfg.estimator == DiTConfig()
    small = FLOW_YAML.replace("depth: 16", "depth: 2").replace("num_blocks: 6", "num_blocks: 1")
    cfg = read_flow_config(_write(tmp_path, "small.yaml", small))
    assert cfg.estimator.depth == 2 and cfg.encoder.num_blocks == 1


def test_vocoder_numbers_and_references(tmp_path):
    cfg = read_vocoder_config(_write(tmp_path, "config.yaml", VOCODER_YAML))
    assert cfg.sampling_rate == 24000 and cfg.hop == 480
    assert cfg.upsample_rates == (8, 5, 3) and cfg.resblock_dilation_sizes[2] == (1, 3, 5)
    assert cfg.source_resblock_kernel_sizes == (7, 7, 11) and cfg.f0_cond_channels == 512


@pytest.mark.parametrize("change,message", [
    (("!new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec", "!!python/object:os.system"),
     r"flow\.yaml: not a readable YAML file \(could not determine a constructor .*python/object:os\.system"),
    (("!new:cosyvoice2.flow.decoder_dit.DiT", "!new:somewhere.Else"),
     r"flow\.yaml: estimator must be !new:cosyvoice2\.flow\.decoder_dit\.DiT, found somewhere\.Else"),
    (("depth: 16", "depth: sixteen"), r"flow\.yaml: flow\.decoder\.estimator\.depth = 'sixteen', expected int"),
    (("pos_enc_layer_type: 'rel_pos_espnet'", "pos_enc_layer_type: 'abs_pos'"),
     r"flow\.encoder\.pos_enc_layer_type = 'abs_pos' is not supported"),
])
def test_flow_yaml_errors_name_the_file_and_the_problem(tmp_path, change, message):
    path = _write(tmp_path, "flow.yaml", FLOW_YAML.replace(*change))
    with pytest.raises(CheckpointError, match=message):
        read_flow_config(path)


def test_vocoder_yaml_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"feat_extractor \{'hop_size': 256\} differs"):
        read_vocoder_config(_write(tmp_path, "a.yaml", VOCODER_YAML.replace("hop_size: 480", "hop_size: 256")))
    with pytest.raises(CheckpointError, match="480 samples per mel frame"):
        read_vocoder_config(_write(tmp_path, "b.yaml", VOCODER_YAML.replace("[8, 5, 3]", "[8, 8, 3]")))
    with pytest.raises(CheckpointError, match=r"!ref <rate> names no key"):
        read_vocoder_config(_write(tmp_path, "c.yaml", VOCODER_YAML.replace("<sample_rate>", "<rate>", 1)))
    with pytest.raises(CheckpointError, match="file not found"):
        read_vocoder_config(tmp_path / "missing.yaml")

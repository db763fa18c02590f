"""Reading the numbers of Step-Audio2's token2wav YAML files without executing them."""
import pytest

from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML
from engine.errors import CheckpointError
from engine.token2wav.token2wav_config import DiTConfig, EncoderConfig, read_flow_config, read_vocoder_config


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

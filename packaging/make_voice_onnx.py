"""Writes tests/golden/voice_onnx/: two tiny ONNX models with the inputs and outputs of Step-Audio2's
front-end models, for tests that make a voice from a recording (the real ones are on the Hub only,
hundreds of MB). Their weights are seeded random numbers, also kept in weights.npz; what they
compute is stated so a test can compute it again with numpy:
- speech_tokenizer_v2_25hz.onnx: feats [1, 128, T] float, feats_length [1] int32 -> indices
  [1, T // 4] int64: a stride-4 convolution to 64 channels, the argmax over them (25 a second).
- campplus.onnx: input [1, T, 80] float -> embedding [1, 192]: the frames' mean square times a
  matrix (their mean is zero: the front end takes it out).
- escaping.onnx: a hostile campplus.onnx whose matrix is "external data" in ../outside.bin,
  outside the model's folder: onnxruntime must refuse to read it.
Needs the `onnx` package: PYTHONPATH=/tmp/onnx python3 packaging/make_voice_onnx.py"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "voice_onnx"
OPSET = 17
CODES = 64


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"conv": rng.standard_normal((CODES, 128, 4)).astype(np.float32),
            "speaker": rng.standard_normal((80, 192)).astype(np.float32) / 9}


def tokenizer(w: np.ndarray) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["feats", "conv_w"], ["codes"], kernel_shape=[4], strides=[4]),
             helper.make_node("ArgMax", ["codes"], ["indices"], axis=1, keepdims=0)]
    graph = helper.make_graph(nodes, "speech_tokenizer",
                              [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
                               helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
                              [helper.make_tensor_value_info("indices", TensorProto.INT64, [1, "N"])],
                              [numpy_helper.from_array(w, "conv_w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def speaker(w: np.ndarray) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["input", "input"], ["square"]),
             helper.make_node("ReduceMean", ["square"], ["mean"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["mean", "speaker_w"], ["embedding"])]
    graph = helper.make_graph(nodes, "campplus",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "T", 80])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 192])],
                              [numpy_helper.from_array(w, "speaker_w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def escaping(w: np.ndarray) -> onnx.ModelProto:
    model = speaker(w)
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../outside.bin"), ("offset", "0"), ("length", str(w.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    w = weights()
    np.savez(OUT / "weights.npz", **w)
    models = {"speech_tokenizer_v2_25hz.onnx": tokenizer(w["conv"]), "campplus.onnx": speaker(w["speaker"])}
    models["escaping.onnx"] = escaping(w["speaker"])
    for name, model in models.items():
        model.ir_version = 8  # readable by onnxruntime releases since 1.10
        if name != "escaping.onnx":  # the checker refuses that one, as it should
            onnx.checker.check_model(model)
        (OUT / name).write_bytes(model.SerializeToString())  # as it is: onnx.save would read the external data
        print(f"wrote {OUT / name} ({(OUT / name).stat().st_size} bytes)")


if __name__ == "__main__":
    main()

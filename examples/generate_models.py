#!/usr/bin/env python3
"""Generate the ONNX models of dinfer's example and test-fixture repositories.

Usage (from the repository root):

    python -m venv /tmp/genvenv
    /tmp/genvenv/bin/pip install -r examples/requirements.txt
    /tmp/genvenv/bin/python examples/generate_models.py

Writes two model repositories (a `config.pbtxt` beside numeric version folders holding `model.onnx`):

  examples/models/         the example repository embedded in the server
    simple/                INT32 add/sub, max_batch_size 8
    simple_string/         the same on decimal strings (TYPE_STRING)
    digits/                an MLP trained on scikit-learn's bundled 8x8 digits, with labels and samples
    simple_sequence/       a stateful accumulator (sequence batcher, direct, implicit state)
    simple_dyna_sequence/  the same under the oldest strategy; END adds the correlation id

  tests/fixtures/models/   the repository used by the integration tests
    identity_<type>/       Identity for each Triton datatype (see IDENTITY_TYPES), variable length
    add_sub_fp32_nobatch/  FP32 add/sub, max_batch_size 0
    no_config_dynamic/     no config.pbtxt: y = 2x with a dynamic first dimension
    no_config_static/      no config.pbtxt: Identity on a fixed [2, 2] INT64 tensor
    optional_input/        y = x + bias where bias has a default (initializer) and may be left out
    versioned/             versions 1, 2 and 3, each computing OUTPUT0 = INPUT0 * version
    bad_model/             a valid config.pbtxt next to a model.onnx that is not ONNX

Everything is deterministic (fixed seeds, no timestamps), so re-running the script reproduces the files.
After writing, every model is loaded with ONNX Runtime and checked against expected outputs; the script
exits non-zero if any check fails.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17; accepted by ONNX Runtime 1.30
PRODUCER = "dinfer examples/generate_models.py"

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"
FIXTURES = ROOT / "tests" / "fixtures" / "models"

# What was written and what the checks found, for the summary.
WRITTEN: list[Path] = []
CHECKS: list[tuple[str, str]] = []


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------

def tensor(name: str, elem_type: int, shape: list) -> onnx.ValueInfoProto:
    """A graph input/output; strings in `shape` are symbolic (dynamic) dimensions."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        doc_string=doc,
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    WRITTEN.append(path)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_model(model_dir: Path, version: int, model: onnx.ModelProto) -> Path:
    path = model_dir / str(version) / "model.onnx"
    write_bytes(path, model.SerializeToString())
    return path


def remove_config(model_dir: Path) -> None:
    """For the auto-complete fixtures: make sure no stale config.pbtxt is left behind."""
    cfg = model_dir / "config.pbtxt"
    if cfg.exists():
        cfg.unlink()


def io_block(kind: str, entries: list[dict]) -> str:
    """`input [ ... ]` or `output [ ... ]` in protobuf text format."""
    parts = []
    for e in entries:
        lines = [
            "  {",
            f'    name: "{e["name"]}"',
            f'    data_type: {e["data_type"]}',
            f'    dims: [ {", ".join(str(d) for d in e["dims"])} ]',
        ]
        if e.get("optional"):
            lines.append("    optional: true")
        if e.get("label_filename"):
            lines.append(f'    label_filename: "{e["label_filename"]}"')
        lines.append("  }")
        parts.append("\n".join(lines))
    return f"{kind} [\n" + ",\n".join(parts) + "\n]\n"


def config_text(name: str, max_batch_size: int, inputs: list[dict], outputs: list[dict],
                comment: str, extra: str = "") -> str:
    header = "".join(f"# {line}".rstrip() + "\n" for line in comment.strip().splitlines())
    return (
        header
        + f'name: "{name}"\n'
        + 'platform: "onnxruntime_onnx"\n'
        + f"max_batch_size: {max_batch_size}\n"
        + io_block("input", inputs)
        + io_block("output", outputs)
        + extra
    )


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def check(name: str, ok: bool, detail: str) -> None:
    CHECKS.append((name, ("ok   " if ok else "FAIL ") + detail))
    if not ok:
        print(f"check failed: {name}: {detail}", file=sys.stderr)


# --------------------------------------------------------------------------------------------------
# examples/models
# --------------------------------------------------------------------------------------------------

def gen_simple() -> None:
    d = EXAMPLES / "simple"
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        "simple",
        [tensor("INPUT0", TensorProto.INT32, ["batch", 16]),
         tensor("INPUT1", TensorProto.INT32, ["batch", 16])],
        [tensor("OUTPUT0", TensorProto.INT32, ["batch", 16]),
         tensor("OUTPUT1", TensorProto.INT32, ["batch", 16])],
    )
    path = write_model(d, 1, make_model(graph, "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32)"))
    io = lambda n: {"name": n, "data_type": "TYPE_INT32", "dims": [16]}
    write_text(d / "config.pbtxt", config_text(
        "simple", 8, [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")],
        "Element-wise sum and difference of two INT32 vectors of 16 elements.\n"
        "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.\n"
        "The ONNX model's shapes are [batch, 16]; dims below leave the batch dimension out.\n"
        "Requests that arrive while the instances are busy run together (dynamic batching); one\n"
        "ONNX Runtime thread per run suits a model this small.",
        extra="""dynamic_batching { }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
""",
    ))

    s = session(path)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    o0, o1 = s.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    check("simple", o0.dtype == np.int32 and np.array_equal(o0, a + b) and np.array_equal(o1, a - b),
          "add/sub on INT32 [2,16]")


def gen_simple_string() -> None:
    d = EXAMPLES / "simple_string"
    S, I = TensorProto.STRING, TensorProto.INT32
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["INPUT0"], ["in0_i32"], to=I, name="parse0"),
            helper.make_node("Cast", ["INPUT1"], ["in1_i32"], to=I, name="parse1"),
            helper.make_node("Add", ["in0_i32", "in1_i32"], ["sum_i32"], name="add"),
            helper.make_node("Sub", ["in0_i32", "in1_i32"], ["diff_i32"], name="sub"),
            helper.make_node("Cast", ["sum_i32"], ["OUTPUT0"], to=S, name="format0"),
            helper.make_node("Cast", ["diff_i32"], ["OUTPUT1"], to=S, name="format1"),
        ],
        "simple_string",
        [tensor("INPUT0", S, ["batch", 16]), tensor("INPUT1", S, ["batch", 16])],
        [tensor("OUTPUT0", S, ["batch", 16]), tensor("OUTPUT1", S, ["batch", 16])],
    )
    path = write_model(d, 1, make_model(
        graph, "Strings holding decimal integers: OUTPUT0 = str(int(INPUT0) + int(INPUT1)), "
               "OUTPUT1 = str(int(INPUT0) - int(INPUT1))"))
    io = lambda n: {"name": n, "data_type": "TYPE_STRING", "dims": [16]}
    write_text(d / "config.pbtxt", config_text(
        "simple_string", 8, [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")],
        "Like `simple`, on strings: every element is the decimal text of an integer (e.g. \"42\", \"-7\").\n"
        "OUTPUT0 / OUTPUT1 are the decimal text of the sum / difference (computed in INT32).\n"
        "TYPE_STRING is the BYTES datatype on the wire.",
    ))

    s = session(path)
    a = np.arange(-8, 24, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    to_str = lambda x: np.array([[str(v) for v in row] for row in x], dtype=object)
    o0, o1 = s.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": to_str(a), "INPUT1": to_str(b)})
    check("simple_string", np.array_equal(o0, to_str(a + b)) and np.array_equal(o1, to_str(a - b)),
          "decimal-string add/sub on [2,16]")


DIGIT_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def gen_digits() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    d = EXAMPLES / "digits"
    X, y = load_digits(return_X_y=True)  # X: (1797, 64) pixel intensities 0..16, y: 0..9
    X = X.astype(np.float32)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=0, stratify=y)

    # Train on pixels / 16; the scaling is folded into the first layer's weights below,
    # so the exported model takes the raw 0..16 values.
    clf = MLPClassifier(hidden_layer_sizes=(64,), activation="relu", solver="adam",
                        alpha=1e-4, max_iter=500, random_state=0)
    clf.fit(X_train / 16.0, y_train)
    assert list(clf.classes_) == list(range(10))
    sk_acc = float(clf.score(X_test / 16.0, y_test))

    w1 = (clf.coefs_[0] / 16.0).astype(np.float32)     # (64, 64)
    b1 = clf.intercepts_[0].astype(np.float32)          # (64,)
    w2 = clf.coefs_[1].astype(np.float32)               # (64, 10)
    b2 = clf.intercepts_[1].astype(np.float32)          # (10,)
    F = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W1"], ["h1_mm"], name="dense1"),
            helper.make_node("Add", ["h1_mm", "B1"], ["h1_pre"], name="bias1"),
            helper.make_node("Relu", ["h1_pre"], ["h1"], name="relu1"),
            helper.make_node("MatMul", ["h1", "W2"], ["logits_mm"], name="dense2"),
            helper.make_node("Add", ["logits_mm", "B2"], ["logits"], name="bias2"),
            helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1, name="softmax"),
        ],
        "digits_mlp",
        [tensor("input", F, ["batch", 64])],
        [tensor("probabilities", F, ["batch", 10])],
        initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
                     numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")],
    )
    path = write_model(d, 1, make_model(
        graph, "MLP 64-64(relu)-10(softmax) trained on scikit-learn's 8x8 digits; "
               "input: 64 pixel intensities 0..16 (row-major), output: class probabilities"))
    write_text(d / "labels.txt", "".join(n + "\n" for n in DIGIT_NAMES))
    write_text(d / "config.pbtxt", config_text(
        "digits", 64,
        [{"name": "input", "data_type": "TYPE_FP32", "dims": [64]}],
        [{"name": "probabilities", "data_type": "TYPE_FP32", "dims": [10], "label_filename": "labels.txt"}],
        "Handwritten digit classifier: a small MLP (64 -> 64 ReLU -> 10 softmax) trained on\n"
        "scikit-learn's bundled 8x8 digits data set (examples/generate_models.py).\n"
        "input: the 64 pixels of an 8x8 image, row-major, intensities 0..16.\n"
        "probabilities: one probability per class; labels.txt names class i on line i+1,\n"
        "so the classification extension can answer \"<prob>:<index>:<label>\".",
    ))

    s = session(path)
    probs = s.run(["probabilities"], {"input": X_test})[0]
    pred = probs.argmax(axis=1)
    ort_acc = float((pred == y_test).mean())
    sk_probs = clf.predict_proba(X_test / 16.0)
    max_diff = float(np.abs(probs - sk_probs).max())

    # 8 held-out samples the model classifies correctly, with distinct labels where possible.
    chosen: list[int] = []
    seen: set[int] = set()
    for i in range(len(y_test)):
        if pred[i] == y_test[i] and int(y_test[i]) not in seen:
            chosen.append(i)
            seen.add(int(y_test[i]))
        if len(chosen) == 8:
            break
    samples = {
        "inputs": [[float(v) for v in X_test[i]] for i in chosen],
        "labels": [int(y_test[i]) for i in chosen],
    }
    # One sample per line keeps the file readable and diff-friendly.
    text = ('{\n  "description": "8 held-out samples of scikit-learn\'s digits data set (8x8 pixels, '
            'intensities 0..16, row-major) that the digits model classifies correctly, and their labels",\n'
            '  "inputs": [\n'
            + ",\n".join("    " + json.dumps(row) for row in samples["inputs"])
            + "\n  ],\n  \"labels\": " + json.dumps(samples["labels"]) + "\n}\n")
    write_text(d / "samples.json", text)

    reloaded = json.loads((d / "samples.json").read_text())
    sp = s.run(["probabilities"], {"input": np.array(reloaded["inputs"], dtype=np.float32)})[0]
    samples_ok = list(sp.argmax(axis=1)) == reloaded["labels"] and len(reloaded["labels"]) == 8
    size_kb = path.stat().st_size / 1024
    check("digits", ort_acc >= 0.9 and abs(ort_acc - sk_acc) < 1e-9 and max_diff < 1e-4
          and samples_ok and size_kb < 100,
          f"held-out accuracy {ort_acc:.4f} on {len(y_test)} test images (sklearn {sk_acc:.4f}), "
          f"max |p_onnx - p_sklearn| = {max_diff:.1e}, samples.json labels {reloaded['labels']} "
          f"all correct={samples_ok}, {size_kb:.1f} KiB")
    global DIGITS_ACCURACY
    DIGITS_ACCURACY = (ort_acc, len(y_test), len(y_train))


DIGITS_ACCURACY: tuple[float, int, int] | None = None


# --------------------------------------------------------------------------------------------------
# tests/fixtures/models
# --------------------------------------------------------------------------------------------------

# Triton datatype -> (name suffix, config TYPE_*, ONNX element type, numpy dtype or None for bf16)
#
# identity_bf16 runs in dinfer through libortshim (ONNX Runtime's C API): onnxruntime-node 1.30.0's own API
# refuses to create a session for any model with a bfloat16 input or output ("Unsupported data type: 16"
# while reading the session's metadata). INCLUDE_BF16 = False leaves it out.
INCLUDE_BF16 = True
IDENTITY_TYPES = [
    ("bool", "TYPE_BOOL", TensorProto.BOOL, np.bool_),
    ("uint8", "TYPE_UINT8", TensorProto.UINT8, np.uint8),
    ("uint16", "TYPE_UINT16", TensorProto.UINT16, np.uint16),
    ("uint32", "TYPE_UINT32", TensorProto.UINT32, np.uint32),
    ("uint64", "TYPE_UINT64", TensorProto.UINT64, np.uint64),
    ("int8", "TYPE_INT8", TensorProto.INT8, np.int8),
    ("int16", "TYPE_INT16", TensorProto.INT16, np.int16),
    ("int32", "TYPE_INT32", TensorProto.INT32, np.int32),
    ("int64", "TYPE_INT64", TensorProto.INT64, np.int64),
    ("fp16", "TYPE_FP16", TensorProto.FLOAT16, np.float16),
    ("fp32", "TYPE_FP32", TensorProto.FLOAT, np.float32),
    ("fp64", "TYPE_FP64", TensorProto.DOUBLE, np.float64),
    ("string", "TYPE_STRING", TensorProto.STRING, object),
]
if INCLUDE_BF16:
    IDENTITY_TYPES.insert(10, ("bf16", "TYPE_BF16", TensorProto.BFLOAT16, None))


def identity_input(suffix: str, dtype) -> np.ndarray:
    if suffix == "bool":
        return np.array([[True, False, True], [False, False, True]])
    if suffix == "string":
        return np.array([["a", "", "hello world"], ["ünïcödé", "0", "xyz"]], dtype=object)
    if np.issubdtype(dtype, np.unsignedinteger):
        info = np.iinfo(dtype)
        return np.array([[0, 1, info.max], [2, 3, info.max - 1]], dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.array([[info.min, -1, 0], [1, 2, info.max]], dtype=dtype)
    return np.array([[-1.5, 0.0, 0.25], [3.0, -2.0, 1024.0]], dtype=dtype)


def gen_identity() -> None:
    for suffix, ttype, etype, dtype in IDENTITY_TYPES:
        name = f"identity_{suffix}"
        d = FIXTURES / name
        graph = helper.make_graph(
            [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")],
            name,
            [tensor("INPUT0", etype, ["batch", "length"])],
            [tensor("OUTPUT0", etype, ["batch", "length"])],
        )
        path = write_model(d, 1, make_model(graph, f"OUTPUT0 = INPUT0 ({ttype[5:]}), variable length"))
        write_text(d / "config.pbtxt", config_text(
            name, 8,
            [{"name": "INPUT0", "data_type": ttype, "dims": [-1]}],
            [{"name": "OUTPUT0", "data_type": ttype, "dims": [-1]}],
            f"Test fixture: returns INPUT0 unchanged as OUTPUT0 ({ttype}).\n"
            "dims [ -1 ]: any number of elements per batch item; up to 8 items per batch.",
        ))

        s = session(path)
        if dtype is None:
            # bfloat16 has no numpy dtype: feed the raw 16-bit patterns through an OrtValue and
            # compare the bytes that come back.
            bits = np.array([[0x3FC0, 0x0000, 0xBF80], [0x4049, 0x7F80, 0xC2F7]], dtype=np.uint16)  # 1.5 0 -1 ...
            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
            out = s.run_with_ort_values(["OUTPUT0"], {"INPUT0": value})[0]
            got = ctypes.string_at(out.data_ptr(), out.tensor_size_in_bytes())
            ok = out.data_type() == "tensor(bfloat16)" and list(out.shape()) == [2, 3] and got == bits.tobytes()
        else:
            x = identity_input(suffix, dtype)
            out = s.run(["OUTPUT0"], {"INPUT0": x})[0]
            ok = out.shape == x.shape and np.array_equal(out, x) and (dtype is object or out.dtype == x.dtype)
        check(name, ok, f"Identity round trip of a [2,3] {ttype[5:]} tensor")


def gen_add_sub_nobatch() -> None:
    name = "add_sub_fp32_nobatch"
    d = FIXTURES / name
    F = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub")],
        name,
        [tensor("INPUT0", F, [4]), tensor("INPUT1", F, [4])],
        [tensor("OUTPUT0", F, [4]), tensor("OUTPUT1", F, [4])],
    )
    path = write_model(d, 1, make_model(graph, "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32 [4])"))
    io = lambda n: {"name": n, "data_type": "TYPE_FP32", "dims": [4]}
    write_text(d / "config.pbtxt", config_text(
        name, 0, [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")],
        "Test fixture: FP32 sum and difference of two 4-element vectors, without batching\n"
        "(max_batch_size 0: the request shape is exactly [4]).",
    ))

    s = session(path)
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([0.5, -1, 10, 4], np.float32)
    o0, o1 = s.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    check(name, np.array_equal(o0, a + b) and np.array_equal(o1, a - b), "add/sub on FP32 [4]")


def gen_no_config_dynamic() -> None:
    name = "no_config_dynamic"
    d = FIXTURES / name
    F = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"], name="double")],
        name,
        [tensor("x", F, ["N", 3])],
        [tensor("y", F, ["N", 3])],
        initializer=[numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")],
    )
    path = write_model(d, 1, make_model(graph, "y = 2 * x; no config.pbtxt (auto-complete: first dim dynamic)"))
    remove_config(d)

    s = session(path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = s.run(["y"], {"x": x})[0]
    check(name, np.array_equal(y, 2 * x) and not (d / "config.pbtxt").exists(),
          "y = 2x on [2,3]; no config.pbtxt")


def gen_no_config_static() -> None:
    name = "no_config_static"
    d = FIXTURES / name
    I64 = TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b"], name="identity")],
        name,
        [tensor("a", I64, [2, 2])],
        [tensor("b", I64, [2, 2])],
    )
    path = write_model(d, 1, make_model(graph, "b = a on INT64 [2,2]; no config.pbtxt (auto-complete: static)"))
    remove_config(d)

    s = session(path)
    a = np.array([[1, -2], [3, 2**40]], dtype=np.int64)
    b = s.run(["b"], {"a": a})[0]
    check(name, np.array_equal(b, a) and not (d / "config.pbtxt").exists(),
          "Identity on INT64 [2,2]; no config.pbtxt")


OPTIONAL_BIAS_DEFAULT = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)


def gen_optional_input() -> None:
    name = "optional_input"
    d = FIXTURES / name
    F = TensorProto.FLOAT
    # "bias" is both a graph input and an initializer: ONNX Runtime uses the initializer's value
    # (broadcast over the batch) when the caller does not feed "bias", and the fed value when it does.
    # Caveat for the server: onnxruntime-node 1.30.0 lists only "x" in session.inputNames and silently
    # ignores a fed "bias" (its binding feeds only the required inputs), so through that binding the
    # default is always used; the Python and C APIs do let the caller override it.
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"], name="add_bias")],
        name,
        [tensor("x", F, ["batch", 4]), tensor("bias", F, ["batch", 4])],
        [tensor("y", F, ["batch", 4])],
        initializer=[numpy_helper.from_array(OPTIONAL_BIAS_DEFAULT, "bias")],
    )
    path = write_model(d, 1, make_model(graph, "y = x + bias; bias is optional and defaults to [1, 2, 3, 4]"))
    write_text(d / "config.pbtxt", config_text(
        name, 8,
        [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
         {"name": "bias", "data_type": "TYPE_FP32", "dims": [4], "optional": True}],
        [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}],
        "Test fixture: y = x + bias. \"bias\" may be left out of a request: the ONNX model holds an\n"
        "initializer of the same name, [[1, 2, 3, 4]], which ONNX Runtime uses (broadcast over the\n"
        "batch) when the input is not fed.",
    ))

    s = session(path)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    bias = np.full((3, 4), 10.0, dtype=np.float32)
    y_default = s.run(["y"], {"x": x})[0]
    y_fed = s.run(["y"], {"x": x, "bias": bias})[0]
    check(name, np.array_equal(y_default, x + OPTIONAL_BIAS_DEFAULT) and np.array_equal(y_fed, x + bias),
          "y = x + default bias when omitted, x + bias when fed ([3,4])")


def gen_versioned() -> None:
    name = "versioned"
    d = FIXTURES / name
    F = TensorProto.FLOAT
    paths = {}
    for version in (1, 2, 3):
        graph = helper.make_graph(
            [helper.make_node("Mul", ["INPUT0", "factor"], ["OUTPUT0"], name="scale")],
            f"{name}_v{version}",
            [tensor("INPUT0", F, [4])],
            [tensor("OUTPUT0", F, [4])],
            initializer=[numpy_helper.from_array(np.array(float(version), dtype=np.float32), "factor")],
        )
        paths[version] = write_model(d, version, make_model(graph, f"OUTPUT0 = INPUT0 * {version} (version {version})"))
    io = lambda n: {"name": n, "data_type": "TYPE_FP32", "dims": [4]}
    write_text(d / "config.pbtxt", config_text(
        name, 0, [io("INPUT0")], [io("OUTPUT0")],
        "Test fixture: versions 1, 2 and 3; version N computes OUTPUT0 = INPUT0 * N.\n"
        "No version_policy here, so the default applies (latest { num_versions: 1 }: only version 3\n"
        "is served); tests override the policy to exercise the others.",
    ))

    ok = True
    x = np.array([1, -2, 0.5, 8], np.float32)
    for version, path in paths.items():
        out = session(path).run(["OUTPUT0"], {"INPUT0": x})[0]
        ok = ok and np.array_equal(out, x * version)
    check(name, ok, "versions 1, 2, 3 compute INPUT0 * version")


def gen_bad_model() -> None:
    name = "bad_model"
    d = FIXTURES / name
    rng = np.random.default_rng(1234)
    garbage = b"this is not an ONNX model\n" + rng.integers(0, 256, size=230, dtype=np.uint8).tobytes()
    path = d / "1" / "model.onnx"
    write_bytes(path, garbage)
    io = lambda n: {"name": n, "data_type": "TYPE_FP32", "dims": [4]}
    write_text(d / "config.pbtxt", config_text(
        name, 0, [io("INPUT0")], [io("OUTPUT0")],
        "Test fixture: this configuration is valid, but 1/model.onnx is not an ONNX model,\n"
        "so loading must fail (model state UNAVAILABLE with a reason).",
    ))

    try:
        session(path)
        failed, reason = False, "ONNX Runtime loaded it"
    except Exception as e:  # noqa: BLE001 - any load error is what we want
        failed, reason = True, type(e).__name__
    check(name, failed, f"ONNX Runtime refuses to load it ({reason})")


# --------------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------------
# sequence models (examples/models): accumulators with implicit state
# --------------------------------------------------------------------------------------------------

def accumulator_graph(name: str, with_end_corrid: bool) -> onnx.ModelProto:
    """acc = START ? INPUT : INPUT_STATE + INPUT (kept as is where READY is 0); OUTPUT_STATE = acc.
    With `with_end_corrid`, OUTPUT = acc + END * CORRID, else OUTPUT = acc."""
    b = "batch"
    inputs = [
        tensor("INPUT", TensorProto.INT32, [b, 1]),
        tensor("START", TensorProto.INT32, [b, 1]),
        tensor("READY", TensorProto.INT32, [b, 1]),
        tensor("INPUT_STATE", TensorProto.INT32, [b, 1]),
    ]
    nodes = [
        helper.make_node("Cast", ["START"], ["start_b"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["READY"], ["ready_b"], to=TensorProto.BOOL),
        helper.make_node("Add", ["INPUT_STATE", "INPUT"], ["summed"]),
        helper.make_node("Where", ["start_b", "INPUT", "summed"], ["stepped"]),
        helper.make_node("Where", ["ready_b", "stepped", "INPUT_STATE"], ["acc"]),
        helper.make_node("Identity", ["acc"], ["OUTPUT_STATE"]),
    ]
    if with_end_corrid:
        inputs += [tensor("END", TensorProto.INT32, [b, 1]), tensor("CORRID", TensorProto.UINT64, [b, 1])]
        nodes += [
            helper.make_node("Cast", ["CORRID"], ["corrid_i"], to=TensorProto.INT32),
            helper.make_node("Mul", ["END", "corrid_i"], ["end_corrid"]),
            helper.make_node("Add", ["acc", "end_corrid"], ["OUTPUT"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["acc"], ["OUTPUT"]))
    outputs = [tensor("OUTPUT", TensorProto.INT32, [b, 1]), tensor("OUTPUT_STATE", TensorProto.INT32, [b, 1])]
    return make_model(helper.make_graph(nodes, name, inputs, outputs), name)


SEQUENCE_STATE = """  state [
    {
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
    }
  ]
"""


def run_accumulator(sess, values, corrid=0, with_end=False):
    state = np.zeros((1, 1), dtype=np.int32)
    out = []
    for i, v in enumerate(values):
        feeds = {
            "INPUT": np.array([[v]], dtype=np.int32),
            "START": np.array([[1 if i == 0 else 0]], dtype=np.int32),
            "READY": np.array([[1]], dtype=np.int32),
            "INPUT_STATE": state,
        }
        if with_end:
            feeds["END"] = np.array([[1 if i == len(values) - 1 else 0]], dtype=np.int32)
            feeds["CORRID"] = np.array([[corrid]], dtype=np.uint64)
        o, state = sess.run(["OUTPUT", "OUTPUT_STATE"], feeds)
        out.append(int(o[0, 0]))
    return out


def gen_simple_sequence() -> None:
    d = EXAMPLES / "simple_sequence"
    path = write_model(d, 1, accumulator_graph("simple_sequence", with_end_corrid=False))
    write_text(d / "config.pbtxt", config_text(
        "simple_sequence", 8,
        [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [1]}],
        [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [1]}],
        """A stateful accumulator for the sequence batcher: the first request of a sequence (START)
sets the sum to its INPUT, each later request adds its INPUT; OUTPUT is the running sum.
The sum is carried between requests as implicit state (INPUT_STATE -> OUTPUT_STATE).""",
        extra="""sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
""" + SEQUENCE_STATE + """}
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    ))
    got = run_accumulator(session(path), [11, 7, 5, 3, 2, 0, 1])
    check("simple_sequence", got == [11, 18, 23, 26, 28, 28, 29], f"running sums {got}")


def gen_simple_dyna_sequence() -> None:
    d = EXAMPLES / "simple_dyna_sequence"
    path = write_model(d, 1, accumulator_graph("simple_dyna_sequence", with_end_corrid=True))
    write_text(d / "config.pbtxt", config_text(
        "simple_dyna_sequence", 8,
        [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [1]}],
        [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [1]}],
        """The accumulator of simple_sequence under the oldest-first sequence batcher: OUTPUT is the
running sum, and the last request of a sequence (END) adds the sequence's correlation id.""",
        extra="""sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 0 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
""" + SEQUENCE_STATE + """}
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    ))
    got = run_accumulator(session(path), [11, 7, 5, 3, 2, 0, 1], corrid=1000, with_end=True)
    check("simple_dyna_sequence", got == [11, 18, 23, 26, 28, 28, 1029], f"running sums, END adds CORRID {got}")


# --------------------------------------------------------------------------------------------------
# bench/models: the MLP of the batching benchmark
# --------------------------------------------------------------------------------------------------

BENCH = ROOT / "bench" / "models"


def gen_bench_mlp() -> None:
    """An MLP 784-1024-1024-10 (FP32, ReLU, fixed random weights) for `./dinfer bench --mlp`; two configs
    over the same file: `mlp` with dynamic batching, `mlp_nobatch` without (its version folder is a link)."""
    rng = np.random.default_rng(7)
    sizes = [784, 1024, 1024, 10]
    inits, nodes, prev = [], [], "input"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = np.zeros(n_out, dtype=np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"]))
        out = "logits" if i == len(sizes) - 2 else f"h{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"a{i}" if out != "logits" else out]))
        if out != "logits":
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        prev = out
    graph = helper.make_graph(nodes, "mlp", [tensor("input", TensorProto.FLOAT, ["batch", 784])],
                              [tensor("logits", TensorProto.FLOAT, ["batch", 10])], initializer=inits)
    d = BENCH / "mlp"
    path = write_model(d, 1, make_model(graph, "MLP 784-1024-1024-10 with fixed random weights (benchmark)"))
    io = {"in": [{"name": "input", "data_type": "TYPE_FP32", "dims": [784]}],
          "out": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}]}
    write_text(d / "config.pbtxt", config_text(
        "mlp", 64, io["in"], io["out"], "MLP 784-1024-1024-10 for the batching benchmark, with dynamic batching.",
        extra="dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"))
    nb = BENCH / "mlp_nobatch"
    nb.mkdir(parents=True, exist_ok=True)
    link = nb / "1"
    if not link.is_symlink():
        if link.exists():
            import shutil
            shutil.rmtree(link)
        link.symlink_to("../mlp/1", target_is_directory=True)
    write_text(nb / "config.pbtxt", config_text(
        "mlp_nobatch", 64, io["in"], io["out"],
        "The same MLP (version folder linked to mlp/1) without dynamic batching: one request per run.",
        extra="instance_group [ { count: 1 kind: KIND_CPU } ]\n"))
    x = rng.standard_normal((4, 784)).astype(np.float32)
    y = session(path).run(["logits"], {"input": x})[0]
    ref = x
    for i in range(3):
        ref = ref @ numpy_helper.to_array(inits[2 * i]) + numpy_helper.to_array(inits[2 * i + 1])
        if i < 2:
            ref = np.maximum(ref, 0)
    check("bench mlp", y.shape == (4, 10) and np.allclose(y, ref, atol=1e-4), "784-1024-1024-10 matches numpy")


def main() -> int:
    print(f"numpy {np.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}; "
          f"opset {OPSET}, ir_version {IR_VERSION}")
    gen_simple()
    gen_simple_string()
    gen_digits()
    gen_simple_sequence()
    gen_simple_dyna_sequence()
    gen_identity()
    gen_add_sub_nobatch()
    gen_no_config_dynamic()
    gen_no_config_static()
    gen_optional_input()
    gen_versioned()
    gen_bad_model()
    gen_bench_mlp()

    print("\nfiles written:")
    for p in WRITTEN:
        print(f"  {p.stat().st_size:>8} B  {p.relative_to(ROOT)}")
    print("\nself-checks (ONNX Runtime):")
    width = max(len(n) for n, _ in CHECKS)
    for n, result in CHECKS:
        print(f"  {n:<{width}}  {result}")
    if DIGITS_ACCURACY:
        acc, n_test, n_train = DIGITS_ACCURACY
        print(f"\ndigits: held-out accuracy {acc * 100:.2f}% on {n_test} test images "
              f"(trained on {n_train})")
    failed = [n for n, r in CHECKS if r.startswith("FAIL")]
    if failed:
        print(f"\n{len(failed)} check(s) FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\nall {len(CHECKS)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

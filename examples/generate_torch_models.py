#!/usr/bin/env python3
"""Generate the TorchScript (`model.pt`) models of dinfer's PyTorch example and test-fixture repositories.

Usage (from the repository root):

    python -m venv /tmp/torchgen
    /tmp/torchgen/bin/pip install -r examples/requirements-torch.txt
    /tmp/torchgen/bin/python examples/generate_torch_models.py

Writes two model repositories (a `config.pbtxt` beside numeric version folders holding `model.pt`):

  examples/pytorch_models/     PyTorch examples, served beside examples/models
    digits_torch/              an MLP (64 -> 64 ReLU -> 10 softmax) trained with torch on scikit-learn's
                               bundled 8x8 digits, traced; INPUT__0 / OUTPUT__0, dynamic batching

  tests/fixtures/pytorch_models/   the repository used by the PyTorch backend tests
    add_sub_pt/            forward(a, b) -> (a + b, a - b); inputs named after forward's arguments and
                           listed in another order, outputs OUTPUT__<index> listed in another order
    sub_index_pt/          forward(x, y) -> x - y; inputs INPUT__1, INPUT__0 (<name>__<index>)
    ordered_pt/            forward(x, y) -> (x * 2, y * 3); names that follow no convention: config order;
                           dynamic batching with a preferred batch of 4 (and a long delay)
    dict_pt/               forward(inputs: Dict[str, Tensor]) -> inputs["scale"] * inputs["value"]
    identity_types_pt/     forward(a, ..., f) -> (a, ..., f) on FP32, FP16, INT64, INT8, UINT8 and BOOL
    add_nobatch_pt/        a + b on [4] FP32 without batching (max_batch_size 0)
    sequence_pt/           a running INT32 sum under the sequence batcher; START arrives as forward's argument
    checked_pt/            fails at run time (TorchScript raise) when an input element is negative
    bytes_pt/              a TYPE_STRING input, which the backend refuses at load
    wrong_count_pt/        the config names one input, forward takes two: refused at load
    bad_model_pt/          a model.pt that is not TorchScript

Training uses fixed seeds (the archives still differ byte for byte between runs: torch writes a random
serialization id into each); after writing, each model is loaded back with torch.jit.load and
checked against expected outputs, and the script exits non-zero if a check fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "pytorch_models"
FIXTURES = ROOT / "tests" / "fixtures" / "pytorch_models"
DIGIT_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]

CHECKS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> None:
    CHECKS.append((name, ok, detail))
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def save(module: torch.jit.ScriptModule, model_dir: Path, version: int = 1) -> Path:
    path = model_dir / str(version) / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    module.save(str(path))
    return path


def io_block(kind: str, entries: list[tuple[str, str, list[int]]]) -> str:
    lines = [f"{kind} ["]
    lines.append(",\n".join(f'  {{ name: "{n}" data_type: {t} dims: [ {", ".join(map(str, d))} ] }}'
                            for n, t, d in entries))
    lines.append("]")
    return "\n".join(lines) + "\n"


def config(name: str, comment: str, max_batch_size: int, inputs, outputs, extra: str = "") -> str:
    header = "".join(f"# {line}".rstrip() + "\n" for line in comment.strip().splitlines())
    return (header + f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {max_batch_size}\n'
            + io_block("input", inputs) + io_block("output", outputs) + extra)


# --------------------------------------------------------------------------------------------------
# examples/pytorch_models/digits_torch
# --------------------------------------------------------------------------------------------------

class DigitsMlp(torch.nn.Module):
    """64 pixel intensities 0..16 -> class probabilities; the 1/16 scaling is part of the model."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.hidden(pixels / 16.0))
        return torch.softmax(self.out(h), dim=-1)


def gen_digits_torch() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)

    torch.manual_seed(0)
    model = DigitsMlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = torch.from_numpy(X_train), torch.from_numpy(y_train).long()
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            probs = model(xt[idx])
            loss = torch.nn.functional.nll_loss(torch.log(probs + 1e-9), yt[idx])
            loss.backward()
            opt.step()
    model.eval()
    traced = torch.jit.trace(model, torch.zeros(1, 64))
    d = EXAMPLES / "digits_torch"
    path = save(traced, d)
    write_text(d / "labels.txt", "".join(n + "\n" for n in DIGIT_NAMES))
    write_text(d / "config.pbtxt", config(
        "digits_torch",
        "Handwritten digit classifier in TorchScript: an MLP (64 -> 64 ReLU -> 10 softmax) trained with\n"
        "torch on scikit-learn's bundled 8x8 digits data set and traced (examples/generate_torch_models.py).\n"
        "INPUT__0: the 64 pixels of an 8x8 image, row-major, intensities 0..16.\n"
        "OUTPUT__0: one probability per class; labels.txt names class i on line i+1.",
        64,
        [("INPUT__0", "TYPE_FP32", [64])],
        [("OUTPUT__0", "TYPE_FP32", [10])],
        "dynamic_batching { }\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n"
        "# One torch thread: the model is small, and the cores serve HTTP too.\n"
        'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }\n'
        'parameters { key: "INTER_OP_THREAD_COUNT" value: { string_value: "1" } }\n',
    ).replace('dims: [ 10 ] }', 'dims: [ 10 ] label_filename: "labels.txt" }'))

    loaded = torch.jit.load(str(path))
    with torch.no_grad():
        pred = loaded(torch.from_numpy(X_test)).argmax(dim=1).numpy()
    acc = float((pred == y_test).mean())
    # The same 8 held-out samples as examples/models/digits/samples.json, with the labels this model gives.
    samples = json.loads((ROOT / "examples" / "models" / "digits" / "samples.json").read_text())
    with torch.no_grad():
        sp = loaded(torch.tensor(samples["inputs"], dtype=torch.float32)).argmax(dim=1).tolist()
    size_kb = path.stat().st_size / 1024
    check("digits_torch", acc >= 0.9 and sp == samples["labels"] and size_kb < 100,
          f"held-out accuracy {acc:.4f} on {len(y_test)} test images, samples.json labels {samples['labels']} "
          f"predicted {sp}, {size_kb:.1f} KiB")


# --------------------------------------------------------------------------------------------------
# tests/fixtures/pytorch_models
# --------------------------------------------------------------------------------------------------

class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a - b


class Sub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - y


class Ordered(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return x * 2, y * 3


class DictInput(torch.nn.Module):
    def forward(self, inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["scale"] * inputs["value"]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Identities(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, e: torch.Tensor,
                f: torch.Tensor):
        return a, b, c, d, e, f


class Accumulate(torch.nn.Module):
    """A running sum per sequence: START resets it."""

    def __init__(self) -> None:
        super().__init__()
        self.total = torch.zeros(1, 1, dtype=torch.int32)

    def forward(self, INPUT: torch.Tensor, START: torch.Tensor) -> torch.Tensor:
        self.total = torch.where(START != 0, torch.zeros_like(INPUT), self.total) + INPUT
        return self.total


class Add(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class Checked(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x.sqrt()


IDENTITY_TYPES = {
    "fp32": ("TYPE_FP32", torch.float32),
    "fp16": ("TYPE_FP16", torch.float16),
    "int64": ("TYPE_INT64", torch.int64),
    "int8": ("TYPE_INT8", torch.int8),
    "uint8": ("TYPE_UINT8", torch.uint8),
    "bool": ("TYPE_BOOL", torch.bool),
}


def gen_fixtures() -> None:
    f32 = "TYPE_FP32"
    m = save(torch.jit.script(AddSub()), FIXTURES / "add_sub_pt")
    write_text(FIXTURES / "add_sub_pt" / "config.pbtxt", config(
        "add_sub_pt",
        "forward(a, b) -> (a + b, a - b). The inputs carry forward's argument names (listed b first), the\n"
        "outputs the <name>__<index> convention (listed OUTPUT__1 first): both map by name, not position.",
        8, [("b", f32, [4]), ("a", f32, [4])], [("OUTPUT__1", f32, [4]), ("OUTPUT__0", f32, [4])],
        "instance_group [ { kind: KIND_CPU count: 2 } ]\n"))
    s, d = torch.jit.load(str(m))(torch.tensor([[1.0, 2, 3, 4]]), torch.tensor([[10.0, 20, 30, 40]]))
    check("add_sub_pt", s.tolist() == [[11, 22, 33, 44]] and d.tolist() == [[-9, -18, -27, -36]], "a+b, a-b")

    m = save(torch.jit.script(Sub()), FIXTURES / "sub_index_pt")
    write_text(FIXTURES / "sub_index_pt" / "config.pbtxt", config(
        "sub_index_pt",
        "forward(x, y) -> x - y with inputs named INPUT__<index>, listed INPUT__1 first.",
        8, [("INPUT__1", f32, [-1]), ("INPUT__0", f32, [-1])], [("OUTPUT__0", f32, [-1])]))
    check("sub_index_pt", torch.jit.load(str(m))(torch.ones(1, 2) * 5, torch.ones(1, 2)).tolist() == [[4, 4]],
          "x - y")

    m = save(torch.jit.script(Ordered()), FIXTURES / "ordered_pt")
    write_text(FIXTURES / "ordered_pt" / "config.pbtxt", config(
        "ordered_pt",
        "forward(x, y) -> (x * 2, y * 3) with names that follow no convention: inputs and outputs go to and\n"
        "come from the model in config order (first -> x, second -> y; doubled <- x * 2, tripled <- y * 3).\n"
        "Requests wait (up to 30 s) until 4 of them form one batch.",
        8, [("first", f32, [2]), ("second", f32, [2])], [("doubled", f32, [2]), ("tripled", f32, [2])],
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 30000000 }\n"))
    a, b = torch.jit.load(str(m))(torch.ones(1, 2), torch.ones(1, 2))
    check("ordered_pt", a.tolist() == [[2, 2]] and b.tolist() == [[3, 3]], "x*2, y*3")

    m = save(torch.jit.script(DictInput()), FIXTURES / "dict_pt")
    write_text(FIXTURES / "dict_pt" / "config.pbtxt", config(
        "dict_pt",
        "forward(inputs: Dict[str, Tensor]) -> inputs[\"scale\"] * inputs[\"value\"]: the inputs arrive as\n"
        "one dictionary keyed by their config names.",
        8, [("value", f32, [3]), ("scale", f32, [3])], [("OUTPUT__0", f32, [3])]))
    r = torch.jit.load(str(m))({"scale": torch.full((1, 3), 2.0), "value": torch.ones(1, 3)})
    check("dict_pt", r.tolist() == [[2, 2, 2]], "scale * value")

    types = list(IDENTITY_TYPES.items())
    m = save(torch.jit.script(Identities()), FIXTURES / "identity_types_pt")
    write_text(FIXTURES / "identity_types_pt" / "config.pbtxt", config(
        "identity_types_pt",
        "forward(...) returns its six inputs unchanged: INPUT__i -> OUTPUT__i on "
        + ", ".join(t for _, (t, _) in types) + ".", 8,
        [(f"INPUT__{i}", t, [-1]) for i, (_, (t, _)) in enumerate(types)],
        [(f"OUTPUT__{i}", t, [-1]) for i, (_, (t, _)) in enumerate(types)]))
    xs = [torch.ones(2, 3, dtype=dt) for _, (_, dt) in types]
    ys = torch.jit.load(str(m))(*xs)
    check("identity_types_pt", all(torch.equal(x, y) and x.dtype == y.dtype for x, y in zip(xs, ys)), "identity")
    ident = torch.jit.script(Identity())

    m = save(torch.jit.script(Accumulate()), FIXTURES / "sequence_pt")
    write_text(FIXTURES / "sequence_pt" / "config.pbtxt", config(
        "sequence_pt",
        "A running INT32 sum per sequence (direct strategy, one slot): forward(INPUT, START) where START is the\n"
        "sequence batcher's control tensor, passed by forward's argument name.", 1,
        [("INPUT", "TYPE_INT32", [1])], [("OUTPUT__0", "TYPE_INT32", [1])],
        "sequence_batching {\n  direct { }\n  max_sequence_idle_microseconds: 60000000\n"
        "  control_input [ { name: \"START\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]\n}\n"))
    acc = torch.jit.load(str(m))
    one = torch.ones(1, 1, dtype=torch.int32)
    sums = [acc(one * v, one * s).item() for v, s in [(5, 1), (3, 0), (2, 0), (7, 1)]]
    check("sequence_pt", sums == [5, 8, 10, 7], f"running sums {sums}")

    m = save(torch.jit.script(Add()), FIXTURES / "add_nobatch_pt")
    write_text(FIXTURES / "add_nobatch_pt" / "config.pbtxt", config(
        "add_nobatch_pt", "forward(a, b) -> a + b on [4] FP32, without batching.", 0,
        [("INPUT__0", f32, [4]), ("INPUT__1", f32, [4])], [("OUTPUT__0", f32, [4])]))
    check("add_nobatch_pt", torch.jit.load(str(m))(torch.ones(4), torch.ones(4)).tolist() == [2, 2, 2, 2], "a+b")

    m = save(torch.jit.script(Checked()), FIXTURES / "checked_pt")
    write_text(FIXTURES / "checked_pt" / "config.pbtxt", config(
        "checked_pt", "forward(x) -> sqrt(x); raises ValueError(\"negative input\") when an element is negative.",
        8, [("INPUT__0", f32, [-1])], [("OUTPUT__0", f32, [-1])]))
    loaded = torch.jit.load(str(m))
    try:
        loaded(torch.tensor([[-1.0]]))
        raised = False
    except Exception:  # noqa: BLE001
        raised = True
    check("checked_pt", raised and loaded(torch.tensor([[4.0]])).tolist() == [[2.0]], "sqrt, raises on negatives")

    save(ident, FIXTURES / "bytes_pt")
    write_text(FIXTURES / "bytes_pt" / "config.pbtxt", config(
        "bytes_pt", "A TYPE_STRING input: refused at load.", 8,
        [("INPUT__0", "TYPE_STRING", [-1])], [("OUTPUT__0", "TYPE_STRING", [-1])]))
    check("bytes_pt", True, "written")

    save(torch.jit.script(Add()), FIXTURES / "wrong_count_pt")
    write_text(FIXTURES / "wrong_count_pt" / "config.pbtxt", config(
        "wrong_count_pt", "The config names one input; forward(a, b) takes two: refused at load.", 8,
        [("INPUT__0", f32, [4])], [("OUTPUT__0", f32, [4])]))
    check("wrong_count_pt", True, "written")

    bad = FIXTURES / "bad_model_pt" / "1" / "model.pt"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"this is not a TorchScript archive\n")
    write_text(FIXTURES / "bad_model_pt" / "config.pbtxt", config(
        "bad_model_pt", "A valid config beside a model.pt that is not TorchScript.", 8,
        [("INPUT__0", f32, [4])], [("OUTPUT__0", f32, [4])]))
    check("bad_model_pt", True, "written")


def main() -> int:
    gen_digits_torch()
    gen_fixtures()
    failed = [c for c in CHECKS if not c[1]]
    print(f"\n{len(CHECKS) - len(failed)} of {len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

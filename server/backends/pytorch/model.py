"""The PyTorch backend's runner: a Triton-style Python model that serves a TorchScript `model.pt`.

dinfer's PyTorch backend (server/backends/pytorch.ts) starts one Python backend stub per model instance with
this file as its model; the interpreter must have `torch`. The runner loads `<version>/<default_model_filename>`
with `torch.jit.load`, maps the config's tensors onto `forward` as Triton's PyTorch backend does, and answers
each (already batched) request with the model's outputs:

- inputs: by forward's argument names when every input carries one; else by `<name>__<index>` (the index is
  the argument position) when every input follows that convention; else in config order. A forward taking a
  single `Dict[str, Tensor]` gets every input in it, keyed by its config name.
- outputs: by `<name>__<index>` (the position in the returned tuple) when every output follows it; else in
  config order.
- sequence controls: the sequence batcher's control tensors count as inputs after the config's, by the same
  rules.
- parameters: DISABLE_OPTIMIZED_EXECUTION, INFERENCE_MODE (default true), DISABLE_CUDNN, ENABLE_JIT_EXECUTOR,
  ENABLE_JIT_PROFILING, ENABLE_TENSOR_FUSER, ENABLE_CACHE_CLEANING, INTRA_OP_THREAD_COUNT,
  INTER_OP_THREAD_COUNT.
"""

import json
import os
import re

import torch
import triton_python_backend_utils as pb_utils

TORCH_TYPES = {
    "TYPE_BOOL": torch.bool,
    "TYPE_UINT8": torch.uint8,
    "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32,
    "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16,
    "TYPE_FP32": torch.float32,
    "TYPE_FP64": torch.float64,
}
TYPE_NAMES = {v: k for k, v in TORCH_TYPES.items()}
INDEXED = re.compile(r"^.*?__(\d+)$")


class TorchScriptError(Exception):
    """A model that cannot be served as configured."""


def bool_parameter(params, key, default=None):
    value = params.get(key, {}).get("string_value", "")
    if value == "":
        return default
    v = value.strip().lower()
    if v in ("true", "1", "on", "yes"):
        return True
    if v in ("false", "0", "off", "no"):
        return False
    raise TorchScriptError(f"parameter '{key}' is '{value}', expected true or false")


def int_parameter(params, key):
    value = params.get(key, {}).get("string_value", "")
    if value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise TorchScriptError(f"parameter '{key}' is '{value}', expected a positive integer")
    return n


def indexed(names):
    """The `<name>__<index>` indices of the names, or None when one name does not follow the convention."""
    out = []
    for n in names:
        m = INDEXED.match(n)
        if not m:
            return None
        out.append(int(m.group(1)))
    return out


def last_line(err):
    """The reason of a (possibly multi-line TorchScript) exception: its last non-empty line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = config["name"]
        params = config.get("parameters") or {}

        if bool_parameter(params, "DISABLE_OPTIMIZED_EXECUTION", False):
            torch._C._set_graph_executor_optimize(False)
        self.inference_mode = bool_parameter(params, "INFERENCE_MODE", True)
        if bool_parameter(params, "DISABLE_CUDNN", False):
            torch.backends.cudnn.enabled = False
        executor = bool_parameter(params, "ENABLE_JIT_EXECUTOR")
        if executor is not None:
            torch._C._jit_set_profiling_executor(executor)
        profiling = bool_parameter(params, "ENABLE_JIT_PROFILING")
        if profiling is not None:
            torch._C._jit_set_profiling_mode(profiling)
        fuser = bool_parameter(params, "ENABLE_TENSOR_FUSER")
        if fuser is not None:
            torch._C._jit_set_texpr_fuser_enabled(fuser)
        self.cache_cleaning = bool_parameter(params, "ENABLE_CACHE_CLEANING", False)
        intra = int_parameter(params, "INTRA_OP_THREAD_COUNT")
        if intra is not None:
            torch.set_num_threads(intra)
        inter = int_parameter(params, "INTER_OP_THREAD_COUNT")
        if inter is not None:
            torch.set_num_interop_threads(inter)

        kind = args["model_instance_kind"]
        if kind == "GPU":
            if not torch.cuda.is_available():
                raise TorchScriptError("KIND_GPU needs a CUDA build of torch and a GPU; this torch sees none")
            self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        else:
            self.device = torch.device("cpu")

        path = os.path.join(args["model_repository"], args["model_version"], config["default_model_filename"])
        try:
            # KIND_MODEL keeps the devices the model names.
            self.module = torch.jit.load(path, map_location=None if kind == "MODEL" else self.device)
        except Exception as e:  # noqa: BLE001
            # The first sentence: torch's archive errors go on with advice that does not apply here.
            reason = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else type(e).__name__
            raise TorchScriptError(f"'{path}' is not a TorchScript model: {reason}") from None
        self.module.eval()

        # Sequence controls (START, END, READY, CORRID) come after the config's inputs, as further tensors.
        controls = [c["name"] for c in (config.get("sequence_batching") or {}).get("control_input", [])]
        inputs = [i["name"] for i in config["input"]] + controls
        outputs = [o["name"] for o in config["output"]]
        self.out_types = {o["name"]: TORCH_TYPES.get(o["data_type"]) for o in config["output"]}

        schema = self.module.forward.schema
        args_ = list(schema.arguments)
        if args_ and args_[0].name == "self":
            args_ = args_[1:]
        self.dict_input = len(args_) == 1 and isinstance(args_[0].type, torch._C.DictType)
        if self.dict_input:
            self.input_slots = {n: n for n in inputs}
        else:
            for a in args_:
                if not isinstance(a.type, torch._C.TensorType):
                    raise TorchScriptError(
                        f"forward's argument '{a.name}' has type '{a.type}'; only Tensor arguments or a single "
                        "Dict[str, Tensor] are supported"
                    )
            arg_names = [a.name for a in args_]
            if len(arg_names) != len(inputs):
                raise TorchScriptError(
                    f"the config names {len(inputs)} input(s), forward takes {len(arg_names)} ({', '.join(arg_names)})"
                )
            if all(n in arg_names for n in inputs):
                slots = [arg_names.index(n) for n in inputs]
            else:
                slots = indexed(inputs) or list(range(len(inputs)))
            for n, s in zip(inputs, slots):
                if s >= len(arg_names):
                    raise TorchScriptError(f"input '{n}' names argument {s}; forward takes {len(arg_names)}")
            if len(set(slots)) != len(slots):
                raise TorchScriptError("two inputs name the same forward argument")
            self.input_slots = dict(zip(inputs, slots))
        self.output_slots = dict(zip(outputs, indexed(outputs) or list(range(len(outputs)))))

    def _run(self, request):
        if self.dict_input:
            feed = {}
            for name in self.input_slots:
                feed[name] = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, name).as_numpy()).to(
                    self.device
                )
            args = [feed]
        else:
            args = [None] * len(self.input_slots)
            for name, slot in self.input_slots.items():
                arr = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                args[slot] = torch.from_numpy(arr).to(self.device)
        guard = torch.inference_mode() if self.inference_mode else torch.no_grad()
        with guard:
            result = self.module.forward(*args)
        if isinstance(result, torch.Tensor):
            results = [result]
        elif isinstance(result, tuple) and all(isinstance(t, torch.Tensor) for t in result):
            results = list(result)
        else:
            raise TorchScriptError(
                f"forward returned {type(result).__name__}; only a Tensor or a tuple of Tensors is supported"
            )
        wanted = request.requested_output_names() or list(self.output_slots)
        tensors = []
        for name in wanted:
            slot = self.output_slots[name]
            if slot >= len(results):
                raise TorchScriptError(
                    f"output '{name}' refers to output {slot}, the model returned {len(results)} output(s)"
                )
            t = results[slot]
            want = self.out_types[name]
            if t.dtype != want:
                got = TYPE_NAMES.get(t.dtype, str(t.dtype))
                raise TorchScriptError(f"the config gives output '{name}' {TYPE_NAMES[want]}, the model returned {got}")
            tensors.append(pb_utils.Tensor(name, t.detach().cpu().contiguous().numpy()))
        return tensors

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(output_tensors=self._run(request)))
            except Exception as e:  # noqa: BLE001
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"Cannot run '{self.name}': PyTorch execute failure: {last_line(e)}")
                    )
                )
        if self.cache_cleaning and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return responses

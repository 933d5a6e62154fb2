"""moe-emu across the GPUs of a host: the two modes lm-eval's HF model offers.

- Model parallel (`parallelize=True`): transformers loads the model with an
  accelerate `device_map` (layers spread over the GPUs, accelerate hooks move
  the activations between them). Every emulated MoE block is built from its
  layer's own weights, so its quantized codes, block scales, global scales and
  cached buffers land on the layer's device; `check_placement` proves it after
  every build (no cross-device tensors, no silent moves).
- Data parallel (`accelerate launch -m lm_eval ...` or any script launched
  with several processes): one full model per process on the process' device;
  lm-eval shards the requests by `rank` and gathers through the
  `all_gather` / `gather_object` / `barrier` primitives (`DataParallel`).

Offloading (layers mapped to "cpu" or "disk" while the model runs on GPUs) is
refused: the emulation reads the expert weights once, at build time, and an
offloaded layer holds only meta placeholders there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import torch
from torch import nn

DEVICE_MAP_OPTIONS = ("auto", "balanced", "balanced_low_0", "sequential")


class PlacementError(RuntimeError):
    """A tensor of an emulated block is not on its layer's device."""


# -- reachable tensors ------------------------------------------------------------------
# walked separately (parameters, buffers, children) or accelerate's own state
_MODULE_SKIP = frozenset({"_parameters", "_buffers", "_modules", "_hf_hook", "_old_forward"})

def iter_tensors(obj, path: str = "", _seen: set | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor reachable from `obj`: module parameters and buffers, and the
    plain attributes that nn.Module.to() does not move (quant configs,
    QuantizedTensor fields, cached kernel weights, scales copied onto the
    experts), through dataclasses, containers and harness objects."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return

    def join(k):
        return f"{path}.{k}" if path else str(k)

    if isinstance(obj, nn.Module):
        for k, v in obj._parameters.items():
            if v is not None:
                yield from iter_tensors(v, join(k), seen)
        for k, v in obj._buffers.items():
            if v is not None:
                yield from iter_tensors(v, join(k), seen)
        for k, v in obj._modules.items():
            if v is not None:
                yield from iter_tensors(v, join(k), seen)
        for k, v in vars(obj).items():
            if k not in _MODULE_SKIP:
                yield from iter_tensors(v, join(k), seen)
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from iter_tensors(getattr(obj, f.name), join(f.name), seen)
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from iter_tensors(v, join(i), seen)
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_tensors(v, join(k), seen)
        return
    if type(obj).__module__.startswith("harness.") and hasattr(obj, "__dict__"):
        for k, v in vars(obj).items():
            yield from iter_tensors(v, join(k), seen)


# -- where a layer lives ----------------------------------------------------------------
def execution_device(module: nn.Module) -> torch.device | None:
    """The device an accelerate hook runs `module` on, if it has one."""
    hook = getattr(module, "_hf_hook", None)
    dev = getattr(hook, "execution_device", None)
    if dev is None:
        for h in getattr(hook, "hooks", ()):  # SequentialHook
            dev = getattr(h, "execution_device", None) or dev
    return None if dev is None else torch.device(dev if not isinstance(dev, int) else f"cuda:{dev}")


def layer_device(model: nn.Module, block_name: str) -> torch.device:
    """The device of the decoder layer holding the MoE block `block_name`: the
    execution device of the nearest accelerate hook above it, else the one
    device of the layer's other parameters (attention, norms)."""
    parts = block_name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        mod = model.get_submodule(".".join(parts[:i])) if i else model
        dev = execution_device(mod)
        if dev is not None:
            return dev
    layer = model.get_submodule(".".join(parts[:-1])) if len(parts) > 1 else model
    devices = {p.device for n, p in layer.named_parameters() if not n.startswith(parts[-1] + ".")}
    if len(devices) != 1:
        raise PlacementError(f"{block_name}: its layer's parameters span {sorted(map(str, devices))}; "
                             "expected exactly one device per layer")
    return devices.pop()


def canonical_device(dev) -> torch.device:
    """"cuda" names the current CUDA device; tensors always carry an index."""
    dev = torch.device(dev)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def placement_violations(model: nn.Module, blocks: dict[str, nn.Module], device_of=None) -> list[str]:
    """One line per tensor of an emulated block that is not on its layer's
    device (`device_of(block name)`, default: `layer_device`)."""
    bad = []
    for name, block in blocks.items():
        want = canonical_device(device_of(name) if device_of else layer_device(model, name))
        for path, t in iter_tensors(block):
            if t.device != want:
                bad.append(f"{name}.{path} is on {t.device}, its layer on {want}")
    return bad


def check_placement(model: nn.Module, blocks: dict[str, nn.Module], device_of=None) -> None:
    bad = placement_violations(model, blocks, device_of)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PlacementError(f"cross-device tensor: {bad[0]}{more}")


def block_devices(model: nn.Module, names) -> dict[str, str]:
    return {n: str(layer_device(model, n)) for n in names}


# -- model-parallel loading -----------------------------------------------------------
def parse_device_map(value):
    """`device_map` as lm-eval model_args carry it: one of DEVICE_MAP_OPTIONS,
    a dict, or a JSON object string {"module": device}."""
    if value is None:
        return "auto"
    if isinstance(value, dict):
        return value
    text = str(value).strip()
    if text in DEVICE_MAP_OPTIONS:
        return text
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"device_map: not a JSON object: {e}") from None
        if not isinstance(parsed, dict):
            raise ValueError("device_map: expected a JSON object {module: device}")
        return parsed
    raise ValueError(f"device_map must be one of {', '.join(DEVICE_MAP_OPTIONS)} or a JSON object; got {text!r}")


def max_memory_map(max_memory_per_gpu) -> dict | None:
    if max_memory_per_gpu in (None, ""):
        return None
    return {i: max_memory_per_gpu for i in range(torch.cuda.device_count())}


def check_device_map(device_map: dict, on_gpus: bool) -> None:
    """Refuse offloading: with GPUs, every module must sit on a GPU."""
    if "disk" in device_map.values():
        names = [k for k, v in device_map.items() if v == "disk"]
        raise ValueError(f"device_map offloads {len(names)} module(s) to disk (first: {names[0]}); "
                         "the emulation needs every layer on a device")
    if on_gpus:
        names = [k for k, v in device_map.items() if str(v) == "cpu"]
        if names:
            raise ValueError(f"device_map offloads {len(names)} module(s) to cpu (first: {names[0] or '<model>'}): "
                             "the model does not fit the GPUs given (max_memory_per_gpu, GPU count)")


def has_hooks(model: nn.Module) -> bool:
    return any(hasattr(m, "_hf_hook") for m in model.modules())


def load_parallel(model_dir: str, dtype, device_map="auto", max_memory_per_gpu=None) -> nn.Module:
    """transformers' accelerate placement; the returned model carries hooks that
    move activations between the layers' devices (forced when the map names a
    single device, so one code path runs everywhere)."""
    from accelerate import dispatch_model
    from transformers import AutoModelForCausalLM

    on_gpus = torch.cuda.is_available()
    dm = parse_device_map(device_map)
    kwargs = {}
    mm = max_memory_map(max_memory_per_gpu) if on_gpus else None
    if mm:
        kwargs["max_memory"] = mm
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True, device_map=dm, **kwargs)
    final = dict(getattr(model, "hf_device_map", None) or {"": "cuda:0" if on_gpus else "cpu"})
    check_device_map(final, on_gpus)
    if not has_hooks(model):
        dispatch_model(model, device_map=final, force_hooks=True)
    return model.eval()


# -- data parallel ------------------------------------------------------------------------
class DataParallel:
    """The process group of an `accelerate launch` run (num_processes > 1), or
    None in a single process. Each process owns one full model."""

    def __init__(self, accelerator):
        self.accelerator = accelerator

    @classmethod
    def detect(cls) -> "DataParallel | None":
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return None
        from accelerate import Accelerator

        # on CPU accelerate joins the (gloo) process group only when asked for the CPU
        acc = Accelerator(cpu=not torch.cuda.is_available())
        return cls(acc) if acc.num_processes > 1 else None

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def device(self) -> torch.device:
        dev = self.accelerator.device
        return torch.device("cpu") if dev.type == "cpu" else dev  # accelerate says cpu:0

    def all_gather(self, tensor):
        return self.accelerator.gather(tensor)

    def gather_object(self, obj, dst=0):
        result = [None] * self.world_size if self.rank == dst else None
        torch.distributed.gather_object(obj=obj, object_gather_list=result, dst=dst)
        return result

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

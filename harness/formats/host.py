"""When a check may read tensor values on the host.

Reading a device tensor's values synchronizes the stream (and is refused
during CUDA graph capture); while torch.compile traces, tensors have no
values. So value checks (code range, global scale finite and > 0) run only
where the values already live on the host: CPU tensors outside tracing.
Device tensors get them only from an explicit check (read_values=True), e.g.
at checkpoint load time; on hot paths they are skipped, and reference and
kernels then give the same bits for the same bad values (see validate.py).
"""
from __future__ import annotations

from typing import Optional

import torch


def values_readable(t: torch.Tensor, read_values: Optional[bool] = None) -> bool:
    """read_values None: CPU tensors only; True: any device (syncs);
    False: never. Never while torch.compile traces."""
    if torch.compiler.is_compiling():
        return False
    if read_values is None:
        return t.device.type == "cpu"
    return bool(read_values) and t.device.type != "meta"

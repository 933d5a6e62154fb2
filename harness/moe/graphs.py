"""CUDA-graph capture and torch.compile helpers for a MoE forward (benchmarks
and the capture checks). Capture fails loudly on any host sync or
host->device copy inside the forward."""
from __future__ import annotations

import torch


def capture_forward(fn, *static_inputs, warmup: int = 2):
    """Capture fn(*static_inputs) in a CUDA graph. Returns (replay, static_out):
    replay() re-runs the graph and returns static_out (overwrite the static
    input tensors in place to feed new data). replay holds the static inputs
    (replay.static_inputs): the graph reads their memory at every replay, so
    a caller that passed temporaries (`capture_forward(moe, x.clone(), ...)`)
    must not have that memory freed and handed to its next allocation, which
    the replays would then read as their input."""
    if not static_inputs or static_inputs[0].device.type != "cuda":
        raise ValueError("capture_forward needs CUDA tensors")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):  # warm caches, Triton compilation, allocator
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(*static_inputs)

    def replay():
        graph.replay()
        return static_out

    replay.graph = graph
    replay.static_inputs = static_inputs
    return replay, static_out


def capture_matches_eager(moe, hidden, router_logits) -> dict:
    """Eager vs graph replay (also after changing the inputs in place)."""
    with torch.no_grad():
        eager = moe(hidden, router_logits)
        h, lg = hidden.clone(), router_logits.clone()
        replay, _ = capture_forward(moe, h, lg)
        out = replay().clone()
        h.copy_(hidden.flip(0))
        lg.copy_(router_logits.flip(0))
        out2 = replay().clone()
        eager2 = moe(hidden.flip(0), router_logits.flip(0))
    return {"bitwise": bool(torch.equal(out, eager) and torch.equal(out2, eager2)),
            "max_abs_diff": float(max((out - eager).abs().max(), (out2 - eager2).abs().max()))}


def compile_matches_eager(moe, hidden, router_logits, backend: str = "inductor") -> dict:
    """torch.compile(fullgraph=True): must trace without a graph break."""
    torch._dynamo.reset()
    compiled = torch.compile(moe, fullgraph=True, backend=backend)
    with torch.no_grad():
        eager = moe(hidden, router_logits)
        out = compiled(hidden, router_logits)
    return {"bitwise": bool(torch.equal(out, eager)), "max_abs_diff": float((out - eager).abs().max())}

"""Small helpers shared by the property suites."""
import torch


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a float tensor (NaN == NaN, -0.0 != +0.0)."""
    return t.contiguous().view({torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[t.dtype])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, what: str = ""):
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    an, bn = torch.isnan(a), torch.isnan(b)
    same = (bits(a) == bits(b)) | (an & bn)
    if not bool(same.all()):
        idx = torch.nonzero(~same)[:5].tolist()
        raise AssertionError(f"{what}: {int((~same).sum())} elements differ, e.g. at {idx}: {a[~same][:5].tolist()} vs {b[~same][:5].tolist()}")

"""QDQ properties of the reference, one function per property, shared by
test_formats_qdq.py (over the format table) and test_synthetic_rows.py (over
rows added to the table for one test).

Each takes (fmt, data) with `data` a hypothesis data object; each caller wraps
it in its own @given and budget."""
import torch
from hypothesis import note

import harness.formats as hf
import harness.strategies as hs
from harness.formats.bounds import check_qdq_bound
from harness.testing.checks.bitwise import assert_bitwise_equal


def opts(fmt, mode, rounding, gs):
    """The drawn options that apply to the row (FormatSpec.scale_modes / has_global_scale)."""
    spec = hf.FORMATS[fmt]
    return dict(scale_mode=mode if mode in spec.scale_modes else spec.scale_modes[0], rounding=rounding,
                global_scale=gs if spec.has_global_scale else None)


def mx_qdq_is_idempotent(fmt, data):
    """Same mode, same rounding: qdq(qdq(x)) == qdq(x) bit for bit (float32 and
    bfloat16 hold every dequantized value exactly)."""
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32, torch.bfloat16), allow_nan_inf=True))
    mode, rounding = data.draw(hs.scale_modes()), data.draw(hs.roundings())
    once = hf.qdq(case.x, fmt, mode, rounding)
    assert_bitwise_equal(hf.qdq(once, fmt, mode, rounding), once, f"{fmt}/{mode}/{rounding}")


def error_within_half_a_code_step(fmt, data):
    """|qdq(x) - x| <= half the code spacing of the block (formats/bounds.py),
    except saturated elements."""
    case = data.draw(hs.block_tensors(fmt))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    q = hf.quantize(case.x, fmt, **opts(fmt, mode, rounding, gs))
    worst, bad = check_qdq_bound(case.x, q)
    note(f"worst err/bound = {worst}")
    assert worst <= 1.0, f"{fmt}/{mode}/{rounding}: error {worst:.4g}x the bound at {torch.nonzero(bad)[:5].tolist()}"


def sign_symmetry(fmt, data):
    """qdq(-x) == -qdq(x) bit for bit."""
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    o = opts(fmt, mode, rounding, gs)
    assert_bitwise_equal(hf.qdq(-case.x, fmt, **o), -hf.qdq(case.x, fmt, **o), "qdq(-x) vs -qdq(x)")


def monotone_within_a_block(fmt, data):
    """Within a block, a larger input never gives a smaller qdq output."""
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,)))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    B = hf.FORMATS[fmt].block_size
    xb = case.x.reshape(-1, B)
    yb = hf.qdq(case.x, fmt, **opts(fmt, mode, rounding, gs)).reshape(-1, B)
    order = torch.argsort(xb, dim=-1, stable=True)
    ys = torch.gather(yb, -1, order)
    assert bool((ys[:, 1:] >= ys[:, :-1]).all()), f"not monotone: x sorted {torch.gather(xb, -1, order)} -> {ys}"


def scale_mode_relations(fmt, data):
    """floor <= even <= floor + 1, floor <= rceil <= ceil <= floor + 1 (bytes,
    before the [0, 254] clamp can only tie them), and rceil/ceil never saturate."""
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,)))
    b = {m: hf.quantize(case.x, fmt, m).scales.to(torch.int32) for m in hf.SCALE_MODES}
    assert bool((b["floor"] <= b["even"]).all() and (b["even"] <= b["floor"] + 1).all())
    assert bool((b["floor"] <= b["rceil"]).all() and (b["rceil"] <= b["ceil"]).all())
    assert bool((b["ceil"] <= b["floor"] + 1).all())
    spec = hf.FORMATS[fmt]
    for mode in ("ceil", "rceil"):
        q = hf.quantize(case.x, fmt, mode)
        v = case.x.reshape(*q.scales.shape, -1).abs() / hf.e8m0_to_float(q.scales).unsqueeze(-1)
        unclamped = q.scales.to(torch.int32) < 254
        assert bool((v[unclamped] <= spec.max_normal).all()), f"{mode} saturated an element"


def nan_or_inf_poisons_only_its_block(fmt, data):
    """A NaN (MX: or Inf) poisons its own block to NaN and no other."""
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True))
    gs = data.draw(hs.global_scales())
    q = hf.quantize(case.x, fmt, **opts(fmt, "floor", "rne", gs))
    B = hf.FORMATS[fmt].block_size
    xb = case.x.reshape(*q.scales.shape, B)
    y = hf.dequantize(q).reshape(*q.scales.shape, B)
    if hf.FORMATS[fmt].is_mx:
        bad = ~torch.isfinite(xb).all(-1)
        assert torch.equal(q.scales == 0xFF, bad)
    else:
        bad = torch.isnan(xb).any(-1)  # NVFP4: Inf saturates (scale 448), NaN poisons
        assert bool((q.scales[bad] & 0x7F == 0x7F).all())
    assert bool(torch.isnan(y[bad]).all()), "a poisoned block must dequantize to NaN"
    assert bool(torch.isfinite(y[~bad]).all()), "floor-mode blocks without NaN/Inf stay finite"

"""Kernel format of the fused MoE GEMM's expert weights (FusedWeights),
prepared once, at conversion."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

import harness.formats as hf
from harness.kernels import fp4_words
from harness.kernels.launch_config import SCALE_ORDERS, scale_order as preferred_scale_order, read_k, vendor_of, \
    word_order as preferred_word_order

# codes a device receives at once when a layer's kernel weights are built from
# codes on the host (from_quantized_by_experts): 512 MiB, a few experts
CHUNK_BYTES = 2**29
# the largest E8M0 byte plain_scale_bytes allows (2^1): 128 + 126 is the largest normal exponent field, 254
MAX_PLAIN_SCALE_BYTE = 128


@dataclass
class FusedWeights:
    """Kernel format of one expert weight tensor [E, N, K]: e2m1 codes eight to
    a 32-bit word in the layout of fp4_words.py (in the word order
    `word_order`), stored as the words' bytes [E, N, K/2] / one code per byte
    / float, plus the checkpoint's block scale bytes and, for
    two-level rows, the float32 global scale of each expert, all on the
    weights' device (prepared once, at conversion). The checkpoint's bytes
    (and, for rows a GEMM reads past a ragged long K, a few slack bytes after
    each tensor: k_over): the kernel decodes a
    block's multiplier from its scale byte
    (2^(b-127) for MX; s, or fl32(s / gs[e]) in "ieee", for two-level rows),
    so one format serves every precision. The scale bytes may have any
    strides (the kernel takes all three): from_quantized stores them in the
    order launch_config.scale_order picks (`scale_order`)."""

    TENSORS = ("data", "scales", "gscale")  # the tensor fields (None where a format has none)

    kind: int  # 0 float, 1 codes
    data: torch.Tensor
    scales: Optional[torch.Tensor]  # [E, N, K/B] uint8 block scale bytes (E8M0, or the two-level row's minifloat)
    gscale: Optional[torch.Tensor]  # [E] float32 per-expert global scale (two-level rows)
    fmt: Optional[str]
    E: int
    N: int
    K: int
    word_order: str = "k"  # e2m1 words: fp4_words.ORDERS (other formats: "k")
    # Derived at conversion (from_quantized, plain_scale_bytes), never passed in: True lets the kernel take each
    # E8M0 multiplier as the float whose exponent field is the byte (launch_config: PLAIN_SCALES, FOLD_BIAS). A
    # FusedWeights built by hand, or whose tensors were written after conversion, keeps False: the full decode.
    plain_scales: bool = field(default=False, init=False)
    # Derived at conversion too: how far past K a GEMM may read each row (launch_config.read_k), so it reads whole
    # BLOCK_Ks there (K_OVERREAD) instead of masking them, x's loads masked on K. Past a row's K lie the next row's
    # codes and scale bytes (the next expert's after the last row), past the last expert's last row zero slack the
    # storage holds after the tensor (slack): finite weights, as plain scales (plain_scales) make every multiplier,
    # so their products with x's masked zeros are zeros. Set only with plain_scales; 0 for a FusedWeights built by
    # hand, or copied (dataclasses.replace). The launcher checks the claim against the storage (check_over_read)
    k_over: int = field(default=0, init=False)
    # How far past K the slack after each tensor lets its rows be read (from_quantized: read_k's, whatever the
    # scales; k_over <= k_slack), which nbytes counts
    k_slack: int = field(default=0, init=False)

    def __post_init__(self):
        """The layout the kernel reads, checked (FusedWeights can be built by
        hand): a wrong dtype, shape, stride or global scale would be read as
        other weights."""
        shape = (self.E, self.N, self.K)
        if self.kind == 0:
            want = (self.data.dtype.is_floating_point, shape, "a float dtype")
        elif self.kind == 1:
            spec = hf.get_format(self.fmt)
            self._check_gscale(spec)
            if spec.is_fp4:
                fp4_words.check_order(self.word_order, self.K, f"fused weights ({self.fmt})")
                want = (self.data.dtype == torch.uint8, shape[:2] + (self.K // 2,),
                        "the bytes of fp4_words' int32 words (eight e2m1 codes each)")
            else:
                want = (self.data.dtype == torch.uint8, shape, "uint8 codes")
            blocks = shape[:2] + (self.K // spec.block_size,)
            if self.scales is None or self.scales.dtype != torch.uint8 or tuple(self.scales.shape) != blocks:
                got = None if self.scales is None else (self.scales.dtype, tuple(self.scales.shape))
                raise ValueError(f"fused weights ({self.fmt}): scales must be uint8 {list(blocks)}, got {got}")
        else:
            raise ValueError(f"fused weights: kind {self.kind!r}; expected 0 (float) or 1 (codes)")
        if self.word_order != "k" and not (self.kind == 1 and spec.is_fp4):
            raise ValueError(f"fused weights ({self.fmt or 'float'}): word order {self.word_order!r} applies to e2m1 "
                             "words only; these take 'k'")
        ok, dims, what = want
        if not ok or tuple(self.data.shape) != tuple(dims):
            raise ValueError(f"fused weights ({self.fmt or 'float'}): data must be {what} of shape {list(dims)}, "
                             f"got {self.data.dtype} {list(self.data.shape)}")
        # the kernel takes the expert and row strides of the weights as given (experts may lie far apart,
        # checks/offsets.py) but steps along K with unit stride, and reads e2m1 rows as int32 words; it takes
        # all three strides of the scale bytes
        t = self.data
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"fused weights ({self.fmt or 'float'}): data must have unit stride along its "
                             f"last dimension, got strides {list(t.stride())} for shape {list(t.shape)}")
        if self.kind == 1 and spec.is_fp4:
            offsets = (self.data.storage_offset(), *self.data.stride()[:2])
            if any(o % 4 for o in offsets):
                raise ValueError(f"fused weights ({self.fmt}): data's storage offset and expert / row strides "
                                 f"{list(offsets)} (bytes) must be multiples of 4: the kernel reads int32 words")

    def _check_gscale(self, spec) -> None:
        """Two-level rows take one float32 global scale per expert, MX rows
        none: `two_level` (whether the kernel divides by it) is read from
        its presence."""
        g = self.gscale
        if spec.is_mx:
            if g is not None:
                raise ValueError(f"fused weights ({self.fmt}): an MX format takes no global scale, got "
                                 f"{list(g.shape)}")
        elif g is None or g.dtype != torch.float32 or tuple(g.shape) != (self.E,) or not g.is_contiguous():
            got = None if g is None else f"{g.dtype} {list(g.shape)} strides {list(g.stride())}"
            raise ValueError(f"fused weights ({self.fmt}): gscale must be contiguous float32 [{self.E}] (one per "
                             f"expert), got {got}")

    @classmethod
    def from_quantized(cls, q: hf.QuantizedTensor, gscale: Optional[torch.Tensor],
                       word_order: Optional[str] = None, scale_order: Optional[str] = None) -> "FusedWeights":
        """`gscale`: the per-expert global scale of a two-level row ([E], [E,
        1] or one value for all experts); None for MX rows. Codes and scale
        bytes are the quant config's tensors where they already have the
        kernel's layout (contiguous uint8; codes wider than fp4), so a layer
        holds them once; e2m1 codes go into fp4_words' layout, kept as the
        words' bytes [E, N, K/2] (as many as the packed codes), in
        `word_order` (default: the one the codes' device runs best,
        launch_config.word_order); scale bytes in `scale_order` (default:
        launch_config.scale_order's, for the tensor's N and K)."""
        spec = q.spec
        codes, scales, _ = hf.dequantize_inputs(q.codes, q.scales, None, q.fmt)  # uint8 views, checked
        E, N, K = codes.shape
        gs = None
        if not spec.is_mx:
            if gscale is None:
                raise ValueError(f"{spec.name} fused weights need the per-expert global scale")
            gs = gscale.to(device=codes.device, dtype=torch.float32).reshape(-1)
            if gs.numel() == 1:
                gs = gs.expand(E)
            if gs.numel() != E:
                raise ValueError(f"{spec.name} fused weights: global scale of {gscale.numel()} values for {E} "
                                 f"experts (shape {list(gscale.shape)}); expected one per expert or one for all")
            gs = gs.contiguous()
        elif gscale is not None:
            raise ValueError(f"{spec.name} is an MX format (E8M0 block scales only): it takes no global scale")
        el = spec.element
        if spec.is_fp4 and (el.ebits, el.mbits, el.specials) != (2, 1, "none"):
            raise ValueError(f"{spec.name}: the fused kernel stores 4-bit codes as e2m1 (fp4_words), not "
                             f"{el.name} (ebits {el.ebits}, mbits {el.mbits}, specials {el.specials})")
        order = "k"
        if spec.is_fp4:
            order = word_order or preferred_word_order(vendor_of(codes.device), spec.name, K)
        over = read_k(order, K) - K if spec.is_fp4 else 0
        data = fp4_words.pack(codes, order).view(torch.uint8) if spec.is_fp4 else codes.contiguous()
        scales_k = in_scale_order(scales, scale_order or preferred_scale_order(N, K, spec.block_size))
        if over:  # rows read past K: the slack after each tensor's last row (k_over), allocated whatever the scales
            data = _with_slack(data, _slack(2, N, over, False))
            scales_k = _with_slack(scales_k, _slack(spec.block_size, N, over, _n_order(scales_k)))
        fw = cls(1, data, scales_k, gs, spec.name, E, N, K, order)
        fw.plain_scales = plain_scale_bytes(codes, scales, spec)
        fw.k_over = over if fw.plain_scales else 0  # finite weights past K only under plain scales
        fw.k_slack = over
        return fw

    @classmethod
    def from_quantized_by_experts(cls, q: hf.QuantizedTensor, gscale: Optional[torch.Tensor], device,
                                  chunk_bytes: int = CHUNK_BYTES, word_order: Optional[str] = None) -> "FusedWeights":
        """`from_quantized` onto `device` from codes held elsewhere (the host),
        a few experts at a time: each chunk's codes and scales are copied over,
        prepared, and written into the full tensors, allocated once. So the
        device holds the kernel format plus one chunk of codes, never all the
        unpacked codes of a layer (1 byte a weight, more than the layer's kernel
        format). The result is bitwise `from_quantized` on the device."""
        E, N, K = q.codes.shape
        if E == 0:
            raise ValueError(f"from_quantized_by_experts: no experts to build (codes {list(q.codes.shape)})")
        per_expert = max(1, N * K)
        step = max(1, min(E, chunk_bytes // per_expert))
        full: Optional[FusedWeights] = None
        plain = True
        for e0 in range(0, E, step):
            e1 = min(E, e0 + step)
            gs = q.global_scale
            if gs is not None:
                gs = (gs[e0:e1] if gs.dim() and gs.shape[0] == E else gs).to(device)
            g = None
            if gscale is not None:
                g = gscale.reshape(-1)
                g = (g if g.numel() == 1 else g[e0:e1]).to(device)
            part = cls.from_quantized(
                hf.QuantizedTensor(q.codes[e0:e1].to(device), q.scales[e0:e1].to(device), gs, q.fmt, q.scale_mode,
                                   q.rounding, q.dtype), g, word_order)
            if full is None:
                over = read_k(part.word_order, K) - K if part.kind == 1 and hf.get_format(part.fmt).is_fp4 else 0

                def alloc(part, name, per):  # the part's layout over E experts, with from_quantized's slack
                    t = getattr(part, name)
                    if t is None:
                        return None
                    if name == "gscale":
                        return t.new_empty((E,))
                    n_order = _n_order(t)
                    return _zeros((E,) + tuple(t.shape[1:]), t, n_order, _slack(per, N, over, n_order) if over else 0)
                full = cls(part.kind, alloc(part, "data", 2), alloc(part, "scales", part.block_size()),
                           alloc(part, "gscale", 1), part.fmt, E, N, K, part.word_order)
            for name in cls.TENSORS:
                src = getattr(part, name)
                if src is not None:
                    getattr(full, name)[e0:e1].copy_(src)
            plain = plain and part.plain_scales
            del part
        full.plain_scales = plain  # every chunk's scale bytes checked
        full.k_over = over if plain else 0
        full.k_slack = over
        return full

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "FusedWeights":
        E, N, K = w.shape
        return cls(0, w.contiguous(), None, None, None, E, N, K)

    @property
    def device(self):
        return self.data.device

    @property
    def scale_order(self) -> Optional[str]:
        """launch_config.SCALE_ORDERS: "n" where each block's N scale bytes
        are contiguous (stored [E, K / block, N]), else "k"; None without scales."""
        sc = self.scales
        if sc is None:
            return None
        return "n" if _n_order(sc) else "k"

    @property
    def two_level(self) -> bool:
        return self.gscale is not None

    @property
    def k_read(self) -> int:
        """The K a GEMM may read each row to (launch_config.select_launch's k_read): K + k_over."""
        return self.K + self.k_over

    def block_size(self) -> int:
        """Elements per scale byte (1 without scales)."""
        return hf.get_format(self.fmt).block_size if self.kind == 1 else 1

    def slack(self, name: str) -> int:
        """Elements of tensor field `name` (TENSORS) its storage holds after
        it for a read of every row k_slack past K (from_quantized)."""
        t = getattr(self, name)
        if t is None or not self.k_slack or name == "gscale":
            return 0
        return _slack(2 if name == "data" else self.block_size(), self.N, self.k_slack, _n_order(t))

    def check_over_read(self) -> None:
        """k_over held to what it claims, before a launch reads past K:
        plain scales and dense tensors (past each row's K the next row's
        finite weights, not bytes between experts) and, after each tensor,
        storage a read of every row to k_read stays inside. Raises
        ValueError naming the tensor."""
        if not self.k_over:
            return
        if not self.plain_scales:
            raise ValueError(f"fused weights ({self.fmt}): k_over {self.k_over} without plain scales: the weights "
                             f"read past K may be NaN (an E8M0 byte 255)")
        for name, per in (("data", 2), ("scales", self.block_size())):
            t = getattr(self, name)
            if self.k_read % per or t.dim() != 3:
                raise ValueError(f"fused weights ({self.fmt}): {name} {list(t.shape)} cannot be read to K "
                                 f"{self.k_read} (blocks of {per})")
            want = _dense_strides(tuple(t.shape), _n_order(t))
            if any(d > 1 and st != w for d, st, w in zip(t.shape, t.stride(), want)):
                raise ValueError(f"fused weights ({self.fmt}): {name} of strides {list(t.stride())} read past K "
                                 f"(k_over {self.k_over}): it must be dense, strides {list(want)}, so past each "
                                 f"row's K lies the next row")
            shape = tuple(t.shape[:2]) + (self.k_read // per,)
            end = t.storage_offset() + 1 + sum((d - 1) * s for d, s in zip(shape, t.stride()))
            held = t.untyped_storage().nbytes() // t.element_size()
            if end > held:
                raise ValueError(f"fused weights ({self.fmt}): {name} read to K {self.k_read} (k_over "
                                 f"{self.k_over}) reaches element {end} of a storage of {held}: no slack after it")

    def nbytes(self) -> int:
        """Bytes the kernel format holds (codes, scale bytes, global scales, the slack after them)."""
        return sum((t.numel() + self.slack(name)) * t.element_size()
                   for name in self.TENSORS if (t := getattr(self, name)) is not None)


def _n_order(t: torch.Tensor) -> bool:
    """Whether [E, N, L] `t` holds each column's N rows contiguous (scale order "n")."""
    return t.shape[1] > 1 and t.shape[2] > 1 and t.stride(1) == 1


def _dense_strides(shape: tuple, n_order: bool) -> tuple:
    """The strides of a dense [E, N, L] tensor, rows contiguous or in order "n"."""
    _, n, cols = shape
    return (n * cols, 1, n) if n_order else (n * cols, cols, 1)


def _slack(per: int, n: int, k_over: int, n_order: bool) -> int:
    """Elements after a dense [E, N, K / per] tensor that reading every row
    k_over further (k_over / per more columns) reaches: the last row's,
    or in order "n" (each column's N contiguous) N for each column."""
    return k_over // per * (n if n_order else 1)


def _zeros(shape: tuple, like: torch.Tensor, n_order: bool, slack: int) -> torch.Tensor:
    """Zeros [E, N, L] of `like`'s dtype and device, rows contiguous (or in
    order "n"), in a storage of `slack` more zero elements after them."""
    dense = (shape[0], shape[2], shape[1]) if n_order else shape
    count = dense[0] * dense[1] * dense[2]
    t = torch.zeros(count + slack, dtype=like.dtype, device=like.device)[:count].view(dense)
    return t.transpose(1, 2) if n_order else t


def _with_slack(t: torch.Tensor, slack: int) -> torch.Tensor:
    """[E, N, L] `t` copied into `_zeros` of its order and `slack`."""
    return _zeros(tuple(t.shape), t, _n_order(t), slack).copy_(t)


def in_scale_order(scales: torch.Tensor, order: str) -> torch.Tensor:
    """Scale bytes [E, N, K / block] stored in `order` (launch_config.SCALE_ORDERS):
    the same values at the same indices; `scales` itself where it is already
    stored so (no copy)."""
    if order == "k":
        return scales.contiguous()
    if order == "n":
        return scales.transpose(1, 2).contiguous().transpose(1, 2)
    raise ValueError(f"scale order {order!r}; expected one of {', '.join(SCALE_ORDERS)}")


def plain_scale_bytes(codes: torch.Tensor, scales: torch.Tensor, spec) -> bool:
    """Whether an MX tensor's E8M0 multipliers 2^(b - 127) are all the float
    whose exponent field is b (bf16: b << 7), so the kernel can skip the two
    bytes that are not, 0 (2^-127, a float32 subnormal) and 255 (NaN), and
    fold e2m1's 2^126 into them (exponent field b + 126, at most 254). True
    when every byte is at most 128 (block scales up to 2: weights' scales
    are far below) and every block whose byte is 0 holds only zero codes
    (+0 or -0: times 0, or 2^-1 folded, instead of 2^-127 they stay the same
    zeros). codes [E, N, K] uint8 element codes, scales [E, N, K / block]
    bytes. Two host reads (build time only); False for two-level rows (their
    scale is a minifloat), integer elements and tensors without values (the
    meta device: nothing to check, so the full decode)."""
    if not spec.is_mx or spec.element.is_int or scales.is_meta or codes.is_meta:
        return False
    if bool((scales > MAX_PLAIN_SCALE_BYTE).any()):
        return False
    zero = scales == 0
    if not bool(zero.any()):
        return True
    magnitude = spec.element.sign_bit - 1  # the code bits below the sign (sign_bit is its mask)
    blocks = codes.reshape(*scales.shape, spec.block_size)[zero]  # [blocks with byte 0, block]
    return not bool((blocks & magnitude).any())

"""Kernel format of the fused MoE GEMM's expert weights (FusedWeights),
prepared once, at conversion."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

import harness.formats as hf
from harness.kernels import fp4_words
from harness.kernels.launch_config import SCALE_ORDERS, scale_order as preferred_scale_order, stored_k, vendor_of, \
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
    (but for rows stored past a ragged long K: k_pad): the kernel decodes a
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
    # Derived at conversion too: the zero codes (and zero scale bytes) each row's storage holds past K, beyond the
    # views `data` and `scales` (launch_config.stored_k), so a GEMM can read whole BLOCK_Ks there (K_PADDED)
    # instead of masking them. 0 for a FusedWeights built by hand, or copied (dataclasses.replace)
    k_pad: int = field(default=0, init=False)

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
        pad = stored_k(order, K) - K if spec.is_fp4 else 0
        if pad:  # zero codes and zero scale bytes past K, outside the views (k_pad)
            padded = torch.nn.functional.pad(codes, (0, pad))
            data = fp4_words.pack(padded, order).view(torch.uint8)[..., :K // 2]
            del padded
            scales_p = torch.nn.functional.pad(scales, (0, pad // spec.block_size))
        else:
            data = fp4_words.pack(codes, order).view(torch.uint8) if spec.is_fp4 else codes.contiguous()
            scales_p = scales
        scales_k = in_scale_order(scales_p, scale_order or preferred_scale_order(N, K, spec.block_size))
        fw = cls(1, data, scales_k[..., :K // spec.block_size] if pad else scales_k, gs, spec.name, E, N, K, order)
        fw.plain_scales = plain_scale_bytes(codes, scales, spec)
        fw.k_pad = pad
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
                def alloc(part, name, order="k"):  # the part's tensor, its padding past K; scale bytes in its order
                    t = part.stored(name)
                    if t is None:
                        return None
                    if order == "n":
                        t = t.new_empty((E, t.shape[2], t.shape[1])).transpose(1, 2)
                    else:
                        t = t.new_empty((E,) + tuple(t.shape[1:]))
                    return t if name == "gscale" else t[..., :getattr(part, name).shape[-1]]
                full = cls(part.kind, alloc(part, "data"), alloc(part, "scales", part.scale_order),
                           alloc(part, "gscale"), part.fmt, E, N, K, part.word_order)
                full.k_pad = part.k_pad
            for name in cls.TENSORS:
                src = part.stored(name)
                if src is not None:
                    full.stored(name)[e0:e1].copy_(src)
            plain = plain and part.plain_scales
            del part
        full.plain_scales = plain  # every chunk's scale bytes checked
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
        return "n" if sc.shape[1] > 1 and sc.shape[2] > 1 and sc.stride(1) == 1 else "k"

    @property
    def two_level(self) -> bool:
        return self.gscale is not None

    @property
    def k_stored(self) -> int:
        """The K each row's storage holds (launch_config.select_launch's k_stored)."""
        return self.K + self.k_pad

    def stored(self, name: str) -> Optional[torch.Tensor]:
        """Tensor field `name` (TENSORS) with what its storage holds past K
        (k_pad): the view over the same memory, [E, N, k_stored / elements
        per byte] for the data, [E, N, k_stored / block] for the scales."""
        t = getattr(self, name)
        if t is None or not self.k_pad or name == "gscale":
            return t
        per = 2 if name == "data" else hf.get_format(self.fmt).block_size
        return t.as_strided(tuple(t.shape[:2]) + (self.k_stored // per,), t.stride(), t.storage_offset())

    def nbytes(self) -> int:
        """Bytes the kernel format holds (codes, scale bytes, global scales, with the padding past K)."""
        held = (self.stored(name) for name in self.TENSORS)
        return sum(t.numel() * t.element_size() for t in held if t is not None)


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

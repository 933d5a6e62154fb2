"""The lm-eval model `moe-emu`: a transformers MoE causal LM whose sparse-MoE
blocks run through the harness.moe emulation layer for a chosen scheme.

    lm_eval --model moe-emu --model_args pretrained=DIR,scheme=nvfp4 ...
    simple_evaluate(model=MoEEmuLM(pretrained="tiny-moe", scheme="nvfp4"), ...)

Requests are scored in batches (right-padded, sorted by length);
loglikelihood_rolling uses lm-eval's disjoint rolling windows; generate_until
is greedy with a KV cache and stop strings. Expert weights are quantized when
a scheme is first used (inside build_emulated_moe: round to nearest even,
nvfp4 with a per-expert global scale). nvfp4 activation global scales come
from the checkpoint's activation_amax.json when present, else from
calibration on the documented calibration set (calibrate.py).

`set_scheme(s)` switches the loaded model between schemes without reloading,
so a baseline and a quantized run share one set of weights and the same items.

`oracle` (model arg, default true): whether "oracle:<scheme>" may be asked
for. With backend=fused and oracle=false the emulated layers release their
unpacked expert weight codes once the kernel weights are built (the decision
is moe_swap.keep_codes_for), and asking for the oracle then raises
CodesReleasedError.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from harness.models.tiny_model import BUNDLED_MODEL_NAME
from harness.emulation import calibrate
from harness.models import corpus
from harness.emulation import parallel
from harness.models import tiny_families, tiny_family_make, tiny_model
from harness.lmeval.schemes import SCHEMES
from harness.emulation.builder import builder_source, emulation_builder, needs_activation_scales
from harness.emulation.moe_swap import ORACLE_PREFIX, Swapper, keep_codes_for
from harness.util.offline import enter_offline, set_threads
from harness.emulation import synthetic_loader
from harness.moe.schemes import get_scheme
from harness.emulation import checkpoint_blocks


def auto_device() -> str:
    """CUDA or ROCm (both appear as torch.cuda) when present, else CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model_dir(pretrained) -> str:
    """The bundled model, a tiny family model (by name or cache folder: made
    here when absent), or a local folder."""
    if pretrained in (None, "", BUNDLED_MODEL_NAME):
        return str(tiny_model.bundled_dir())
    family = tiny_families.name_of(pretrained)
    if family is not None:
        return str(tiny_family_make.ensure(family))
    path = Path(os.path.expanduser(str(pretrained)))
    if not path.is_dir():
        raise FileNotFoundError(f"model folder not found: {path} (only local folders are loaded; no hub access)")
    return str(path)


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(name):
    if name in (None, "auto"):
        return "auto"
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {name!r}")
    return _DTYPES[name]


def _flag(name, value) -> bool:
    """A boolean model_arg; lm-eval passes `parallelize=True` from the command line as a string."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "none", ""):
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


@register_model("moe-emu")
class MoEEmuLM(TemplateLM):
    def __init__(self, pretrained=BUNDLED_MODEL_NAME, scheme: str = "bf16", backend: str = "unfused",
                 calibration_docs: int = 64, calibration_seed: int = corpus.DEFAULT_SEED,
                 device: str | None = None, dtype="auto", batch_size=32, max_length: int | None = None,
                 threads: int | None = None, parallelize=False, device_map="auto", max_memory_per_gpu=None,
                 checkpoint: str | None = None, checkpoint_format: str | None = None, oracle=True,
                 **_ignored):
        super().__init__()
        from transformers import AutoTokenizer


        enter_offline(os.environ.get("HARNESS_CACHE_DIR"))
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
        self.model_dir = resolve_model_dir(pretrained)
        self.parallelize = _flag("parallelize", parallelize)
        # data parallel: one process per device under `accelerate launch`, lm-eval shards by rank
        self.dp = parallel.DataParallel.detect()
        if self.dp is not None:
            if self.parallelize:
                raise ValueError("parallelize=True under a multi-process launch: choose model parallel "
                                 "(one process, parallelize=True) or data parallel (accelerate launch)")
            self._rank, self._world_size = self.dp.rank, self.dp.world_size
            device = str(self.dp.device)
        self._device = torch.device(device or auto_device())
        if self._device.type == "cpu":
            set_threads(int(threads) if threads is not None else None)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.checkpoint_scheme = None   # set when the checkpoint itself is quantized
        self.progress = None            # a progress.Meter while a caller wants per-batch lines
        self.backend_name = backend
        self.keep_codes = keep_codes_for(backend, _flag("oracle", oracle))
        self.model = self._load_model(_dtype(dtype), device_map, max_memory_per_gpu)
        self.batch_size = int(batch_size)
        cfg_len = getattr(self.model.config, "max_position_embeddings", 2048)
        self.max_length = int(max_length) if max_length else min(int(cfg_len), 4096)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eot_token_id
        self.calibration_docs = int(calibration_docs)
        self.calibration_seed = int(calibration_seed)
        self.build_fn = emulation_builder()
        if self.checkpoint_scheme is None:
            self.swapper = Swapper.attach(self.model)
        else:
            self.swapper = Swapper(model=self.model, specs=self._loaded.specs,
                                   built={self.checkpoint_scheme: self._loaded.blocks})
            self._loaded = None
        self.activation_scales = None
        self.calibration_info: dict = {}
        # a producer checkpoint whose experts ARE the quantized scheme (harness/emulation/checkpoint_blocks.py)
        self.checkpoint, self.checkpoint_format = checkpoint, checkpoint_format
        self.scheme = None
        self.set_scheme(scheme)

    def _load_model(self, dtype, device_map, max_memory_per_gpu):
        from transformers import AutoModelForCausalLM


        if synthetic_loader.loads_as_model(self.model_dir):
            return self._load_quantized(dtype, device_map)
        if not self.parallelize:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype, local_files_only=True)
            return model.to(self._device).eval()
        model = parallel.load_parallel(self.model_dir, dtype, device_map, max_memory_per_gpu)
        # inputs go where the embedding lives; accelerate's hooks carry them on
        self._device = model.get_input_embeddings().weight.device
        return model

    def _load_quantized(self, dtype, device_map):
        """A quantized checkpoint (synthetic_loader.FORMATS): experts built from its quantized
        tensors, layer by layer on the layers' devices (dense experts never exist)."""
        dt = torch.bfloat16 if dtype == "auto" else dtype
        if not self.parallelize:
            devices, dm = [str(self._device)], None
        else:
            dm = parallel.parse_device_map(device_map)
            n = torch.cuda.device_count()
            devices = [f"cuda:{i}" for i in range(n)] if n else ["cpu"]
            dm = dm if isinstance(dm, dict) else None
        self._loaded = synthetic_loader.load(self.model_dir, devices=devices, device_map=dm, dtype=dt,
                                             backend=self.backend_name, keep_codes=self.keep_codes)
        self.checkpoint_scheme = self._loaded.scheme
        self._device = self._loaded.model.get_input_embeddings().weight.device
        return self._loaded.model

    # -- scheme handling ---------------------------------------------------
    def _ensure_scales(self, scheme: str) -> dict:
        """Per-block encode-side activation global scales for `scheme`'s
        two-level activation format (amax measured once, for every scheme)."""
        if self.activation_scales is None:
            amax = calibrate.checkpoint_amax(self.model_dir)
            source = "checkpoint activation_amax.json"
            if amax is None:
                texts = corpus.calibration_texts(self.calibration_seed, self.calibration_docs)
                amax = calibrate.calibrate_amax(self.model, self.swapper, self.tokenizer, texts)
                source = (f"calibrated on corpus.calibration_texts(seed={self.calibration_seed}, "
                          f"n_docs={self.calibration_docs})")
            self.activation_scales = calibrate.scales_from_amax(amax)
            self.calibration_info = {"source": source, "amax": amax}

        return calibrate.scales_from_amax(self.calibration_info["amax"], get_scheme(scheme).act_fmt)

    def set_scheme(self, scheme: str) -> None:
        """A scheme name, or "oracle:<scheme>" for the float64 reference of that scheme."""
        base = scheme[len(ORACLE_PREFIX):] if scheme.startswith(ORACLE_PREFIX) else scheme
        if self.checkpoint_scheme is not None and base != self.checkpoint_scheme:
            raise ValueError(f"{self.model_dir}: the checkpoint is quantized as {self.checkpoint_scheme}; "
                             f"scheme {scheme!r} cannot run on it")
        if scheme.startswith(ORACLE_PREFIX):
            base = scheme[len(ORACLE_PREFIX):]
            self.set_scheme(base)
            self.swapper.build_oracle(base)
            parallel.check_placement(self.model, self.swapper.built[scheme])
            self.swapper.use(scheme)
            self.scheme = scheme
            return
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
        if scheme not in self.swapper.built and self.checkpoint is not None and scheme != "bf16":
            got, mods = checkpoint_blocks.build(self.swapper, self.checkpoint, self.checkpoint_format, self.backend_name,
                                                keep_codes=self.keep_codes)
            if got != scheme:
                raise ValueError(f"{self.checkpoint}: the checkpoint is {got}, not scheme {scheme}")
            parallel.check_placement(self.model, mods)
            self.swapper.built[scheme] = mods
            self.calibration_info = {"source": f"checkpoint {self.checkpoint} ({self.checkpoint_format})"}
        if scheme not in self.swapper.built:
            scales = self._ensure_scales(scheme) if needs_activation_scales(scheme) else None
            self.swapper.build(scheme, self.build_fn, scales=scales, backend=self.backend_name,
                               keep_codes=self.keep_codes)
            # built from each layer's own weights, so on the layer's device; proven, not moved
            parallel.check_placement(self.model, self.swapper.built[scheme])
        self.swapper.use(scheme)
        self.scheme = scheme

    def describe(self) -> dict:
        return {
            "model_dir": self.model_dir, "scheme": self.scheme, "backend": self.backend_name,
            "keep_codes": self.keep_codes,
            "device": str(self._device), "dtype": str(self.model.dtype),
            "parallel": self.parallel_info(),
            # which CPU kernels summed the float32 GEMMs (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS)
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "auto"),
            "moe_blocks": len(self.swapper.specs), "family": self.swapper.specs[0].family,
            "emulation": builder_source(self.build_fn),
            "calibration": {k: v for k, v in self.calibration_info.items() if k != "amax"},
        }

    def parallel_info(self) -> dict:
        if self.dp is not None:
            return {"mode": "data", "rank": self.rank, "world_size": self.world_size}
        if self.parallelize:
            names = [s.name for s in self.swapper.specs]
            return {"mode": "model", "block_devices": parallel.block_devices(self.model, names)}
        return {"mode": "single"}

    # -- distributed primitives (lm-eval's evaluator shards requests by rank) ---------
    def all_gather(self, tensor):
        return tensor if self.dp is None else self.dp.all_gather(tensor)

    def gather_object(self, obj, dst=0):
        return [obj] if self.dp is None else self.dp.gather_object(obj, dst)

    def barrier(self) -> None:
        if self.dp is not None:
            self.dp.barrier()

    # -- TemplateLM plumbing --------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def device(self):
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return self.model_dir.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens))

    def tok_decode(self, tokens) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # -- scoring ---------------------------------------------------------------
    def _batched_logits(self, rows: list[list[int]]):
        """(row indices, logits [B, width, V] on the model's output device) per
        batch of rows, longest first, right-padded."""
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            width = len(rows[idx[0]])
            ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                ids[j, :len(rows[i])] = torch.tensor(rows[i])
                mask[j, :len(rows[i])] = 1
            yield idx, self.model(input_ids=ids.to(self._device), attention_mask=mask.to(self._device)).logits

    @torch.no_grad()
    def logprobs(self, rows: list[list[int]]) -> list[torch.Tensor]:
        """Full next-token log-probabilities [len(row), V] (float32, CPU) for each
        token row, batched right-padded. Used by the KL gate, which needs the
        whole distribution."""
        out: list = [None] * len(rows)
        for idx, logits in self._batched_logits(rows):
            lp = F.log_softmax(logits.float(), dim=-1).cpu()
            for j, i in enumerate(idx):
                out[i] = lp[j, :len(rows[i])]
        return out

    @torch.no_grad()
    def span_scores(self, rows: list[list[int]], spans: list[tuple[int, list[int]]]) -> list[tuple[float, bool]]:
        """(sum of the target tokens' log-probabilities, all targets greedy) for
        each row's span (first position, target tokens). Only the span's
        positions are normalised, on the logits' device, and only the scores
        leave it: a full [T, V] float32 copy to the host per row would make
        loglikelihood host-bandwidth bound (2 GB per batch of 8 x 260 tokens at
        Qwen3's 151936-token vocabulary). log_softmax is per position, so the
        values equal those of `logprobs` bit for bit on the same device
        (suites/lm_eval test)."""
        out: list = [None] * len(rows)
        for idx, logits in self._batched_logits(rows):
            for j, i in enumerate(idx):
                first, target = spans[i]
                sel = F.log_softmax(logits[j, first:first + len(target)].float(), dim=-1)
                tgt = torch.tensor(target, device=sel.device)
                ll = sel.gather(1, tgt[:, None]).cpu()
                greedy = bool((sel.argmax(-1) == tgt).all())
                out[i] = (float(ll.sum()), greedy)
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        rows, spans = [], []
        for _, ctx, cont in requests:
            whole = (list(ctx) + list(cont))[-(self.max_length + 1):]
            n_cont = len(cont)
            rows.append(whole[:-1])
            spans.append((len(whole) - 1 - n_cont, whole[-n_cont:]))
        results = []
        pbar = tqdm(total=len(rows), disable=disable_tqdm, desc=f"loglikelihood [{self.scheme}]")
        self._progress_start()
        for start in range(0, len(rows), self.batch_size * 8):
            chunk = rows[start:start + self.batch_size * 8]
            results.extend(self.span_scores(chunk, spans[start:start + len(chunk)]))
            pbar.update(len(chunk))
            self._progress("loglikelihood", start + len(chunk), len(rows))
        pbar.close()
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        flat, owner = [], []
        for n, req in enumerate(requests):
            (text,) = req.args
            for ctx, cont in self.rolling_windows(text):
                flat.append(((None, None), ctx, cont))
                owner.append(n)
        scores = self._loglikelihood_tokens(flat, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for n, (ll, _) in zip(owner, scores):
            totals[n] += ll
        return totals

    def rolling_windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        tokens = self.tok_encode(text)
        return [make_disjoint_window(w) for w in get_rolling_token_windows(
            token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length, context_len=1)]

    # -- generation --------------------------------------------------------------
    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs: list = [None] * len(requests)
        groups: dict = {}
        for n, req in enumerate(requests):
            ctx, kwargs = req.args
            key = repr(sorted((kwargs or {}).items()))
            groups.setdefault(key, []).append((n, ctx, dict(kwargs or {})))
        pbar = tqdm(total=len(requests), disable=disable_tqdm, desc=f"generate_until [{self.scheme}]")
        self._progress_start()
        done = 0
        for items in groups.values():
            kwargs = items[0][2]
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            eos_text = self.tok_decode([self.eot_token_id])
            if eos_text and eos_text not in until:
                until.append(eos_text)
            max_new = int(kwargs.pop("max_gen_toks", 256))
            if kwargs.pop("do_sample", False) or kwargs.pop("temperature", 0.0):
                raise ValueError("moe-emu generates greedily only (do_sample=false, temperature=0)")
            items.sort(key=lambda it: -len(self.tok_encode(it[1])))
            for start in range(0, len(items), self.batch_size):
                batch = items[start:start + self.batch_size]
                texts = self._greedy([it[1] for it in batch], until, max_new)
                for (n, _, _), text in zip(batch, texts):
                    outputs[n] = text
                pbar.update(len(batch))
                done += len(batch)
                self._progress("generate_until", done, len(requests))
        pbar.close()
        return outputs

    def _progress_start(self) -> None:
        if self.progress is not None:
            self.progress.restart()

    def _progress(self, kind: str, done: int, total: int) -> None:
        """Per batch: the meter a caller set (harness.lmeval.progress.Meter) prints at most every few seconds."""
        if self.progress is not None:
            self.progress.update(kind, done, total)

    def _cache_kwarg(self) -> str:
        """transformers >= 5.x names the KV cache `cache`; 4.x `past_key_values`."""
        import inspect

        params = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    def _greedy(self, contexts: list[str], until: list[str], max_new: int) -> list[str]:
        encs = [self.tok_encode(c)[-(self.max_length - max_new):] for c in contexts]
        width = max(len(e) for e in encs)
        ids = torch.full((len(encs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, e in enumerate(encs):  # left padding
            ids[j, width - len(e):] = torch.tensor(e)
            mask[j, width - len(e):] = 1
        ids, mask = ids.to(self._device), mask.to(self._device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        new_tokens = [[] for _ in encs]
        done = [False] * len(encs)
        past = None
        step_ids, step_pos = ids, positions
        cache_kw = self._cache_kwarg()
        for _ in range(max_new):
            out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                             use_cache=True, **{cache_kw: past})
            past = getattr(out, cache_kw, None)
            nxt = out.logits[:, -1].argmax(-1)
            for j, t in enumerate(nxt.tolist()):
                if not done[j]:
                    new_tokens[j].append(t)
                    text = self.tok_decode(new_tokens[j])
                    if t == self.eot_token_id or any(s in text for s in until):
                        done[j] = True
            if all(done):
                break
            step_ids = nxt[:, None]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        results = []
        for toks in new_tokens:
            text = self.tok_decode(toks)
            for s in until:
                if s:
                    text = text.split(s)[0]
            results.append(text)
        return results

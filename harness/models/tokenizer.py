"""The bundled tokenizer: one token per character, built with `tokenizers`.

No download: the vocabulary is the arithmetic alphabet below plus three
special tokens. Saved as tokenizer.json + tokenizer_config.json +
special_tokens_map.json so `AutoTokenizer.from_pretrained(folder)` loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ("<eos>", "<pad>", "<unk>")
ALPHABET = "0123456789+-*=%,;:() \n"
EOS, PAD, UNK = SPECIALS


def vocab() -> dict[str, int]:
    tokens = list(SPECIALS) + list(ALPHABET)
    return {tok: i for i, tok in enumerate(tokens)}


def build():
    """A `tokenizers.Tokenizer` that splits text into single characters."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=vocab(), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIALS))
    return tok


def save(folder) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    build().save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS,
        "bos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    specials = {"eos_token": EOS, "bos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")


def load(folder):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))

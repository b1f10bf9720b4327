"""Models the engine runs: a random-weight model of a preset architecture, built locally
(no hub, no weights to download: it does the same arithmetic as the trained model), or a
local model folder."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Arch:
    """A Qwen2-family shape (what `Qwen2Config` takes)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int = 32768
    tied: bool = True  # the output projection shares the embeddings

    @property
    def params(self) -> float:
        """Parameters: embeddings (tied) + per layer attention and MLP."""
        head_dim = self.hidden // self.heads
        attn = self.hidden * (self.hidden + 2 * self.kv_heads * head_dim) + self.hidden * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return float(embed + self.layers * (attn + mlp))

    def qwen2_config(self) -> dict:
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "num_hidden_layers": self.layers,
            "hidden_size": self.hidden,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_positions,
            "tie_word_embeddings": self.tied,
            "torch_dtype": "bfloat16",
        }


# The one declaration of the preset architectures (`--arch`).
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("tiny", layers=2, hidden=256, heads=4, kv_heads=4, intermediate=512, vocab=8192, max_positions=8192),
        Arch("qwen2.5-0.5b", layers=24, hidden=896, heads=14, kv_heads=2, intermediate=4864, vocab=151936),
        Arch("qwen2.5-1.5b", layers=28, hidden=1536, heads=12, kv_heads=2, intermediate=8960, vocab=151936),
        Arch("qwen2.5-7b", layers=28, hidden=3584, heads=28, kv_heads=4, intermediate=18944, vocab=152064, tied=False),
    )
}


def cache_dir() -> Path:
    """Where built models are kept (RLVR_ENGINE_CACHE, else ~/.cache/rlvr-explorer/models)."""
    default = Path.home() / ".cache" / "rlvr-explorer" / "models"
    return Path(os.environ.get("RLVR_ENGINE_CACHE") or default)


def arch_of(name: str) -> Arch:
    try:
        return ARCHS[name]
    except KeyError:
        raise ValueError(f"--arch: must be one of {', '.join(ARCHS)}, got {name!r}") from None


def build_random_model(arch: Arch, root: Path | None = None, seed: int = 0) -> Path:
    """The folder of a random-weight model of `arch` saved in bf16, built on first use
    (the folder is complete once its config.json is written, last)."""
    folder = (root or cache_dir()) / f"random-{arch.name}-seed{seed}"
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**arch.qwen2_config()), torch_dtype=torch.bfloat16)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    try:
        tmp.rename(folder)
    except OSError:  # another engine process built it meanwhile (k engines start together)
        if not (folder / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def folder_arch(folder: Path) -> Arch:
    """The shape of a local model folder (its config.json); ValueError naming the folder
    when it is not one."""
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"--model-path {folder}: not a model folder (no config.json)")
    try:
        cfg = json.loads(config.read_text())
        heads = int(cfg["num_attention_heads"])
        return Arch(
            name=folder.resolve().name,
            layers=int(cfg["num_hidden_layers"]),
            hidden=int(cfg["hidden_size"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            intermediate=int(cfg.get("intermediate_size") or 4 * int(cfg["hidden_size"])),
            vocab=int(cfg["vocab_size"]),
            max_positions=int(cfg.get("max_position_embeddings") or 8192),
            tied=bool(cfg.get("tie_word_embeddings", False)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--model-path {folder}/config.json: not a model configuration ({exc})") from None

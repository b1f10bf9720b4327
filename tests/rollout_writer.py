"""verl rollout dumps as verl's trainer writes them (`_dump_generations`: one
``<global_step>.jsonl`` per step, ``json.dumps(entry, ensure_ascii=False)`` per sample,
keys input, output, gts, score, step and every reward_extra_infos key), and a tokenizer
trained here with the tokenizers library (saved as its tokenizer.json)."""

from __future__ import annotations

import json
import random
from pathlib import Path

PHRASE = "the quick brown fox"
HTML = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"><b>bold?</b>'
WORDS = ["alpha", "beta", "gamma", "delta", "Überlegung", "数学", "答案", "x²+y²", "😀", "naïve", "so", "then"]


def sample_output(rng: random.Random, step: int, group: int, sample: int) -> str:
    """A response: reasoning of random length; some loop, one holds HTML, one the phrase."""
    if group == 1 and sample == 2:
        return "Let me check. " + "I think the answer is 5. " * 200  # a loop
    body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 400)))
    if group == 2 and sample == 0:
        body += " " + HTML
    if step == 2 and group == 3 and sample == 1:
        body += f" and then {PHRASE.title()} jumps"
    return body + f"\nThe answer is {group + step}."


def dump_rows(step: int, groups: int = 5, n: int = 4, seed: int = 0, *, shuffle: bool = True) -> list[dict]:
    """One step's lines, in a DP-balanced (shuffled) order as verl may leave them."""
    rng = random.Random(seed * 1000 + step)
    rows = []
    for g in range(groups):
        prompt = f"<|im_start|>user\nProblem {step}.{g}: compute {g} + {step}. Überprüfe ✓<|im_end|>"
        for s in range(n):
            out = sample_output(rng, step, g, s)
            score = 1.0 if out.endswith(f"{g + step}.") and s % 2 == 0 else 0.0
            rows.append(
                {
                    "input": prompt,
                    "output": out,
                    "gts": str(g + step),
                    "score": score,
                    "step": step,
                    "acc": score > 0,
                    "pred": str(g + step if score else -1),
                    "format_ok": 1,
                }
            )
    if shuffle:
        rng.shuffle(rows)
    return rows


def dump_bytes(rows: list[dict]) -> bytes:
    return ("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n").encode()


def write_dump(folder: Path, steps=(1, 2, 3), groups: int = 5, n: int = 4, validation: bool = True) -> dict:
    """A rollout_data_dir (and a validation dump in val/); {relative path: rows}."""
    written = {}
    for step in steps:
        rows = dump_rows(step, groups, n)
        written[f"{step}.jsonl"] = rows
    if validation:
        written[f"val/{steps[-1]}.jsonl"] = dump_rows(steps[-1], 2, 1, seed=9, shuffle=False)
    for rel, rows in written.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(dump_bytes(rows))
    return written


def trained_tokenizer(texts: list[str], vocab_size: int = 400) -> str:
    """A BPE tokenizer trained on `texts` (its tokenizer.json)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    return tok.to_str()

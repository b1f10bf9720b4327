"""The run's tokenizer, given with an upload: a Hugging Face ``tokenizer.json`` read with
the `tokenizers` library (nothing is fetched from a hub).

It travels as a file of the upload, so the upload's content hash covers it (the same
dump with and without a tokenizer are two traces): the REST upload's ``tokenizer`` field
and the CLI's ``--tokenizer PATH`` (a tokenizer.json, or a local model folder holding
one) add it as ``tokenizer.json``; a run folder with its tokenizer.json inside works the
same. The reader loop reads it before the other files (format ``tokenizer``: no rows, a
tokenizer for the rollout-dump reader, backend/formats/rollouts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.formats.base import InputError, ReadResult, Source
from backend.formats.spec import FormatSpec

TOKENIZER_STATE = "tokenizer"
FILE_NAME = "tokenizer.json"
MAX_BYTES = 64 << 20  # the largest public tokenizer.json files are ~20 MB
# keys a tokenizer.json opens with (its first ones are "version", "truncation", "padding",
# "added_tokens"; the vocabulary comes later, under "model")
_HEAD_KEYS = (b'"added_tokens"', b'"truncation"')


@dataclass
class RunTokenizer:
    name: str  # the file it came from
    tokenizer: object  # tokenizers.Tokenizer

    def lengths(self, texts: list[str]) -> list[int]:
        """Token count of each text, special tokens not added (the dump's text as is)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]  # type: ignore[attr-defined]

    def describe(self) -> dict:
        return {"file": self.name, "vocab_size": self.tokenizer.get_vocab_size()}  # type: ignore[attr-defined]


def looks_like_tokenizer(head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return start.startswith(b"{") and all(key in head for key in _HEAD_KEYS)


def read_tokenizer(source: Source, result: ReadResult):
    """Load the tokenizer for the files read after it; yields no rows."""
    from tokenizers import Tokenizer

    with source.open() as stream:
        raw = stream.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise InputError(source.name, f"tokenizer file larger than {MAX_BYTES >> 20} MB", field="tokenizer")
    try:
        tokenizer = Tokenizer.from_str(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, Exception) as exc:  # the library raises plain Exceptions
        raise InputError(
            source.name, f"not a tokenizer.json the tokenizers library reads: {str(exc)[:200]}", field="tokenizer"
        ) from None
    if TOKENIZER_STATE in result.state:
        raise InputError(source.name, "the upload holds two tokenizers; give one", field="tokenizer")
    result.state[TOKENIZER_STATE] = RunTokenizer(source.name, tokenizer)
    yield from ()


def tokenizer_file(path: Path) -> Path:
    """A tokenizer.json given as itself or as the model folder holding it."""
    path = Path(path)
    if path.is_dir():
        path = path / FILE_NAME
        if not path.is_file():
            raise InputError(
                str(path.parent), f"no {FILE_NAME} in this folder (a fast tokenizer is needed)", field="tokenizer"
            )
    if not path.is_file():
        raise InputError(str(path), "no such tokenizer file", field="tokenizer")
    return path


FORMAT_SPECS = (
    FormatSpec(
        "tokenizer",
        read_tokenizer,
        "``tokenizer.json``; or a JSON object opening with added_tokens and truncation (a Hugging Face "
        "fast tokenizer; read first)",
        names=(r"^tokenizer\.json$",),
        head=lambda head, name: looks_like_tokenizer(head),
        order=20,
        read_first=0,
    ),
)

"""`rlvr-explorer ingest DUMP --tokenizer PATH`: a model folder's tokenizer.json gives the
dump token lengths; a folder without one is refused before anything is read."""

from __future__ import annotations

from sqlalchemy import select
from tokenizers import Tokenizer
from typer.testing import CliRunner

from backend.formats.rollout_text import unpack
from backend.store.db import new_session
from backend.store.models import Sample, SampleText, Trace
from rlvr_explorer.cli import app
from tests.rlvr_explorer.test_cli import printed_json
from tests.rollout_writer import trained_tokenizer, write_dump

runner = CliRunner()


def test_ingest_with_a_model_folders_tokenizer(env, tmp_path):
    written = write_dump(tmp_path / "dump", steps=(1, 2), groups=3, n=2, validation=False)
    model = tmp_path / "Qwen-tiny"
    model.mkdir()
    tok_json = trained_tokenizer([r["output"] for rows in written.values() for r in rows])
    (model / "tokenizer.json").write_text(tok_json)
    (model / "config.json").write_text("{}")  # the rest of a model folder is not read
    result = runner.invoke(app, ["ingest", str(tmp_path / "dump"), "--tokenizer", str(model), "--json"])
    assert result.exit_code == 0, result.output
    summary = printed_json(result.output)
    assert summary["status"] == "ready" and summary["samples"] == 12
    tok = Tokenizer.from_str(tok_json)
    with new_session() as s:
        trace = s.get(Trace, summary["id"])
        assert trace.meta["rollouts"]["length_unit"] == "tokens"
        pairs = s.execute(
            select(Sample.response_len, SampleText.response)
            .join(
                SampleText,
                (SampleText.trace_id == Sample.trace_id)
                & (SampleText.step == Sample.step)
                & (SampleText.group_idx == Sample.group_idx)
                & (SampleText.sample_idx == Sample.sample_idx),
            )
            .where(Sample.trace_id == trace.id)
        ).all()
    assert len(pairs) == 12
    assert all(n == len(tok.encode(unpack(blob), add_special_tokens=False).ids) for n, blob in pairs)


def test_a_folder_without_a_tokenizer_is_refused(env, tmp_path):
    write_dump(tmp_path / "dump", steps=(1,), groups=1, n=2, validation=False)
    (tmp_path / "empty-model").mkdir()
    result = runner.invoke(app, ["ingest", str(tmp_path / "dump"), "--tokenizer", str(tmp_path / "empty-model")])
    assert result.exit_code == 2
    assert "no tokenizer.json" in result.output

"""Bad input: a 4xx naming file, line and field; nothing half-written; the server goes on."""

from __future__ import annotations

import gzip
import io
import zipfile

import pytest
from sqlalchemy import func, select

from backend.store.db import new_session
from backend.store.models import Sample, Trace
from tests.helpers import jsonl, synthetic_rows


def upload(api, name, content, **form):
    return api.post("/api/v1/traces", files=[("files", (name, content, "application/octet-stream"))], data=form)


def good_rows():
    return synthetic_rows(steps=1, groups=6, n=2)[0]


def total_rows() -> tuple[int, int]:
    with new_session() as s:
        return (
            s.scalar(select(func.count()).select_from(Sample)),
            s.scalar(select(func.count()).select_from(Trace)),
        )


@pytest.fixture(autouse=True)
def rows_before(env):
    return total_rows()


@pytest.fixture()
def assert_nothing_stored(api, rows_before):
    """After a rejected upload: no sample or trace row was added, and the server serves."""

    def check(_api=None):
        assert total_rows() == rows_before
        assert api.get("/api/v1/traces").json()["total"] == 0
        assert api.get("/api/v1/health").status_code == 200

    return check


def detail(r):
    assert r.status_code in (413, 422), (r.status_code, r.text)
    return r.json()["detail"]


def test_malformed_json_names_line(api, assert_nothing_stored):
    body = jsonl(good_rows()[:3]) + b'{"step": 0, "input": 5,\n'
    d = detail(upload(api, "packed_lengths_step_0.jsonl", body))
    assert d["file"].endswith("packed_lengths_step_0.jsonl") and d["line"] == 4
    assert "packed_lengths_step_0.jsonl" in d["message"] and "line 4" in d["message"]
    assert_nothing_stored(api)


@pytest.mark.parametrize(
    ("field", "value"),
    [("input", "abc"), ("input", -5), ("output", [10, -1]), ("output", [10, 10**9])],
)
def test_wrong_type_or_absurd_length_names_field(api, assert_nothing_stored, field, value):
    rows = good_rows()
    rows[2] = {**rows[2], field: value, "n_sampling": 2}
    d = detail(upload(api, "packed_lengths_step_0.jsonl", jsonl(rows)))
    assert d["line"] == 3
    assert d["field"].split("[")[0] == field  # e.g. "output[1]": the element at fault
    assert_nothing_stored(api)


def test_error_late_in_upload_leaves_no_rows(api, assert_nothing_stored):
    # A valid first file followed by a broken one: the valid rows must not stay.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("run/packed_lengths_step_0.jsonl", jsonl(good_rows()))
        zf.writestr("run/packed_lengths_step_1.jsonl", b'{"step": 1, "input": "x"}\n')
    d = detail(upload(api, "run.zip", buf.getvalue()))
    assert "packed_lengths_step_1.jsonl" in d["file"]
    assert_nothing_stored(api)


def test_unknown_format(api, assert_nothing_stored):
    d = detail(upload(api, "notes.txt", b"hello world\n"))
    assert "notes.txt" in d["message"]
    assert_nothing_stored(api)


@pytest.mark.parametrize("value", ["0", "-3", str(2**31)])
def test_max_response_len_out_of_the_columns_range(api, assert_nothing_stored, value):
    r = upload(api, "packed_lengths_step_0.jsonl", jsonl(good_rows()), max_response_len=value)
    assert r.status_code == 422 and "max_response_len" in str(r.json())
    assert_nothing_stored(api)


def test_unknown_forced_format(api, assert_nothing_stored):
    d = detail(upload(api, "packed_lengths_step_0.jsonl", jsonl(good_rows()), format="nope"))
    assert d["field"] == "format"


def test_truncated_gzip(api, assert_nothing_stored):
    data = gzip.compress(jsonl(good_rows() * 20))
    d = detail(upload(api, "packed_lengths_step_0.jsonl.gz", data[: len(data) // 2]))
    assert "packed_lengths_step_0.jsonl.gz" in d["message"]
    assert_nothing_stored(api)


def test_archive_entry_escaping_its_folder(api, assert_nothing_stored):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../evil/packed_lengths_step_0.jsonl", jsonl(good_rows()))
    d = detail(upload(api, "evil.zip", buf.getvalue()))
    assert "evil" in d["message"]
    assert_nothing_stored(api)


def test_archive_bomb(api, assert_nothing_stored, monkeypatch):
    from backend.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_compression_ratio", 50.0)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("packed_lengths_step_0.jsonl", b" " * 20_000_000)
    d = detail(upload(api, "bomb.zip", buf.getvalue()))
    assert "bomb.zip" in d["message"]
    assert_nothing_stored(api)


def test_oversize_upload_is_413(api, assert_nothing_stored, monkeypatch):
    from backend.settings import get_settings

    monkeypatch.setattr(get_settings(), "max_upload_bytes", 1000)
    r = upload(api, "packed_lengths_step_0.jsonl", jsonl(good_rows() * 10))
    assert r.status_code == 413
    assert "packed_lengths_step_0.jsonl" in r.json()["detail"]["message"]
    assert_nothing_stored(api)


def test_duplicate_samples_rejected(api, assert_nothing_stored):
    rows = good_rows()
    body = jsonl(rows)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a/packed_lengths_step_0.jsonl", body)
        zf.writestr("b/native.csv", b"step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,5\n0,0,0,5,6\n")
    r = upload(api, "dup.zip", buf.getvalue())
    assert r.status_code == 422
    assert "duplicate" in r.json()["detail"]["message"]
    assert_nothing_stored(api)

"""The storage quota counts an upload as it expands (both databases): a small archive
that expands past what the team has left is a 413 naming usage, quota and the expanded
size — inline, job-sized and attached uploads alike — and nothing of it is kept; a
declaration that lies is caught while the files are read."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile

import pytest
from sqlalchemy import update

from tests.conftest import ROOT
from tests.helpers import jsonl, synthetic_rows

# packed lengths that compress well: under 64 KiB zipped, about 300 KiB expanded
BODY = jsonl([r for step in synthetic_rows(steps=8, groups=256, n=8, seed=3) for r in step])


def _zip(name: str = "run/packed_lengths_step_0.jsonl", body: bytes = BODY) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, body)
    return buf.getvalue()


def _tar_gz(body: bytes = BODY) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("run/packed_lengths_step_0.jsonl")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def upload(api, name: str, content: bytes, path: str = "/api/v1/traces"):
    return api.post(path, files=[("files", (name, content, "application/octet-stream"))])


def _set_quota(api, quota: int | None) -> None:
    from backend.store.db import session_scope
    from backend.store.models import Team

    team_id = api.get("/api/v1/me").json()["team"]["id"]
    with session_scope() as s:
        s.execute(update(Team).where(Team.id == team_id).values(quota_bytes=quota))


def _uploads(env) -> set:
    return set((ROOT / env["RLVR_DATA_DIR"] / "uploads").glob("*"))


def _assert_refused(r, expanded: int) -> str:
    from backend.ingest.quota import human_bytes

    assert r.status_code == 413, r.text
    message = r.json()["detail"]["message"]
    assert "quota of 64.0 KiB" in message and "used" in message, message
    assert f"expands to {human_bytes(expanded)}" in message, message
    return message


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("run.zip", _zip()),
        ("run.tar.gz", _tar_gz()),
        ("packed_lengths_step_0.jsonl.gz", gzip.compress(BODY, mtime=0)),
    ],
    ids=["zip", "tar.gz", "gz"],
)
def test_an_archive_expanding_past_the_quota_is_refused_and_nothing_kept(api, env, name, content, tmp_path):
    from backend.formats.archive import declared_size

    (tmp_path / name).write_bytes(content)
    declared = declared_size(tmp_path / name, name)  # a tar's own size: its members and headers
    assert len(BODY) <= declared < len(BODY) + 16384
    assert len(content) < 64 * 1024 < len(BODY)  # fits the quota as uploaded, not expanded
    _set_quota(api, 64 * 1024)
    before = _uploads(env)
    message = _assert_refused(upload(api, name, content), declared)
    assert "as uploaded" in message
    assert api.get("/api/v1/traces").json()["total"] == 0
    assert api.get("/api/v1/storage").json()["used_bytes"] == 0
    assert _uploads(env) == before
    _set_quota(api, None)
    assert upload(api, name, content).status_code == 201  # the same file fits a larger quota


def test_a_job_sized_upload_is_refused_before_its_job(api, env, monkeypatch):
    from backend.settings import get_settings

    monkeypatch.setattr(get_settings(), "inline_ingest_max_bytes", 0)  # every upload: a worker job
    _set_quota(api, 64 * 1024)
    before = _uploads(env)
    _assert_refused(upload(api, "run.zip", _zip()), len(BODY))
    assert api.get("/api/v1/traces").json()["total"] == 0
    assert api.get("/api/v1/jobs").json()["items"] == []
    assert _uploads(env) == before


def test_an_attached_archive_counts_expanded(api, env):
    small = jsonl([r for step in synthetic_rows(steps=1, groups=2, n=2, seed=1) for r in step])
    first = upload(api, "packed_lengths_step_9.jsonl", small)
    assert first.status_code == 201, first.text
    _set_quota(api, 64 * 1024)
    before = _uploads(env)
    _assert_refused(upload(api, "more.zip", _zip(), f"/api/v1/traces/{first.json()['id']}/files"), len(BODY))
    assert api.get(f"/api/v1/traces/{first.json()['id']}").json()["n_steps"] == 1
    assert api.get("/api/v1/storage").json()["used_bytes"] == len(small)
    assert _uploads(env) == before


def test_a_lying_declaration_is_caught_while_reading(api, env, monkeypatch):
    """Declared sizes can lie (a gzip trailer holds the size modulo 4 GiB): the bytes read
    count against the quota too."""
    import backend.ingest.quota as quota

    monkeypatch.setattr(quota, "declared_upload_size", lambda files, settings, cap=None: 0)
    _set_quota(api, 64 * 1024)
    before = _uploads(env)
    r = upload(api, "run.zip", _zip())
    assert r.status_code == 413, r.text
    assert "quota of 64.0 KiB" in r.json()["detail"]["message"]
    assert api.get("/api/v1/traces").json()["total"] == 0
    assert api.get("/api/v1/storage").json()["used_bytes"] == 0
    assert _uploads(env) == before


def test_declared_sizes_read_without_expanding(tmp_path):
    from backend.formats.archive import declared_size

    cases = {"run.zip": _zip(), "run.tar.gz": _tar_gz(), "a.jsonl.gz": gzip.compress(BODY), "a.jsonl": BODY}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        assert declared_size(tmp_path / name, name) >= len(BODY), name
    plain_tar = tmp_path / "run.tar"
    with tarfile.open(plain_tar, "w") as tf:
        tf.add(tmp_path / "a.jsonl", "x/a.jsonl")
    assert declared_size(plain_tar, "run.tar") >= len(BODY)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(BODY))
    (folder / ".hidden").write_bytes(b"x" * 10)
    assert declared_size(folder, "folder") == len(BODY)

"""Archives and compression: zip / tar(.gz) / gz give the same rows as the folder, and
escaping entries, links, bombs and truncated data are refused with the file named."""

from __future__ import annotations

import gc
import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from backend.formats import read_sources
from backend.formats.archive import Limits, expand_upload
from backend.formats.base import InputError, ReadResult


def tables(sources) -> dict:
    parts: dict = {}
    for batch in read_sources(sources, None, ReadResult()):
        for k, v in batch.columns.items():
            parts.setdefault(batch.table, {}).setdefault(k, []).append(np.asarray(v))
    return {t: {k: np.concatenate(v) for k, v in cols.items()} for t, cols in parts.items()}


def assert_same_tables(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for table in a:
        assert a[table].keys() == b[table].keys()
        for col in a[table]:
            np.testing.assert_array_equal(a[table][col], b[table][col], err_msg=f"{table}.{col}")


def make_zip(path: Path, folder: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.iterdir()):
            zf.write(f, f"{folder.name}/{f.name}")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


def make_tar(path: Path, folder: Path, mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        tf.add(folder, arcname=folder.name)
    return path


def tar_with(path: Path, members: list[tarfile.TarInfo], data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info in members:
            tf.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def small_run(folder: Path) -> Path:
    folder.mkdir()
    for step in range(3):
        rows = [
            {"step": step, "rank": 0, "local_index": g, "input": 10 + g, "output": [step + 1, g + 2]} for g in range(4)
        ]
        (folder / f"packed_lengths_step_{step}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return folder


@pytest.mark.parametrize("fixture", ["verl_dapo_qwen2_5_32b", "search_r1_qwen2_5_7b", "rllm_deepcoder_14b_16k"])
def test_zip_and_tar_gz_of_a_fixture_folder_match_the_folder(shared_fixtures, tmp_path, fixture):
    folder = shared_fixtures / "polytrace" / fixture
    expected = tables(expand_upload(folder, folder.name))
    zipped = make_zip(tmp_path / "run.zip", folder)
    tarred = make_tar(tmp_path / "run.tar.gz", folder)
    zip_sources = expand_upload(zipped, "run.zip")
    assert all(s.name.startswith(f"run.zip/{fixture}/") for s in zip_sources)
    assert_same_tables(tables(zip_sources), expected)
    assert_same_tables(tables(expand_upload(tarred, "run.tar.gz")), expected)


def test_plain_tar_tgz_and_gz_entries_inside_a_zip(tmp_path):
    folder = small_run(tmp_path / "run")
    expected = tables(expand_upload(folder, "run"))
    assert_same_tables(tables(expand_upload(make_tar(tmp_path / "r.tar", folder, "w"), "r.tar")), expected)
    assert_same_tables(tables(expand_upload(make_tar(tmp_path / "r.tgz", folder), "r.tgz")), expected)
    gz_folder = tmp_path / "gz" / "run"
    gz_folder.mkdir(parents=True)
    for f in folder.iterdir():
        (gz_folder / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
    sources = expand_upload(make_zip(tmp_path / "gz.zip", gz_folder), "gz.zip")
    assert [s.name for s in sources][0] == "gz.zip/run/packed_lengths_step_0.jsonl.gz"
    assert_same_tables(tables(sources), expected)


def test_junk_and_directories_are_ignored(tmp_path):
    folder = small_run(tmp_path / "run")
    junk = {"__MACOSX/run/._packed_lengths_step_0.jsonl": b"\0\5\26\7", "run/.DS_Store": b"Bud1", "run/empty/": b""}
    sources = expand_upload(make_zip(tmp_path / "run.zip", folder, junk), "run.zip")
    assert sorted(s.name for s in sources) == [f"run.zip/run/packed_lengths_step_{i}.jsonl" for i in range(3)]


def test_uploaded_gz_file_and_its_name(tmp_path):
    folder = small_run(tmp_path / "run")
    raw = (folder / "packed_lengths_step_1.jsonl").read_bytes()
    gz = tmp_path / "packed_lengths_step_1.jsonl.gz"
    gz.write_bytes(gzip.compress(raw))
    (src,) = expand_upload(gz, gz.name)
    assert src.name == "packed_lengths_step_1.jsonl.gz"
    with src.open() as f:
        assert f.read() == raw
    assert len(tables([src])["samples"]["step"]) == 8


def test_temporary_extraction_folder_is_removed_with_its_sources(tmp_path):
    folder = small_run(tmp_path / "run")
    (tmp_path / "up").mkdir()
    tarred = make_tar(tmp_path / "up" / "r.tar.gz", folder)
    sources = expand_upload(tarred, "r.tar.gz")
    assert len(list(tarred.parent.glob(".expand-*"))) == 1
    del sources
    gc.collect()
    assert list(tarred.parent.glob(".expand-*")) == []


# --------------------------------------------------------------------------- refused archives


@pytest.mark.parametrize("entry", ["../evil.jsonl", "run/../../evil.jsonl", "/etc/evil.jsonl", "C:/evil.jsonl"])
def test_zip_entries_escaping_their_folder(tmp_path, entry):
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("run/ok.jsonl", b"{}\n")
        zf.writestr(zipfile.ZipInfo(entry), b"{}\n")
    with pytest.raises(InputError) as err:
        expand_upload(path, "bad.zip")
    assert err.value.file.startswith("bad.zip/") and entry.split("/")[-1] in err.value.file


def test_zip_symlink_entry(tmp_path):
    path = tmp_path / "link.zip"
    info = zipfile.ZipInfo("run/passwd")
    info.external_attr = 0o120777 << 16
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info, b"/etc/passwd")
    with pytest.raises(InputError, match="symbolic link") as err:
        expand_upload(path, "link.zip")
    assert err.value.file == "link.zip/run/passwd"


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_tar_links_are_refused(tmp_path, kind):
    link = tarfile.TarInfo("run/packed_lengths_step_0.jsonl")
    link.type, link.linkname = kind, "/etc/passwd"
    path = tar_with(tmp_path / "links.tar.gz", [link])
    with pytest.raises(InputError, match="links") as err:
        expand_upload(path, "links.tar.gz")
    assert err.value.file == "links.tar.gz/run/packed_lengths_step_0.jsonl"


def test_tar_entry_escaping_its_folder(tmp_path):
    info = tarfile.TarInfo("../../evil.jsonl")
    info.size = 3
    path = tar_with(tmp_path / "up.tar.gz", [info], b"{}\n")
    with pytest.raises(InputError, match="escapes"):
        expand_upload(path, "up.tar.gz")


def test_zip_bomb_by_declared_total_and_ratio(tmp_path):
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.jsonl", b"\0" * (4 << 20))
    with pytest.raises(InputError, match="ratio") as err:
        expand_upload(path, "bomb.zip", Limits(max_ratio=100))
    assert err.value.file == "bomb.zip/zeros.jsonl"
    with pytest.raises(InputError, match="bomb"):
        expand_upload(path, "bomb.zip", Limits(max_total_uncompressed_bytes=1 << 20, max_ratio=1e9))


def test_tar_gz_bomb_and_file_count(tmp_path):
    big = tarfile.TarInfo("zeros.jsonl")
    big.size = 4 << 20
    path = tar_with(tmp_path / "bomb.tar.gz", [big], b"\0" * big.size)
    with pytest.raises(InputError, match="ratio"):
        expand_upload(path, "bomb.tar.gz", Limits(max_ratio=100))
    folder = small_run(tmp_path / "run")
    with pytest.raises(InputError, match="more than 2 files"):
        expand_upload(make_zip(tmp_path / "many.zip", folder), "many.zip", Limits(max_files=2))
    with pytest.raises(InputError, match="more than 2 files"):
        expand_upload(make_tar(tmp_path / "many.tgz", folder), "many.tgz", Limits(max_files=2))


def test_gz_bomb_is_stopped_while_reading(tmp_path):
    path = tmp_path / "packed_lengths_step_0.jsonl.gz"
    path.write_bytes(gzip.compress(b" " * (8 << 20)))
    (src,) = expand_upload(path, path.name, Limits(max_ratio=50))
    with pytest.raises(InputError, match="bomb") as err:
        list(read_sources([src], None, ReadResult()))
    assert err.value.file == path.name
    (src,) = expand_upload(path, path.name, Limits(max_total_uncompressed_bytes=2 << 20, max_ratio=1e9))
    with pytest.raises(InputError, match="upload size limit"):
        with src.open() as f:
            f.read()


def test_truncated_gzip_raises_naming_the_file(tmp_path):
    folder = small_run(tmp_path / "run")
    data = gzip.compress((folder / "packed_lengths_step_0.jsonl").read_bytes() * 50)
    path = tmp_path / "packed_lengths_step_0.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    (src,) = expand_upload(path, path.name)
    with pytest.raises(InputError, match="truncated") as err:
        list(read_sources([src], None, ReadResult()))
    assert err.value.file == "packed_lengths_step_0.jsonl.gz"
    # The same inside a zip: named by its path in the archive.
    with zipfile.ZipFile(tmp_path / "t.zip", "w") as zf:
        zf.writestr("run/packed_lengths_step_0.jsonl.gz", data[: len(data) // 2])
    (src,) = expand_upload(tmp_path / "t.zip", "t.zip")
    with pytest.raises(InputError, match="truncated") as err:
        list(read_sources([src], None, ReadResult()))
    assert err.value.file == "t.zip/run/packed_lengths_step_0.jsonl.gz"


def test_truncated_or_corrupt_archives(tmp_path):
    folder = small_run(tmp_path / "run")
    data = make_tar(tmp_path / "ok.tar.gz", folder).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        expand_upload(cut, "cut.tar.gz")
    assert err.value.file == "cut.tar.gz"
    bad_zip = tmp_path / "bad.zip"
    bad_zip.write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(InputError, match="zip") as err:
        expand_upload(bad_zip, "bad.zip")
    assert err.value.file == "bad.zip"


def test_archive_kind_sniffed_when_the_name_says_nothing(tmp_path):
    folder = small_run(tmp_path / "run")
    blob = make_zip(tmp_path / "upload.bin", folder)
    sources = expand_upload(blob, "upload")
    assert len(sources) == 3 and sources[0].name.startswith("upload/run/")

"""verl.utils.fs: local paths and file:// URLs as upstream; hdfs:// is recognised and refused with a clear error."""

import os

import pytest

from verl.utils import fs


def _folder(root, name="model"):
    folder = root / name
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "weights.bin").write_bytes(b"x" * 10)
    return folder


def test_is_non_local_only_for_hdfs():
    assert fs.is_non_local("hdfs://cluster/data")
    assert not fs.is_non_local("/data/model")
    assert not fs.is_non_local("file:///data/model")


def test_copy_to_local_returns_local_paths_and_strips_file_urls(tmp_path):
    folder = _folder(tmp_path)
    assert fs.copy_to_local(str(folder)) == str(folder)
    assert fs.copy_to_local(f"file://{folder}") == str(folder)
    assert fs.copy_local_path_from_hdfs(str(folder)) == str(folder)


def test_copy_to_local_refuses_remote_paths_and_a_trailing_slash(tmp_path):
    with pytest.raises(ValueError, match="only local paths"):
        fs.copy_to_local("hdfs://cluster/model")
    with pytest.raises(AssertionError):
        fs.copy_to_local(str(tmp_path) + "/")


def test_md5_and_local_temp_path(tmp_path):
    assert fs.md5_encode("abc") == "900150983cd24fb0d6963f7d28e17f72"
    dst = fs.get_local_temp_path("hdfs://c/dir/model", str(tmp_path))
    assert dst == os.path.join(str(tmp_path), fs.md5_encode("hdfs://c/dir/model"), "model")
    assert os.path.isdir(os.path.dirname(dst))


def test_verify_copy_compares_entries_and_sizes(tmp_path):
    src = _folder(tmp_path, "a")
    dst = tmp_path / "b"
    fs.copy(str(src), str(dst))
    assert fs.verify_copy(str(src), str(dst))
    (dst / "sub" / "weights.bin").write_bytes(b"x" * 9)
    assert not fs.verify_copy(str(src), str(dst))
    (dst / "sub" / "weights.bin").write_bytes(b"x" * 10)
    (dst / "extra.txt").write_text("")
    assert not fs.verify_copy(str(src), str(dst))
    assert not fs.verify_copy(str(src), str(tmp_path / "missing"))
    assert fs.verify_copy(str(src / "config.json"), str(dst / "config.json"))


def test_copy_to_shm_copies_once_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setattr(fs, "SHM_CACHE_ROOT", str(tmp_path / "shm"))
    src = _folder(tmp_path)
    out = fs.copy_to_local(str(src), use_shm=True)
    assert out == os.path.join(str(tmp_path / "shm"), fs.md5_encode(str(src)), "model")
    assert fs.verify_copy(str(src), out)
    marker = os.path.join(out, "marker")
    open(marker, "w").close()  # a complete copy is reused, not copied again
    (src / "marker").write_text("")
    assert fs.copy_to_shm(str(src)) == out and os.path.exists(marker)


def test_exists_makedirs_and_local_mkdir_safe(tmp_path, monkeypatch):
    target = tmp_path / "x" / "y"
    fs.makedirs(f"file://{target}", exist_ok=True)
    assert fs.exists(str(target)) and fs.exists(f"file://{target}")
    monkeypatch.chdir(tmp_path)
    assert fs.local_mkdir_safe("rel/dir") == str(tmp_path / "rel" / "dir")
    assert (tmp_path / "rel" / "dir").is_dir()

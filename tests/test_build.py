"""setup.py finds librocksdb through pkg-config only, and a missing or unusable librocksdb is
one clear build error (RocksDBNotFound, a SystemExit) that says what to install."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def setup_module_():
    spec = importlib.util.spec_from_file_location("stateengine_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() only runs under __main__
    return module


def _says_what_to_install(message: str) -> None:
    assert "apt-get install librocksdb-dev" in message
    assert "scripts/build-rocksdb.sh" in message and "PKG_CONFIG_PATH" in message


def test_missing_pkg_config_package_is_one_clear_error(setup_module_):
    assert issubclass(setup_module_.RocksDBNotFound, SystemExit)
    with pytest.raises(setup_module_.RocksDBNotFound) as info:
        setup_module_.rocksdb_build_flags("no-such-rocksdb-package")
    message = str(info.value)
    assert "no-such-rocksdb-package" in message and "librocksdb is missing" in message
    _says_what_to_install(message)


def test_missing_pkg_config_tool_is_one_clear_error(setup_module_, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pkg-config binary anywhere
    with pytest.raises(setup_module_.RocksDBNotFound) as info:
        setup_module_.rocksdb_build_flags()
    assert "pkg-config is not installed" in str(info.value)
    _says_what_to_install(str(info.value))


def test_too_old_rocksdb_is_refused(setup_module_, monkeypatch, tmp_path):
    (tmp_path / "oldrocks.pc").write_text(
        "Name: oldrocks\nDescription: test\nVersion: 6.29.5\nLibs: -lrocksdb\nCflags:\n")
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    with pytest.raises(setup_module_.RocksDBNotFound) as info:
        setup_module_.rocksdb_build_flags("oldrocks")
    assert "6.29.5 is too old" in str(info.value)
    _says_what_to_install(str(info.value))


def test_installed_rocksdb_flags_are_found(setup_module_):
    flags = setup_module_.rocksdb_build_flags()
    assert "rocksdb" in flags["libraries"]
    assert set(flags) == {"include_dirs", "extra_compile_args", "library_dirs", "libraries",
                          "extra_link_args"}


def test_pc_files_from_pkg_config_path_are_used(setup_module_, monkeypatch, tmp_path):
    """A rocksdb.pc in a folder on PKG_CONFIG_PATH (scripts/build-rocksdb.sh writes one)."""
    (tmp_path / "rocksdb.pc").write_text(
        f"prefix={tmp_path}\nName: rocksdb\nDescription: test\nVersion: 9.10.0\n"
        "Libs: -L${prefix}/lib -lrocksdb -lzstd -pthread\nCflags: -I${prefix}/include -DROCKSDB_X\n")
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))  # hide the system's rocksdb.pc
    flags = setup_module_.rocksdb_build_flags()
    assert flags["include_dirs"] == [f"{tmp_path}/include"]
    assert flags["library_dirs"] == [f"{tmp_path}/lib"]
    assert flags["libraries"][:2] == ["rocksdb", "zstd"]
    assert "-DROCKSDB_X" in flags["extra_compile_args"]
    assert "-pthread" in flags["extra_link_args"]


def test_static_rocksdb_pc_links_snappy_once(setup_module_, monkeypatch, tmp_path):
    """scripts/build-rocksdb.sh's rocksdb.pc links snappy's static archive and hides RocksDB's
    symbols; no shared -lsnappy follows it (that would make the wheel need libsnappy.so)."""
    (tmp_path / "rocksdb.pc").write_text(
        f"prefix={tmp_path}\nName: rocksdb\nDescription: test\nVersion: 7.8.3\n"
        "Libs: -L${prefix}/lib -l:librocksdb.a -l:libsnappy.a -l:liblz4.a -lpthread "
        "-Wl,--exclude-libs,ALL\nCflags: -I${prefix}/include\n")
    (tmp_path / "snappy.pc").write_text(
        "Name: snappy\nDescription: test\nVersion: 1.1.9\nLibs: -lsnappy\nCflags:\n")
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))
    flags = setup_module_.rocksdb_build_flags()
    assert flags["libraries"] == [":librocksdb.a", ":libsnappy.a", ":liblz4.a", "pthread"]
    assert flags["extra_link_args"] == ["-Wl,--exclude-libs,ALL"]

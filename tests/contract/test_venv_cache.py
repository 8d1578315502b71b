"""Environments built once per machine and hard-linked into each clone
(tests/helpers/venv_cache.py, the Makefile's install recipes).

Real virtual environments (``venv`` without pip, so no index is needed) stand in for
``make install``'s: an editable trcomp as a .pth file naming the clone's sources, a
console script whose ``#!`` line names the environment's Python, and the editable
install's direct_url.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import venv
from pathlib import Path

import pytest

from tests.helpers import venv_cache

SCRIPT = "trcomp-where"


def create(path: Path) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)


def clone(path: Path, pyproject: str = "[project]\nname = 'trcomp'\n") -> Path:
    (path / "sdk" / "trcomp").mkdir(parents=True)
    (path / "sdk" / "trcomp" / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text(pyproject)
    (path / "Makefile").write_text("install:\n\tpip install -e .\n")
    return path


def key_files(path: Path) -> list[Path]:
    return [path / "pyproject.toml", path / "Makefile"]


def site(env: Path) -> Path:
    return next(env.glob("lib/python*/site-packages"))


def pip_install(env: Path, source: Path) -> None:
    """What pip's editable install leaves that names the clone and the environment."""
    (site(env) / "__editable__.trcomp.pth").write_text(f"{source / 'sdk'}\n")
    info = site(env) / "trcomp-0.1.0.dist-info"
    info.mkdir()
    (info / "direct_url.json").write_text(json.dumps({"url": f"file://{source}"}))
    (site(env) / "untouched.py").write_text("VALUE = 1\n")
    script = env / "bin" / SCRIPT
    script.write_text(
        f"#!{env}/bin/python\nimport sys, trcomp\nprint(sys.prefix)\nprint(trcomp.__file__)\n"
    )
    script.chmod(0o755)


def build(
    monkeypatch: pytest.MonkeyPatch, source: Path, cache: Path, kind: str = "install"
) -> Path:
    """``make install`` in ``source``: restore or else pip's install, then save."""
    monkeypatch.chdir(source)
    env = source / ".venv"
    if not venv_cache.restore(kind, env, key_files(source), root=cache, create=create):
        pip_install(env, source)
        venv_cache.save(env)
    return env


def entry(cache: Path, kind: str = "install") -> Path:
    """The one cache entry of ``kind``."""
    (found,) = (p for p in cache.iterdir() if re.fullmatch(rf"{kind}-[0-9a-f]{{16}}", p.name))
    return found


def entries(cache: Path) -> list[str]:
    return sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir() if not p.name.startswith("."))


def test_a_new_clone_gets_the_saved_environment_relocated_and_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = build(monkeypatch, clone(tmp_path / "a"), cache)
    assert not (first / venv_cache.FRESH).exists()
    assert entries(cache) == ["install"]
    subprocess.run(["rm", "-rf", str(tmp_path / "a")], check=True)

    second = tmp_path / "b" / "work"
    env = build(monkeypatch, clone(second), cache)

    where = subprocess.run([str(env / "bin" / SCRIPT)], capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.splitlines() == [str(env), str(second / "sdk" / "trcomp" / "__init__.py")]
    for text in (
        "pyvenv.cfg",
        "bin/activate",
        f"{site(env).relative_to(env)}/__editable__.trcomp.pth",
    ):
        assert str(tmp_path / "a") not in (env / text).read_text(), text
    url = json.loads((site(env) / "trcomp-0.1.0.dist-info" / "direct_url.json").read_text())
    assert url == {"url": f"file://{second}"}

    # Rewritten files are the clone's own; the rest are links to the cache's.
    kept = entry(cache) / "venv"
    assert f"{tmp_path / 'a'}/.venv/bin/python" in (kept / "bin" / SCRIPT).read_text()
    assert (kept / "bin" / SCRIPT).stat().st_ino != (env / "bin" / SCRIPT).stat().st_ino
    linked = site(env) / "untouched.py"
    assert linked.stat().st_ino == (site(kept) / "untouched.py").stat().st_ino
    assert not (kept / ".installed").exists()


def test_the_key_holds_what_the_install_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = key_files(clone(tmp_path / "a"))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    base = venv_cache.key("install", files)
    assert venv_cache.key("install", files) == base
    assert venv_cache.key("install-v3", files) != base

    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    capped = venv_cache.key("install", files)
    assert capped != base
    constraints.write_text("torch<=2.15\n")
    assert venv_cache.key("install", files) != capped

    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'changed'\n")
    assert venv_cache.key("install", files) not in {base, capped}


def test_an_existing_environment_is_left_to_pip_and_not_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    build(monkeypatch, clone(tmp_path / "a"), cache)
    source = clone(tmp_path / "b")
    env = source / ".venv"
    create(env)
    monkeypatch.chdir(source)

    assert not venv_cache.restore("install", env, key_files(source), root=cache, create=create)
    assert not (site(env) / "__editable__.trcomp.pth").exists()
    pip_install(env, source)
    assert not venv_cache.save(env)
    assert "/a/" in (entry(cache) / "venv" / "bin" / SCRIPT).read_text()


def test_an_entry_that_fails_its_check_is_removed_and_pip_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build(monkeypatch, clone(tmp_path / "a"), cache)
    (site(entry(cache) / "venv") / "__editable__.trcomp.pth").unlink()  # trcomp no longer imports

    env = build(monkeypatch, clone(tmp_path / "b"), cache)

    assert "unusable, removed" in capsys.readouterr().out
    assert (site(env) / "__editable__.trcomp.pth").read_text().startswith(str(tmp_path / "b"))
    assert venv_cache.check(env, tmp_path / "b") is None
    assert entries(cache) == ["install"]  # saved anew by the pip-built clone
    assert "/b/" in (entry(cache) / "venv" / "bin" / SCRIPT).read_text()


def test_an_entry_past_its_age_or_unreadable_is_built_anew_and_other_keys_are_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    build(monkeypatch, clone(tmp_path / "a"), cache)
    build(monkeypatch, clone(tmp_path / "v3"), cache, kind="install-v3")
    old = entry(cache)
    meta = json.loads((old / venv_cache.META).read_text())
    meta["created"] = time.time() - venv_cache.MAX_AGE_S - 60
    (old / venv_cache.META).write_text(json.dumps(meta))

    build(monkeypatch, clone(tmp_path / "b"), cache)
    assert "/b/" in (entry(cache) / "venv" / "bin" / SCRIPT).read_text()

    (entry(cache) / venv_cache.META).write_text("{")
    build(monkeypatch, clone(tmp_path / "d"), cache)
    assert "/d/" in (entry(cache) / "venv" / "bin" / SCRIPT).read_text()

    changed = clone(tmp_path / "c", pyproject="[project]\nname = 'trcomp'\n# changed\n")
    build(monkeypatch, changed, cache)
    assert entries(cache) == ["install", "install-v3"]
    assert "/c/" in (entry(cache) / "venv" / "bin" / SCRIPT).read_text()


def test_off_switch_builds_with_pip_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(venv_cache.ENV_SWITCH, "off")
    cache = tmp_path / "cache"
    env = build(monkeypatch, clone(tmp_path / "a"), cache)
    assert os.access(env / "bin" / SCRIPT, os.X_OK)
    assert not cache.exists()

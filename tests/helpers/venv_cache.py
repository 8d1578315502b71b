"""Virtual environments built once per machine and hard-linked into each clone.

``make install``, ``make install-214`` and ``make install-v3`` build an environment
with pip (``.venv`` alone is 8.3 GB: torch with its CUDA libraries, torch-xla, jax),
149-198 s of a clean clone's CI on two cores. This module keeps each environment a
clone built from nothing in a per-machine cache and gives the next clean clone a
hard-linked copy of it, with the few files that name the old clone's paths rewritten.

Reuse is safe when the copy is what pip would build now:

- The cache *key* is everything the install reads here: the install's name, the
  files its recipe reads (pyproject.toml, the Makefile, ...), the Python that builds it
  (version and executable), pip's configuration (``PIP_*`` variables, the pip.conf
  files, and the constraints and requirements files they name).
- Only an environment built from nothing is saved: one that pip brought up to date
  may hold what the current recipe would not install.
- An entry is used for :data:`MAX_AGE_S` (7 days), so releases of the packages
  pyproject.toml does not pin reach the cache within a week.
- A restored environment is checked before it is used: ``pip check``, and trcomp
  imported from the new clone's sources. An entry that fails is removed and the
  environment is built with pip.
- Files are shared by hard links. pip, Python's bytecode writer and ``sed -i``
  replace a file rather than write into it, so a change in one clone's environment
  does not reach the cache; the files rewritten here are new files too.

``TRCOMP_VENV_CACHE=off`` turns it off; ``TRCOMP_VENV_CACHE_ROOT`` moves it (default
``~/.cache/trcomp-tests/venvs``). Standard library only: it runs before any
environment exists. The Makefile's install recipes call::

    python3 tests/helpers/venv_cache.py restore KIND VENV KEY_FILE...   # exit 0: restored
    python3 tests/helpers/venv_cache.py save VENV                       # after pip's install
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MAX_AGE_S = 7 * 24 * 3600
ENV_SWITCH = "TRCOMP_VENV_CACHE"
ENV_ROOT = "TRCOMP_VENV_CACHE_ROOT"
# Written into an environment this module created from nothing, naming the entry it is
# to become (its key, taken before pip ran); ``save`` keeps only those.
FRESH = ".trcomp-built-from-nothing"
META = "meta.json"
SKIP = frozenset({FRESH, ".installed"})
# What a restored environment must pass: trcomp from the new clone's sources.
IMPORT_CHECK = (
    "import os, sys, trcomp; root = os.path.realpath(sys.argv[1]); "
    "path = os.path.realpath(trcomp.__file__); "
    "assert path.startswith(root + os.sep), f'trcomp from {path}, not {root}'"
)


def default_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get(ENV_ROOT) or Path(base) / "trcomp-tests" / "venvs")


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "on").lower() not in {"off", "0", "false", "no"}


def _pip_config_files() -> list[Path]:
    """pip's configuration files, in the places pip reads them on Linux."""
    files = [Path(os.environ["PIP_CONFIG_FILE"])] if os.environ.get("PIP_CONFIG_FILE") else []
    dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files += [Path(d) / "pip" / "pip.conf" for d in dirs if d]
    files.append(Path("/etc/pip.conf"))
    home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    return files


def _named_files(config: Path) -> list[Path]:
    """The constraints and requirements files a pip.conf names."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(config)
    except configparser.Error:
        return []
    named = []
    for section in parser.sections():
        for option in ("constraint", "constraints", "requirement", "requirements"):
            named += [Path(p) for p in parser.get(section, option, fallback="").split()]
    return named


def key(kind: str, key_files: Iterable[Path]) -> str:
    """The cache key of ``kind`` built from ``key_files`` here (see the module's doc)."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("kind", kind.encode())
    add("python", f"{sys.version}\0{os.path.realpath(sys.executable)}".encode())
    pip_env = sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))
    add("pip-env", json.dumps(pip_env).encode())
    extra = [Path(v) for k, v in pip_env if k in {"PIP_CONSTRAINT", "PIP_REQUIREMENT"}]
    for config in _pip_config_files():
        if config.is_file():
            add(f"pip-config {config}", config.read_bytes())
            extra += _named_files(config)
    # The clone's files by position (clones lie in different folders), pip's by path.
    named = [(f"key file {i}", p) for i, p in enumerate(key_files)]
    for label, path in [*named, *((f"pip file {p}", p) for p in extra)]:
        add(label, path.read_bytes() if path.is_file() else b"<absent>")
    return digest.hexdigest()[:16]


def _entry(root: Path, kind: str, key_files: Iterable[Path]) -> Path:
    return root / f"{kind}-{key(kind, key_files)}"


def _say(message: str) -> None:
    print(f"venv cache: {message}", flush=True)


def _create(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)


def _site_packages(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python*/site-packages"))


def _files_naming_paths(venv: Path) -> list[Path]:
    """The files of an environment that name its own or its clone's path: scripts' ``#!``
    lines and activate scripts (bin/), pyvenv.cfg, .pth files and setuptools' editable
    finder (site-packages' top level), and the editable install's direct_url.json."""
    files = [p for p in (venv / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    files.append(venv / "pyvenv.cfg")
    for site in _site_packages(venv):
        files += [p for p in site.iterdir() if p.is_file() and not p.is_symlink()]
        files += site.glob("*.dist-info/direct_url.json")
    return files


def _relocate(venv: Path, moves: list[tuple[str, str]]) -> int:
    """Rewrites each (old, new) path prefix in :func:`_files_naming_paths`; a rewritten
    file is a new file, so the hard-linked original in the cache keeps its text."""
    # One pass, longest first: a new path that contains an old one is not rewritten again.
    table = {old.encode(): new.encode() for old, new in moves}
    olds = sorted(table, key=len, reverse=True)
    pattern = re.compile(b"(" + b"|".join(map(re.escape, olds)) + rb")(?![\w.-])")
    rewritten = 0
    for path in _files_naming_paths(venv):
        original = path.read_bytes()
        data = pattern.sub(lambda match: table[match.group(1)], original)
        if data != original:
            fresh = path.with_name(f".{path.name}.relocating")
            fresh.write_bytes(data)
            shutil.copymode(path, fresh)
            os.replace(fresh, path)
            rewritten += 1
    return rewritten


def check(venv: Path, clone: Path) -> str | None:
    """Why a restored environment is unusable (``None`` when it is usable)."""
    python = str(venv / "bin" / "python")
    runs = [[python, "-c", IMPORT_CHECK, str(clone)]]
    if any((site / "pip").is_dir() for site in _site_packages(venv)):
        runs.append([python, "-m", "pip", "check"])
    # Only the environment's own paths: a PYTHONPATH could supply what it lacks.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for command in runs:
        done = subprocess.run(command, capture_output=True, text=True, cwd=clone, env=env)
        if done.returncode:
            return f"{' '.join(command[1:3])} failed: {(done.stdout + done.stderr).strip()}"
    return None


def restore(
    kind: str,
    venv: Path,
    key_files: list[Path],
    *,
    root: Path | None = None,
    create: Callable[[Path], None] = _create,
) -> bool:
    """Gives ``venv`` (absent) a copy of the cached environment of ``kind``; returns
    ``True`` when it did. Otherwise ``venv`` is left for pip: an existing one as it is,
    an absent one created empty and marked as built from nothing, with the entry
    :func:`save` is to keep it as.
    """
    venv = venv.absolute()
    if venv.exists():
        _say(f"{venv.name} exists: pip brings it up to date (not saved to the cache)")
        return False
    root = root or default_root()
    entry = _entry(root, kind, key_files)
    meta_path = entry / META
    if enabled() and meta_path.is_file():
        meta = _meta(meta_path)
        age = time.time() - meta["created"] if meta else MAX_AGE_S + 1
        if meta is None or age > MAX_AGE_S:
            why = f"{age / 86400:.1f} days old" if meta else f"unreadable {META}"
            _say(f"{entry.name} is {why}: removed, building anew")
            shutil.rmtree(entry, ignore_errors=True)
        else:
            started = time.monotonic()
            problem = _copy(entry, venv, meta)
            if problem is None:
                _say(
                    f"{venv.name} restored from {entry} ({age / 3600:.1f} h old) in "
                    f"{time.monotonic() - started:.1f} s"
                )
                return True
            _say(f"{entry.name} is unusable, removed; building anew ({problem})")
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(entry, ignore_errors=True)
    elif enabled():
        _say(f"no {entry.name} in {root}: pip builds {venv.name}, then it is kept there")
    create(venv)
    if enabled():
        fresh = {"kind": kind, "entry": str(entry)}
        (venv / FRESH).write_text(json.dumps(fresh) + "\n")
    return False


def _meta(path: Path) -> dict[str, Any] | None:
    """An entry's record of where it was built and when (``None`` if unreadable)."""
    try:
        meta = json.loads(path.read_text())
        if isinstance(meta["venv"], str) and isinstance(meta["clone"], str):
            return {**meta, "created": float(meta["created"])}
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return None


def _copy(entry: Path, venv: Path, meta: dict[str, Any]) -> str | None:
    """Hard-links the entry's environment to ``venv``, relocates and checks it."""
    clone = Path.cwd().absolute()
    copying = venv.with_name(f".{venv.name}.restoring-{os.getpid()}")
    linked = subprocess.run(["cp", "-al", str(entry / "venv"), str(copying)], capture_output=True)
    if linked.returncode:
        shutil.rmtree(copying, ignore_errors=True)
        return f"cp -al: {linked.stderr.decode().strip()}"
    _relocate(copying, [(meta["venv"], str(venv)), (meta["clone"], str(clone))])
    os.replace(copying, venv)
    return check(venv, clone)


def save(venv: Path) -> bool:
    """Keeps ``venv`` as the entry :func:`restore` named when it created it from nothing;
    replaces the entries of the same install with other keys. Returns whether it saved.
    A cache that cannot be written costs the next clone an install, not this one."""
    venv = venv.absolute()
    marker = venv / FRESH
    if not marker.exists():
        return False
    fresh = json.loads(marker.read_text())
    marker.unlink()
    kind, entry = fresh["kind"], Path(fresh["entry"])
    root = entry.parent
    building = root / f".{entry.name}.saving-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        subprocess.run(["cp", "-al", str(venv), str(building / "venv")], check=True)
        for name in SKIP:
            (building / "venv" / name).unlink(missing_ok=True)
        meta = {"venv": str(venv), "clone": str(Path.cwd().absolute()), "created": time.time()}
        (building / META).write_text(json.dumps(meta, indent=1) + "\n")
        if entry.exists():  # another clone saved the same key meanwhile
            shutil.rmtree(building)
        else:
            os.replace(building, entry)
        for other in root.glob(f"{kind}-*"):
            if other != entry and re.fullmatch(rf"{re.escape(kind)}-[0-9a-f]{{16}}", other.name):
                shutil.rmtree(other, ignore_errors=True)
    except (OSError, subprocess.CalledProcessError) as error:
        shutil.rmtree(building, ignore_errors=True)
        _say(f"not saved ({error}); the next clean clone installs with pip")
        return False
    _say(f"{venv.name} saved as {entry}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    restoring = actions.add_parser("restore", help="exit 0: restored; 1: left to pip")
    restoring.add_argument("kind", help="the install's name: install, install-214, install-v3")
    restoring.add_argument("venv", type=Path)
    restoring.add_argument("key_files", type=Path, nargs="*", help="files the install reads")
    saving = actions.add_parser("save", help="keep what pip built in what restore created")
    saving.add_argument("venv", type=Path)
    args = parser.parse_args(argv)
    if args.action == "restore":
        return 0 if restore(args.kind, args.venv, args.key_files) else 1
    save(args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())

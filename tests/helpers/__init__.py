"""What test modules share: plain functions and classes, imported as ``tests.helpers.<name>``.

- ``aws``: a moto server in its own process, an AWS error server, and an environment
  that points boto3 at them (standard library only: the SDK v3 tests import it too).
- ``jobs``: the toolkit's ``train`` run on a temporary /opt/ml tree.
- ``hook``: a child process under the in-process metrics hook; hook modules by path.
- ``records``: the hook's per-rank records of a job, and the compilations they count.
- ``redis_server``: a real ``redis-server`` on a free port of 127.0.0.1 (password, TLS).
- ``hung_server``: a socket that accepts and never answers (a store that hangs).
- ``commands``: stand-in command-line tools (a fake ``docker``) on a PATH of their own.
- ``engines``: skip marks for tests that need torch-xla (absent on torch >= 2.10).

Fixtures stay in ``conftest.py`` files and may call these. pytest puts the repository
root on ``sys.path`` (``pythonpath`` in pyproject.toml), so ``tests`` is this package.
"""

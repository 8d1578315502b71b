"""The start-up hook (hook/sitecustomize.py, trcomp_container.inprocess), in a Python child."""

from __future__ import annotations

import json

import pytest

from tests.helpers.hook import run_hooked

STEPS = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
raise KeyError("missing column 'label'")
"""


@pytest.mark.slow
def test_hook_records_steps_and_the_uncaught_exception(tmp_path):
    done = run_hooked(tmp_path, STEPS)
    assert done.returncode == 1
    assert "missing column" in done.stderr  # the normal traceback still prints
    (path,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    record = json.loads(path.read_text())
    assert record["steps"] == 6 and len(record["step_intervals_s"]) == 5
    # The first step was recorded (a count, not a clock), on the CPU, and nothing compiled.
    assert isinstance(record["first_step_s"], float) and record["step_clock"] == "cpu"
    assert record["compile"]["events"] == 0 and record["compile"]["graphs"] == 0
    assert record["error"]["type"] == "KeyError"
    assert "missing column 'label'" in record["error"]["message"]
    assert "Traceback" in record["error"]["traceback_tail"]


@pytest.mark.slow
def test_a_library_that_probes_for_torch_first_leaves_the_hook_on(tmp_path):
    # `import datasets` asks importlib.util.find_spec("torch") before the script imports
    # torch: the probe must not use up the hook's callback for torch.
    probe = "import importlib.util\nassert importlib.util.find_spec('torch') is not None\n"
    done = run_hooked(tmp_path, probe + STEPS)
    assert done.returncode == 1, done.stderr
    (path,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    assert json.loads(path.read_text())["steps"] == 6


def test_processes_that_do_nothing_leave_no_file(tmp_path):
    assert run_hooked(tmp_path, "print('hi')").returncode == 0
    assert not list((tmp_path / "ranks").glob("*.json"))


def test_an_images_own_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.IMAGE_HOOK = True\n")
    done = run_hooked(tmp_path, "import builtins; print(builtins.IMAGE_HOOK)", str(other))
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.slow
def test_inductor_options_apply_one_by_one_and_a_refused_one_is_reported(tmp_path):
    env = {
        "TRCOMP_CONFIG": json.dumps(
            {"backend": "inductor", "inductor_options": {"no_such_option": 1, "max_autotune": True}}
        ),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    code = (
        "import torch, torch._inductor.config as c, torch._inductor.codecache as cc\n"
        "print(c.max_autotune, cc._HEADER_DIR)\n"
    )
    done = run_hooked(tmp_path, code, extra_env=env)
    assert done.returncode == 0, done.stderr
    applied, headers = done.stdout.split()
    assert applied == "True"  # the good option applied although the other one failed
    # Precompiled headers live in the job's cache, not in $TMPDIR/torchinductor_<user>.
    assert headers == str(tmp_path / "cache" / "precompiled_headers")
    assert "no_such_option=1 was not applied" in done.stderr
    (path,) = (tmp_path / "ranks").glob("rank3-pid*.json")
    (warning,) = json.loads(path.read_text())["warnings"]
    assert "no_such_option" in warning

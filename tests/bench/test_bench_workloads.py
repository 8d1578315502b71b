"""Reference workloads and user models: built in this process, no compiler."""

from __future__ import annotations

from pathlib import Path

import pytest

from trcomp_bench.workloads import WORKLOADS, get_workload, load_factory, loss_of

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_each_workload_trains_a_step_with_the_same_data_every_time(
    name: str, clean_env: pytest.MonkeyPatch
) -> None:
    import torch

    clean_env.setenv("USE_TORCH_XLA", "0")
    model, batch_fn = get_workload(name).factory("tiny")(4)
    batch = batch_fn(3)
    again = batch_fn(3)
    for key in batch if isinstance(batch, dict) else range(len(batch)):
        assert torch.equal(batch[key], again[key])  # the same step gives the same data
    loss = loss_of(model(**batch) if isinstance(batch, dict) else model(*batch))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    dropouts = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert all(p == 0.0 for p in dropouts)  # compilers draw other random numbers


def test_unknown_workload_and_size_name_the_choices() -> None:
    with pytest.raises(ValueError, match="gpt2, bert, mlp, cnn"):
        get_workload("resnet")
    with pytest.raises(ValueError, match="tiny, small"):
        get_workload("mlp").factory("huge")


def test_user_factory_from_a_file_and_from_a_module(monkeypatch: pytest.MonkeyPatch) -> None:
    make = load_factory(f"{HERE / 'my_model.py'}:make")
    model, batch_fn = make(2)
    assert loss_of(model(*batch_fn(0))).ndim == 0
    monkeypatch.syspath_prepend(str(HERE))
    assert load_factory("my_model:make").__name__ == "make"
    with pytest.raises(ValueError, match="module:factory"):
        load_factory("my_model")
    with pytest.raises(ValueError, match="no callable 'nope'"):
        load_factory("my_model:nope")


def test_loss_of_accepts_tensor_attribute_and_mapping() -> None:
    import torch

    loss = torch.tensor(1.5)

    class Output:
        def __init__(self) -> None:
            self.loss = loss

    assert loss_of(loss) is loss and loss_of(Output()) is loss and loss_of({"loss": loss}) is loss
    with pytest.raises(TypeError, match="scalar loss"):
        loss_of(torch.ones(3))

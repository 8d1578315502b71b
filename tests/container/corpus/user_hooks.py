"""Pattern: the script's own hooks: forward hooks that keep activations (one for the loss,
one appended to a list), a full backward hook that logs the gradient's norm.

Dynamo breaks the graph at the backward hook and compiles only the list-appending
hook, once per list length, until its recompile limit: the record must say the
model's computation never ran compiled, and name the frame that hit the limit.

While a module is checked against eager (its first compiled step) its forward and
backward also run for the check, so hooks are called more often in that step
(docs/runtime.md, "Verified compile"): the script reads the values its own calls
left (the last ones), which match; the number of hook calls is kept as a note.
"""

import torch
from corpus_report import Report
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
features: dict[str, torch.Tensor] = {}
grad_norms: list[float] = []
kept: list[torch.Tensor] = []
model[1].register_forward_hook(lambda module, args, out: features.__setitem__("hidden", out))
model[3].register_forward_hook(lambda module, args, out: kept.append(out.detach()))
model[2].register_full_backward_hook(
    lambda module, grad_in, grad_out: grad_norms.append(float(grad_out[0].norm()))
)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
report = Report()
for _ in range(16):
    x = torch.randn(16, 8)
    out = model(x)
    loss = out.pow(2).mean() + 1e-3 * features["hidden"].pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    report.step(loss)
    report.check(grad_norm=grad_norms[-1])
report.save(hook_calls=len(grad_norms))

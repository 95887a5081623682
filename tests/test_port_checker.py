"""``python -m ggmlgrad port``: import rewrites, missing-name reports with lines, warnings, the CLI."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import torch  # noqa: F401  (the tensor-method notes use torch.Tensor's names)

from ggmlgrad.port import check_source

TRAIN = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch import optim
    from torch.utils.data import DataLoader, TensorDataset
    from torch.optim.lr_scheduler import StepLR


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))


    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    loader = DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=32, shuffle=True)
    model = Net().to(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    sched = StepLR(opt, step_size=10, gamma=0.5)
    for epoch in range(30):
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
            loss.backward()
            opt.step()
        sched.step()
    with torch.no_grad():
        acc = (model(torch.tensor(x)).argmax(1) == torch.tensor(y)).float().mean().item()
    RESULT = (loss.item(), acc)
""")


def test_a_supported_script_ports_with_no_missing_name_and_runs():
    r = check_source(TRAIN)
    assert r.missing == [] and r.warnings == []
    head = r.ported.splitlines()[:7]
    assert head == ["import numpy as np", "import ggmlgrad as torch", "import ggmlgrad.nn as nn",
                    "import ggmlgrad.nn.functional as F", "from ggmlgrad import optim",
                    "from ggmlgrad.utils.data import DataLoader, TensorDataset",
                    "from ggmlgrad.optim.lr_scheduler import StepLR"]
    assert r.ported.splitlines()[7:] == TRAIN.splitlines()[7:]      # the body is unchanged
    ns: dict = {}
    exec(compile(r.ported, "<ported>", "exec"), ns)                  # noqa: S102  (our own test script)
    loss, acc = ns["RESULT"]
    import ggmlgrad as gg
    assert isinstance(ns["model"], gg.nn.Module) and ns["torch"] is gg
    assert loss < 0.5 and acc > 0.9


def test_missing_names_are_listed_with_their_lines():
    src = textwrap.dedent("""\
        import numpy as np
        import torch
        import torch.nn as tnn
        from torch.nn import NotALayerAnywhere, Linear
        from torch.nonexistent_module import thing

        def build():
            layer = tnn.AlsoNotALayer(3)
            y = torch.nn.functional.not_a_function(layer)
            z = torch.zeros(2).q_scale()
            return torch.jit.script(layer), Linear(2, 2), y, z, np.zeros(2).q_scale()
        """)
    r = check_source(src)
    got = [(m.line, m.name, m.kind) for m in r.missing]
    assert got == [(4, "torch.nn.NotALayerAnywhere", "name"), (5, "torch.nonexistent_module", "import"),
                   (8, "torch.nn.AlsoNotALayer", "name"), (9, "torch.nn.functional.not_a_function", "name"),
                   (11, "torch.jit", "name")]
    assert [(m.line, m.name) for m in r.maybe_methods] == [(10, "Tensor.q_scale")]   # not NumPy's on line 11
    assert "from ggmlgrad.nn import NotALayerAnywhere, Linear" in r.ported      # rewritten all the same
    assert "from torch.nonexistent_module import thing" in r.ported             # no such ggmlgrad module: kept


def test_a_leftover_torch_module_import_is_kept_and_warned_about():
    src = "import torch\nimport torch.onnx\nimport torch.nn as nn, os\nx = 'torch.LongTensor'\n"
    r = check_source(src)
    assert [(m.line, m.name, m.kind) for m in r.missing] == [(2, "torch.onnx", "import")]
    assert r.ported.splitlines() == ["import ggmlgrad as torch", "import torch.onnx", "import ggmlgrad.nn as nn, os",
                                     "x = 'torch.LongTensor'"]
    warnings = dict(r.warnings)
    assert "binds `torch` to real PyTorch" in warnings[2] and "'torch.LongTensor'" in warnings[4]


def test_submodule_imports_and_nested_scopes():
    src = textwrap.dedent("""\
        def f():
            import torch.utils.data
            import torch.distributions.categorical as cat
            return torch.utils.data.DataLoader, cat.Categorical

        def g():
            return torch.utils.data.NoSuchLoader
        """)
    r = check_source(src)
    assert [(m.line, m.name) for m in r.missing] == [(7, "torch.utils.data.NoSuchLoader")]
    assert "    import ggmlgrad.utils.data, ggmlgrad as torch" in r.ported
    assert "    import ggmlgrad.distributions.categorical as cat" in r.ported
    ns: dict = {}
    exec(compile(r.ported, "<ported>", "exec"), ns)                  # noqa: S102
    import ggmlgrad as gg
    assert ns["f"]() == (gg.data.DataLoader, gg.distributions.Categorical)


def test_command_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(2)\ny = torch.fft.rfft(x)\n")
    env = {**os.environ, "GGML_NO_BACKTRACE": "1"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "ggmlgrad", "port", *a], capture_output=True, text=True,
                                    timeout=120, env=env)
    out = run(str(script), "-o", str(tmp_path / "ported.py"))
    assert out.returncode == 1
    assert f"{script}:3: torch.fft: not in ggmlgrad" in out.stdout
    assert (tmp_path / "ported.py").read_text().startswith("import ggmlgrad as torch\n")
    diff = run(str(script), "--diff")
    assert "-import torch\n+import ggmlgrad as torch" in diff.stdout and "torch.fft" in diff.stderr
    script.write_text("import torch\nprint(torch.zeros(2).sum())\n")
    ok = run(str(script))
    assert ok.returncode == 0 and "0 torch names missing" in ok.stdout
    arr = np.zeros(1)   # the checker never ran the script: nothing was printed by it
    assert "tensor(" not in ok.stdout and arr.size == 1


def test_docstring_examples_run():
    import doctest

    import ggmlgrad.port
    result = doctest.testmod(ggmlgrad.port)
    assert result.failed == 0 and result.attempted > 0

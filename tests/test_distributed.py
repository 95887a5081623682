"""gg.distributed on a local Ray cluster (issue 26): data-parallel training equals one process,
rollout workers act with the broadcast weights, a killed worker is restarted and training goes
on, a resumed run equals an unbroken one, and examples/ppo_ray.py --quick learns.

One cluster for the module (``ray.init(num_cpus=2)``, no dashboard). Without Ray the module is
skipped locally; in CI (``CI`` set) the import fails: the ``distributed`` extra must be installed.
"""
from __future__ import annotations

import doctest
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("CI"):
    import gymnasium  # noqa: F401
    import ray
else:
    ray = pytest.importorskip("ray")
    pytest.importorskip("gymnasium")

import ggmlgrad as gg
from ggmlgrad.distributed import (DataParallel, WorkerPool, load_checkpoint, pack_parameters, save_checkpoint,
                                  unpack_parameters)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import ppo_cartpole as base  # noqa: E402
import ppo_ray  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # The workers cannot import this test module: send its classes (CrashingWorker) by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ppo_ray._ship_by_value(base, ppo_ray)      # nor the examples
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    if started:
        ray.shutdown()


def test_import_ggmlgrad_does_not_import_ray():
    code = "import sys, ggmlgrad as gg; gg.distributed.pack_parameters([gg.ones(2)]); print('ray' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_doctests_of_the_local_helpers():
    import ggmlgrad.distributed as d
    from ggmlgrad.distributed import allreduce, checkpoint, packing
    for module in (d, packing, checkpoint, allreduce):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_pack_unpack_round_trip_and_errors():
    gg.manual_seed(0)
    a, b = gg.nn.Sequential(gg.nn.Linear(3, 5), gg.nn.Linear(5, 2)), gg.nn.Sequential(gg.nn.Linear(3, 5), gg.nn.Linear(5, 2))
    flat = pack_parameters(a.parameters())
    want = np.concatenate([p.detach().numpy().ravel() for p in a.parameters()])
    assert flat.dtype == np.float32 and np.array_equal(flat, want)
    unpack_parameters(flat, b.parameters())
    for p, q in zip(a.parameters(), b.parameters()):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())
    with pytest.raises(ValueError, match="1-d array of 32 values"):
        unpack_parameters(flat[:-1], b.parameters())
    with pytest.raises(TypeError, match="float32"):
        unpack_parameters(flat.astype(np.float64), b.parameters())
    with pytest.raises(TypeError, match="only float32"):
        pack_parameters([gg.tensor([1, 2])])


def test_checkpoint_round_trip_restores_model_optimizer_and_iteration(tmp_path):
    gg.manual_seed(0)
    m = gg.nn.Linear(3, 2)
    opt = gg.optim.Adam(m.parameters(), lr=0.1)
    (m(gg.ones(4, 3)) ** 2).mean().backward()
    opt.step()
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, m, opt, iteration=7)
    m2 = gg.nn.Linear(3, 2)
    opt2 = gg.optim.Adam(m2.parameters(), lr=0.1)
    assert load_checkpoint(path, m2, opt2) == 7
    assert np.array_equal(pack_parameters(m.parameters()), pack_parameters(m2.parameters()))
    st, st2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert st[0]["step"] == st2[0]["step"] == 1
    assert np.array_equal(st[0]["exp_avg_sq"].numpy(), st2[0]["exp_avg_sq"].numpy())
    gg.save({"model": 1}, tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="not a checkpoint"):
        load_checkpoint(tmp_path / "other.safetensors", m2, opt2)


def _model():
    return gg.nn.Sequential(gg.nn.Linear(8, 16), gg.nn.Tanh(), gg.nn.Linear(16, 4))


def _optimizer(params):
    return gg.optim.Adam(params, lr=0.01)


def _loss(model, x, y):
    return gg.nn.functional.cross_entropy(model(x), y)


@pytest.mark.parametrize("backend", ["tree", "ring", "gloo"])
def test_data_parallel_two_workers_equal_one_process(backend):
    """Same global batches, initial weights and seed: N=2 after K=4 Adam steps equals one process
    within float32 summation-order rounding, and both replicas are bit-identical."""
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((4, 32, 8)).astype(np.float32)
    ys = rng.integers(0, 4, (4, 32))
    gg.manual_seed(5)
    model = _model()
    opt = _optimizer(list(model.parameters()))
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = _loss(model, gg.tensor(x), gg.tensor(y))
        loss.backward()
        losses.append(loss.item())
        opt.step()
    with DataParallel(_model, _optimizer, _loss, num_workers=2, backend=backend, seed=5) as dp:
        assert dp.backend == backend
        dp_losses = [dp.step(x, y) for x, y in zip(xs, ys)]
        replicas = dp.worker_parameters()
        if backend == "tree":
            with pytest.raises(ValueError, match="divisible by num_workers=2"):
                dp.step(xs[0][:7], ys[0][:7])
            state = dp.state_dict()
            assert np.array_equal(state["2.bias"], replicas[0][-4:])
    ref = pack_parameters(model.parameters())
    assert np.array_equal(replicas[0], replicas[1])
    assert not np.allclose(ref, pack_parameters(_seeded_model(5).parameters()))   # the steps moved it
    np.testing.assert_allclose(replicas[0], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dp_losses, losses, rtol=1e-5)


def _seeded_model(seed):
    gg.manual_seed(seed)
    return _model()


def test_data_parallel_refuses_a_bad_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        DataParallel(_model, _optimizer, _loss, num_workers=2, backend="nccl2")
    with pytest.raises(ValueError, match="num_workers"):
        DataParallel(_model, _optimizer, _loss, num_workers=0)


def _small_config(**kw) -> base.Config:
    cfg = dict(total_steps=4 * 64, num_envs=2, num_steps=32, update_epochs=2, num_minibatches=2, seed=3)
    cfg.update(kw)
    return base.Config(**cfg)


def test_rollout_workers_act_with_the_broadcast_weights():
    cfg = _small_config(num_envs=1, num_steps=16)
    gg.manual_seed(11)
    agent = base.Agent(4, 2)
    with WorkerPool(ppo_ray.CartPoleWorker, 2, cfg, 10) as pool:
        for round_ in range(2):
            weights = pack_parameters(agent.parameters())
            results = pool.map("rollout", weights, round_)
            assert sorted(results) == [0, 1]
            for (obs, actions, logp, adv, ret), episode_returns, seconds in results.values():
                assert obs.shape == (16, 4) and actions.shape == logp.shape == adv.shape == ret.shape == (16,)
                logits = agent.actor(gg.tensor(obs)).detach().numpy().astype(np.float64)
                want = logits[np.arange(16), actions] - np.log(np.exp(logits).sum(axis=1))
                np.testing.assert_allclose(logp, want, rtol=1e-4, atol=1e-5)
            assert not np.array_equal(results[0][0][0], results[1][0][0])   # each worker its own envs
            with gg.no_grad():                    # new weights: the next round must act with them
                for p in agent.parameters():
                    p.add_(gg.randn(*p.shape) * 0.3)
        assert pool.failed_calls == 0


class CrashingWorker(ppo_ray.CartPoleWorker):
    """Worker 0 dies (its process exits) in the middle of iteration 1."""

    def rollout(self, weights, iteration):
        if self.index == 0 and iteration == 1:
            os._exit(1)
        return super().rollout(weights, iteration)


def test_a_killed_rollout_worker_is_restarted_and_training_goes_on():
    cfg = _small_config()
    agent, stats = ppo_ray.train(cfg, 2, worker_cls=CrashingWorker)
    # iteration 1 completed with the surviving worker's rows; the restarted worker is back from iteration 2
    assert stats.rows == [64, 32, 64, 64]
    assert stats.failed_calls == 1
    assert np.isfinite(pack_parameters(agent.parameters())).all()


class Sleepy:
    def __init__(self, index):
        self.index = index

    def work(self, seconds):
        if self.index == 1:
            time.sleep(seconds)
        return self.index


class Broken:
    def __init__(self, index):
        raise ValueError("no environment here")


def test_a_late_worker_is_dropped_from_the_round_and_restarted():
    with WorkerPool(Sleepy, 2) as pool:
        assert pool.map("work", 0.0) == {0: 0, 1: 1}                   # both started
        assert pool.map("work", 60.0, timeout=2.0) == {0: 0}
        assert pool.failed_calls == 1
        assert pool.map("work", 0.0, timeout=60.0) == {0: 0, 1: 1}


class Mortal:
    def __init__(self, index):
        self.index = index

    def work(self, everyone=False):
        if self.index == 0 or everyone:
            os._exit(1)
        return self.index


def test_workers_that_used_up_their_restarts_are_left_out_and_then_the_pool_fails_loudly():
    with WorkerPool(Mortal, 2, max_restarts=0) as pool:
        assert pool.map("work") == {1: 1}
        assert pool.map("work") == {1: 1} and pool.dead == {0}
        assert pool.failed_calls == 1
        assert pool.map("work", everyone=True) == {}
        with pytest.raises(RuntimeError, match="all 2 workers died and used up their restarts"):
            pool.map("work")


def test_a_worker_constructor_error_is_raised_not_ridden_out():
    with WorkerPool(Broken, 1) as pool:
        with pytest.raises(RuntimeError, match="(?s)worker 0 could not be constructed.*no environment here"):
            pool.map("work", 0.0)


def test_a_resumed_run_equals_an_unbroken_run(tmp_path):
    cfg = _small_config(total_steps=6 * 64)
    path = str(tmp_path / "ppo.safetensors")
    # An unbroken run of 6 iterations that saves a checkpoint after iteration 4 ...
    unbroken, first = ppo_ray.train(cfg, 2, checkpoint=path, checkpoint_every=4)
    assert len(first.rows) == 6
    # ... and a new driver (new learner, new workers) that resumes from it and runs iterations 4 and 5.
    resumed, second = ppo_ray.train(cfg, 2, checkpoint=path, checkpoint_every=4)
    assert len(second.rows) == 2
    assert np.array_equal(pack_parameters(resumed.parameters()), pack_parameters(unbroken.parameters()))


def test_ppo_ray_quick_shows_a_learning_signal(capsys):
    assert ppo_ray.main(["--quick", "--no-progress", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    first, last = (float(v) for v in out.split("first episodes ")[1].split(" -> last episodes "))
    assert last > 1.5 * first
    assert "2 rollout workers, 20480 environment steps" in out

"""``dpcalc train`` on several processes (torchrun / ``--nproc``; issue 15): the same mechanism as
one process — same batches, one noise draw per step, same weights and the same certified ε —,
rank 0 owning the ledger and checkpoints, a killed rank stopping the others without the ledger
ever showing fewer steps than were taken, and one-line refusals of bad input.

The multi-process tests start real processes (gloo on the CPU, 2 ranks, 1 thread each) on tiny
generated IDX data; each run takes a few seconds (most of it importing torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from dpcalc.errors import DpcalcError, ParameterError  # noqa: E402
from dpcalc.train import checkpoint as ckpt  # noqa: E402
from dpcalc.train.config import TrainConfig  # noqa: E402
from dpcalc.train.distributed import (  # noqa: E402
    KILL_ENV,
    Context,
    ShardSampler,
    SilentError,
    resolve_device,
    shard_bounds,
)
from dpcalc.train.dpsgd import PoissonSampler  # noqa: E402
from dpcalc.train.loop import train  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
N_TRAIN, N_TEST = 600, 200  # also the size of the tiny_dir / tiny data (tests/train/conftest.py)


#: a run of 2 epochs of 10 steps (N = 600, B = 60), logistic regression, momentum
OPTS = dict(model="logistic", epochs=2, batch_size=60, lr=0.5, optimizer="momentum", max_grad_norm=1.0,
            noise_multiplier=1.0, delta=1e-4, threads=1, seed=3)


def _flags(**opts) -> list[str]:
    out = []
    for k, val in opts.items():
        flag = "--" + k.replace("_", "-")
        if val is True:
            out.append(flag)
        elif val is not None and val is not False:
            out += [flag, str(val)]
    return out


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    env.update(extra)
    return env


def torchrun(tiny_dir, *, env=None, **opts) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node 2 -m dpcalc train ... --json --quiet``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "dpcalc", "train", "--data-dir", str(tiny_dir), "--json", "--quiet",
           *_flags(**{**OPTS, **opts})]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(**(env or {})))


def nproc(tiny_dir, *, env=None, **opts) -> subprocess.CompletedProcess:
    """``dpcalc train --nproc 2 ... --json --quiet``."""
    cmd = [sys.executable, "-m", "dpcalc", "train", "--nproc", "2", "--data-dir", str(tiny_dir), "--json",
           "--quiet", *_flags(**{**OPTS, **opts})]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(**(env or {})))


def one_process(tiny_dir, tiny, **opts):
    return train(TrainConfig(data_dir=str(tiny_dir), **{**OPTS, **opts}), data=tiny)


def _assert_same_weights(saved: Path, model) -> None:
    state = torch.load(saved, weights_only=True)
    ref = model.state_dict()
    assert state.keys() == ref.keys()
    for k in ref:
        # the two processes sum the clipped gradients in another order: float round-off only
        torch.testing.assert_close(state[k], ref[k], rtol=1e-5, atol=1e-6)
        assert not torch.equal(ref[k], torch.zeros_like(ref[k]))


# ---- no processes: sampling, shards, devices ---------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 500), w=st.integers(1, 16), q=st.floats(0.01, 1.0), seed=st.integers(0, 2**32))
def test_shards_partition_the_data_and_their_batches_are_the_global_poisson_batch(n, w, q, seed):
    """Union over the ranks of the shard batches = PoissonSampler's batch with the same generator
    state, draw for draw (so the sampled batch is independent of W)."""
    w = min(w, n)
    bounds = [shard_bounds(n, w, r) for r in range(w)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(hi - lo >= 1 and (r == 0 or lo == bounds[r - 1][1]) for r, (lo, hi) in enumerate(bounds))
    ref = PoissonSampler(dataset_size=n, sample_rate=q, generator=torch.Generator().manual_seed(seed))
    shards = [ShardSampler(dataset_size=n, sample_rate=q, generator=torch.Generator().manual_seed(seed),
                           lo=lo, hi=hi) for lo, hi in bounds]
    for _ in range(3):
        union = torch.cat([s.sample() + s.lo for s in shards])
        assert torch.equal(union, ref.sample())


class _FakeGroup(Context):
    """A rank of a 2-rank job whose peer's outcome is given (no processes)."""

    def __init__(self, rank, peer_outcome):
        super().__init__(rank=rank, world_size=2)
        self.peer_outcome = peer_outcome

    def gather_objects(self, obj):
        return [obj, self.peer_outcome] if self.rank == 0 else [self.peer_outcome, obj]


def test_agreement_stops_every_rank_with_the_first_error_printed_once():
    # rank 1 refused its input: rank 0 raises it (exit status 2), with the rank named
    with pytest.raises(ParameterError, match=r"^rank 1: --delta must be below 1/N") as e:
        with _FakeGroup(0, ("error", "delta", 2, "--delta must be below 1/N")).agreement() as agreed:
            agreed.update(sigma=1.0)
    assert e.value.name == "delta"
    # rank 0 failed: rank 1 stops silently with the same exit status (rank 0 prints)
    with pytest.raises(SilentError) as e:
        with _FakeGroup(1, ("error", "", 1, "target epsilon unreachable")).agreement() as agreed:
            agreed.update(sigma=1.0)
    assert e.value.exit_code == 1
    # this rank's own error is raised as it is on rank 0
    with pytest.raises(ParameterError, match="own"):
        with _FakeGroup(0, ("ok", {"sigma": 1.0})).agreement():
            raise ParameterError("x", "", None, message="own")


def test_agreement_refuses_ranks_that_decided_differently():
    """E.g. a --checkpoint directory one rank does not see: the steps already recorded differ."""
    with pytest.raises(DpcalcError, match=r"rank 1 disagrees with rank 0 on steps \(15 on rank 0, 0 on rank 1\)"):
        with _FakeGroup(0, ("ok", {"sigma": 1.0, "steps": 0})).agreement() as agreed:
            agreed.update(sigma=1.0, steps=15)
    with pytest.raises(SilentError):
        with _FakeGroup(1, ("ok", {"sigma": 1.0, "steps": 15})).agreement() as agreed:
            agreed.update(sigma=1.0, steps=0)
    with _FakeGroup(0, ("ok", {"sigma": 1.0, "steps": 15})).agreement() as agreed:  # the same: go on
        agreed.update(sigma=1.0, steps=15)


def test_device_choice():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(Exception, match="device must be one of auto, cpu, cuda"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot happen")
def test_cuda_without_cuda_is_one_line(tiny_dir, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--device", "cuda", *_flags(**OPTS))
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("Error: --device cuda: no CUDA device is available")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (torch CPU build)")
def test_cuda_run_matches_the_cpu_run(tiny_dir, tiny):
    cpu = one_process(tiny_dir, tiny, device="cpu")
    gpu = one_process(tiny_dir, tiny, device="cuda")
    assert gpu.accounting.epsilon == cpu.accounting.epsilon and gpu.steps == cpu.steps
    for k, val in cpu.model.state_dict().items():
        torch.testing.assert_close(gpu.model.state_dict()[k].cpu(), val, rtol=1e-4, atol=1e-5)


def test_device_is_printed_in_the_inputs(tiny_dir, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--device", "cpu", "--json", "--quiet",
                *_flags(**{**OPTS, "epochs": 0.2}))
    assert r.exit_code == 0, r.stderr
    inputs = r.json()["inputs"]
    assert inputs["device"] == "cpu" and "processes" not in inputs  # one process


@pytest.mark.parametrize(("args", "message"), [
    (["--nproc", "0"], "Error: --nproc must be a whole number >= 1, got 0"),
    (["--nproc", "1.5"], "Error: --nproc must be a whole number"),
    (["--nproc", "601"], "Error: --nproc must be at most the number of training records N = 600"),
    # issue 33: W that cannot help is refused before any process starts
    (["--nproc", "64", "--batch-size", "16"], "Error: --nproc 64 would give each process B/W = 0.25 examples"),
    (["--nproc", str(len(os.sched_getaffinity(0)) + 1)], "Error: --nproc"),
])
def test_bad_nproc_is_one_line_and_starts_no_process(tiny_dir, run_cli, args, message):
    opts = dict(OPTS)
    if "--batch-size" in args:  # replaces OPTS' batch size (an option given twice is refused)
        i = args.index("--batch-size")
        opts["batch_size"], args = int(args[i + 1]), args[:i] + args[i + 2:]
    r = run_cli("train", "--data-dir", tiny_dir, *_flags(**opts), *args)
    assert r.exit_code == 2
    assert r.stderr.startswith(message) and r.stderr.strip().count("\n") == 0


def test_nproc_under_torchrun_is_refused(tiny_dir, run_cli, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    r = run_cli("train", "--data-dir", tiny_dir, "--nproc", "2", *_flags(**OPTS))
    assert r.exit_code == 2 and "--nproc" in r.stderr and r.stderr.strip().count("\n") == 0


def test_nproc_1_is_the_one_process_run(tiny_dir, tiny, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--nproc", "1", "--json", "--quiet", *_flags(**OPTS))
    assert r.exit_code == 0, r.stderr
    assert r.json()["results"][0]["epsilon"] == one_process(tiny_dir, tiny).accounting.epsilon


# ---- two processes --------------------------------------------------------------------------------

def test_two_processes_equal_one_process(tiny_dir, tiny, tmp_path):
    """torchrun, 2 ranks: same steps, same ε (the same accountant call), the same weights up to float
    round-off (the batches and the noise are the same draws; noise added once: added twice or
    not at all, the weights would differ by σC·lr/(qN) ≈ 0.08 per step); the budget stop at the
    same step; rank 0 writes the ledger, the checkpoint and the model; one JSON object printed."""
    budget = 2.5  # pld: 14 of the 20 steps fit
    ref = one_process(tiny_dir, tiny, max_epsilon=budget)
    assert 0 < ref.steps < 20
    run = tmp_path / "ck"
    r = torchrun(tiny_dir, max_epsilon=budget, checkpoint=run, save_model=tmp_path / "m.pt",
                 log_file=tmp_path / "log.jsonl")  # torchrun would read --log as its --log-dir
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)  # rank 1 prints nothing
    res = out["results"][0]
    assert out["inputs"]["processes"] == 2 and out["inputs"]["device"] == "cpu"
    assert res["steps"] == ref.steps and res["epsilon"] == ref.accounting.epsilon <= budget
    assert res["details"]["stopped"] == ref.stopped
    assert res["test_accuracy"] == pytest.approx(ref.test_accuracy, abs=1 / N_TEST)
    _assert_same_weights(tmp_path / "m.pt", ref.model)
    assert ckpt.read_ledger(run).steps == ref.steps
    assert ckpt.load_checkpoint(run)["ledger"]["steps"] == ref.steps
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt", "ledger.json"]  # no temp files
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [e["steps"] for e in log] == [h.steps for h in ref.history]  # one line per epoch, rank 0's


def _kill_rank_1_at_step_15(tiny_dir, run: Path) -> None:
    r = nproc(tiny_dir, checkpoint=run, env={KILL_ENV: "1:15"})
    assert r.returncode == 1
    # rank 0 notices the lost peer itself, or torchrun's SIGTERM reaches it first (a race that a
    # busy machine decides): either way one line naming the step and the ledger
    assert ("Error: rank 0: another rank stopped during step 15" in r.stderr
            or "Error: rank 0: stopped by the launcher (SIGTERM) during step 15, after another rank "
               "failed" in r.stderr), r.stderr
    assert f"the privacy ledger {run / 'ledger.json'} counts every step taken" in r.stderr
    assert "Error: dpcalc train --nproc 2: rank 1 was killed by SIGKILL" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert ckpt.read_ledger(run).steps == 15
    assert ckpt.load_checkpoint(run)["ledger"]["steps"] == 10


def test_killed_rank_stops_the_other_and_the_ledger_keeps_every_step(tiny_dir, tmp_path):
    """--nproc 2; rank 1 dies (SIGKILL) at ledger step 15 (checkpoint at 10): rank 0 stops with a
    clear error, exit 1; the ledger shows 15 steps (14 finished and the one in progress)."""
    _kill_rank_1_at_step_15(tiny_dir, tmp_path / "ck")


@pytest.mark.slow
def test_resume_after_a_killed_rank_is_the_one_process_resume(tiny_dir, tiny, tmp_path):
    """Resumed with 2 processes after rank 1 died at step 15: the one-process kill-and-resume result
    (5 orphaned steps, ε of 25 steps, the uninterrupted run's weights)."""
    run = tmp_path / "ck"
    _kill_rank_1_at_step_15(tiny_dir, run)
    r = nproc(tiny_dir, checkpoint=run, resume=True, save_model=tmp_path / "m.pt")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    ref = one_process(tiny_dir, tiny)
    orphaned = one_process(tiny_dir, tiny, epochs=2.5)  # 25 steps: the ε the resumed run must report
    assert (res["steps"], res["details"]["orphaned_steps"]) == (25, 5)
    assert res["epsilon"] == orphaned.accounting.epsilon > ref.accounting.epsilon
    _assert_same_weights(tmp_path / "m.pt", ref.model)


@pytest.mark.slow
def test_killed_rank_0_leaves_a_ledger_that_covers_the_steps(tiny_dir, tmp_path):
    """Rank 0 (the writer) dies at ledger step 4: rank 1 stops with a clear error; the ledger shows
    4 steps (rank 0 wrote it before the step's all-reduce, which rank 1 could not finish alone)."""
    run = tmp_path / "ck"
    r = torchrun(tiny_dir, checkpoint=run, env={KILL_ENV: "0:4"})
    assert r.returncode != 0
    assert ("Error: rank 1: another rank stopped during step 4" in r.stderr  # or torchrun's SIGTERM first
            or "Error: rank 1: stopped by the launcher (SIGTERM) during step 4, after another rank "
               "failed" in r.stderr), r.stderr
    assert ckpt.read_ledger(run).steps == 4 and ckpt.load_checkpoint(run) is None


@pytest.mark.slow
def test_setup_error_is_printed_once(tiny_dir, tmp_path):
    """An error at the start (a checkpoint directory already in use) stops both ranks: one line,
    printed by rank 0, exit status 2."""
    run = tmp_path / "ck"
    assert nproc(tiny_dir, checkpoint=run, epochs=0.2).returncode == 0
    r = nproc(tiny_dir, checkpoint=run, epochs=0.2)
    assert r.returncode == 2
    assert r.stderr.count("already holds a run; pass --resume") == 1, r.stderr


@pytest.mark.slow
def test_cnn_two_processes_equal_one_process(tiny_dir, tiny, tmp_path):
    """The tanh CNN (Conv2d fast path) on 2 ranks, 5 steps."""
    ref = one_process(tiny_dir, tiny, model="tanh-cnn", epochs=0.5, lr=0.1, max_grad_norm=0.1)
    r = torchrun(tiny_dir, model="tanh-cnn", epochs=0.5, lr=0.1, max_grad_norm=0.1, save_model=tmp_path / "m.pt")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["epsilon"] == ref.accounting.epsilon
    _assert_same_weights(tmp_path / "m.pt", ref.model)


@pytest.mark.slow
def test_fashion_mnist_with_two_processes(tmp_path):
    """The README's Fashion-MNIST result (Papernot et al. 2021: 86.1% at ε = 2.7, δ = 1e-5) with
    `--nproc 2`: ≥ 86% at certified ε ≤ 3 (about 10 minutes on 2 cores)."""
    where = Path("/usr/share/datasets/fashion-mnist")
    if not (where / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian dataset-fashion-mnist not installed (/usr/share/datasets/fashion-mnist)")
    opts = dict(model="tanh-cnn", target_epsilon=3.0, delta=1e-5, epochs=40, batch_size=2048, lr=4.0,
                optimizer="momentum", momentum=0.9, max_grad_norm=0.1, seed=0, threads=1)
    cmd = [sys.executable, "-m", "dpcalc", "train", "--nproc", "2", "--dataset", "fashion-mnist",
           "--data-dir", str(where), "--json", "--quiet", *_flags(**opts)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=_env())
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    assert res["certified"] and res["epsilon"] <= 3.0
    assert res["test_accuracy"] >= 0.86


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.slow  # two torchrun processes and a killed launcher: ~8 s idle
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ranks_die_with_a_killed_launcher(tiny_dir, tmp_path):
    """kill -9 of the `train --nproc 2` launcher (issue 33): its ranks, in their own sessions, stop
    within seconds instead of training to the end (PR_SET_PDEATHSIG, and a watchdog on the parent)."""
    import signal
    import time

    run = tmp_path / "ck"
    cmd = [sys.executable, "-m", "dpcalc", "train", "--nproc", "2", "--data-dir", str(tiny_dir), "--json",
           "--quiet", *_flags(**{**OPTS, "epochs": 500, "checkpoint": run})]
    launcher = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (run / "ledger.json").exists():  # both ranks are past their set-up: steps are taken
            assert time.monotonic() < deadline and launcher.poll() is None, "the run did not start"
            time.sleep(0.2)
        ranks = [p for c in _children(launcher.pid) for p in [c, *_children(c)]]
        assert ranks
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in ranks), "ranks outlived their launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for p in locals().get("ranks", []):  # never leave a rank training (the test failed)
            if _alive(p):
                os.kill(p, signal.SIGKILL)



RANK_FAIL = """
import os
from torch import nn


class FailsOnRank1(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(784, 10)
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # 4 calls for the checks at load, then one per step
        if os.environ.get("RANK") == "1" and self.calls > 5:
            raise RuntimeError("boom on rank 1\\nsecond line")
        return self.lin(x.flatten(1))
"""


def test_a_failing_rank_is_one_line_not_a_traceback(tiny_dir, tmp_path):
    """Issue 33: rank 1's exception was printed as a 159-line traceback; now one line naming the
    rank and the reason (rank 0 adds its own line: the peer it lost), exit 1."""
    (tmp_path / "rankfail_models.py").write_text(RANK_FAIL)
    r = nproc(tiny_dir, env={"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}, model="rankfail_models:FailsOnRank1",
              epochs=1)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert "Error: rank 1: RuntimeError: boom on rank 1 second line; this rank stopped" in lines, r.stderr
    assert len(lines) <= 2 and all(x.startswith("Error: rank ") for x in lines), r.stderr


@pytest.mark.slow  # two torchrun processes: ~10 s idle
def test_a_budget_refusal_with_two_processes_is_one_line(tiny_dir, tmp_path, run_cli):
    """Issue 33: three error lines (rank 0's refusal, rank 1's lost peer, the launcher) -> one."""
    led = tmp_path / "l.db"
    assert run_cli("ledger", "init", led, "--dataset", "t", "--budget-eps", "0.01", "--delta", "1e-5").exit_code == 0
    r = nproc(tiny_dir, ledger=led, ledger_dataset="t", epochs=1)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("Error: refused, nothing drawn or recorded") and r.stderr.count("\n") == 1, r.stderr

"""``dpcalc train --privacy-unit user`` (dpcalc/train/users.py): users sampled, each user's mean
gradient clipped to C. The user-level sensitivity C checked on an explicit worst case (attained), the
per-user sum against a plain autograd loop, ε and σ equal to ``dpcalc epsilon/sigma --privacy-unit
user``, one record per user equal to the record-level run bit for bit, the ledger / sidecar /
statement naming the unit, and bad input refused in one line with nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.train import checkpoint as ckpt  # noqa: E402
from dpcalc.train.config import TrainConfig  # noqa: E402
from dpcalc.train.loop import train  # noqa: E402
from dpcalc.train.models import build_model  # noqa: E402
from dpcalc.train.users import (  # noqa: E402
    UserDPSGDStep,
    UserGroups,
    UserSampler,
    consecutive_users,
    read_user_ids,
    users_from_ids,
)

N_TRAIN, N_TEST = 600, 100
C = 0.5


def base(tiny_dir, **kw):
    opts = dict(data_dir=str(tiny_dir), model="logistic", epochs=1.5, batch_size=60, lr=0.5,
                optimizer="momentum", max_grad_norm=1.0, noise_multiplier=1.0, delta=1e-4, threads=1, seed=3)
    opts.update(kw)
    return TrainConfig(**opts)


def _groups(counts):
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return UserGroups(offsets, np.arange(offsets[-1]), {"grouping": "consecutive", "records_per_user": 1, "seed": 0})


def _step(model, sampler, *, max_physical_batch=512, clip=C):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return UserDPSGDStep(model, opt, sampler=sampler, noise_multiplier=0.0, max_grad_norm=clip,
                         expected_batch_size=1.0, max_physical_batch=max_physical_batch,
                         noise_generator=torch.Generator().manual_seed(0))


def _batch(groups, users, x, y):
    """The records of ``users`` (user after user) and the sampler state a step of them reads."""
    idx = torch.cat([torch.arange(groups.offsets[u], groups.offsets[u + 1]) for u in users]) if users else \
        torch.zeros(0, dtype=torch.int64)
    counts = torch.tensor([int(groups.counts[u]) for u in users], dtype=torch.int64)
    return x[idx], y[idx], counts


class _Fixed:
    last_counts = torch.zeros(0, dtype=torch.int64)


def _clipped(step, sampler, groups, users, x, y):
    xb, yb, counts = _batch(groups, users, x, y)
    sampler.last_counts = counts
    return step.clipped_sum(xb, yb)[0]


@pytest.mark.parametrize("model_name", ["logistic", "tanh-cnn"])
@pytest.mark.parametrize("clip", ["median", 1e-4])
def test_per_user_sum_is_the_clipped_mean_gradient(model_name, clip):
    """The step's sum equals Σ_u clip_C(∇ mean loss of user u), computed user by user with plain autograd
    (users of 1, 2, 3 and 7 records, chunked across physical batches of 4 records); C the median of the
    users' mean-gradient norms (half the users clipped, half not: the mean, not the sum), or tiny."""
    torch.manual_seed(0)
    counts = [2, 1, 3, 7, 1, 2]
    groups = _groups(counts)
    x = torch.randn(groups.record["records"], 1, 28, 28)
    y = torch.randint(0, 10, (groups.record["records"],))
    model = build_model(model_name, seed=1)
    means = []
    for u in range(len(counts)):
        lo, hi = groups.offsets[u], groups.offsets[u + 1]
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[lo:hi]), y[lo:hi]).backward()  # the mean loss
        means.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
    clip = float(np.median([float(g.norm()) for g in means])) if clip == "median" else clip
    expected = sum(g * min(1.0, clip / (float(g.norm()) + 1e-6)) for g in means)
    sampler = _Fixed()
    step = _step(model, sampler, max_physical_batch=4, clip=clip)
    got = _clipped(step, sampler, groups, list(range(len(counts))), x, y)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6 * clip)


def test_removing_a_user_moves_the_sum_by_at_most_C_attained():
    """Sensitivity C at the user level: removing any one user from the batch changes the noiseless sum by
    at most C. Worst case, attained: a user of 8 copies of one record with a large gradient moves it by C
    (1 − 10⁻⁵), where clipping each record would let it move the sum by 8·C."""
    torch.manual_seed(1)
    counts = [1, 8, 3, 2, 5]
    groups = _groups(counts)
    n = groups.record["records"]
    x = torch.randn(n, 1, 28, 28) * 3
    y = torch.randint(0, 10, (n,))
    x[1:9] = x[1] * 50  # user 1: eight copies of one extreme record
    y[1:9] = y[1]
    model = build_model("logistic", seed=2)
    sampler = _Fixed()
    step = _step(model, sampler)
    everyone = list(range(len(counts)))
    full = _clipped(step, sampler, groups, everyone, x, y)
    moves = []
    for u in everyone:
        rest = _clipped(step, sampler, groups, [w for w in everyone if w != u], x, y)
        moves.append(float((full - rest).norm()))
    assert max(moves) <= C * (1 + 1e-5)
    assert moves[1] >= C * (1 - 1e-5)  # the bound is attained: no slack in the user-level sensitivity
    # the same eight records clipped one by one (record-level clipping) move the sum by 8·C
    per_record = step.__class__.__mro__[1].clipped_sum(step, x[1:9], y[1:9])[0]
    assert float(per_record.norm()) >= 8 * C * (1 - 1e-4)


def test_user_sampler_draws_users_with_the_poisson_generator():
    groups = consecutive_users(10, 3, seed=5)
    assert groups.users == 4 and list(groups.counts) == [3, 3, 3, 1]
    assert sorted(groups.records.tolist()) == list(range(10))
    again = consecutive_users(10, 3, seed=5)
    assert np.array_equal(groups.records, again.records)
    assert np.array_equal(consecutive_users(10, 1, seed=5).records, np.arange(10))  # k = 1: dataset order
    s = UserSampler(groups, sample_rate=0.5, generator=torch.Generator().manual_seed(7))
    mask = torch.rand(4, generator=torch.Generator().manual_seed(7)) < 0.5  # PoissonSampler's draw over users
    users = mask.nonzero().squeeze(1).tolist()
    idx = s.sample()
    expected = [r for u in users for r in groups.records[groups.offsets[u]:groups.offsets[u + 1]].tolist()]
    assert idx.tolist() == expected
    assert s.last_counts.tolist() == [int(groups.counts[u]) for u in users]


def test_one_record_per_user_is_the_record_level_run_bit_for_bit(tiny_dir, tiny, tmp_path):
    rec = train(base(tiny_dir), data=tiny)
    one = train(base(tiny_dir, privacy_unit="user", records_per_user=1), data=tiny)
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(str(1000 + 7 * i) for i in range(N_TRAIN)) + "\n")  # distinct ids, increasing
    by_file = train(base(tiny_dir, privacy_unit="user", user_ids=str(ids)), data=tiny)
    for other in (one, by_file):
        assert other.accounting.epsilon == rec.accounting.epsilon
        assert (other.noise_multiplier, other.sample_rate, other.steps) == (rec.noise_multiplier, rec.sample_rate,
                                                                            rec.steps)
        for a, b in zip(rec.model.parameters(), other.model.parameters(), strict=True):
            assert torch.equal(a, b)
    assert one.users["users"] == N_TRAIN and one.to_json()["details"]["privacy_unit"] == "user"


def test_user_level_epsilon_and_sigma_are_the_calculators(tiny_dir, tiny, run_cli):
    res = train(base(tiny_dir, privacy_unit="user", records_per_user=4, batch_size=15), data=tiny)
    assert res.dataset_size == 150 and res.sample_rate == 15 / 150  # q = B/U counts users
    assert res.steps == 15  # ceil(1.5 · 150/15)
    e = run_cli("epsilon", "--sigma", "1", "--sample-rate", repr(res.sample_rate), "--steps", str(res.steps),
                "--delta", "1e-4", "--accountant", res.accounting.accountant, "--privacy-unit", "user",
                "--records-per-user", "4", "--json")
    assert e.exit_code == 0, e.stderr
    assert e.json()["results"][0]["epsilon"] == res.accounting.epsilon
    cal = train(base(tiny_dir, privacy_unit="user", records_per_user=4, batch_size=15, noise_multiplier=None,
                     target_epsilon=3.0), data=tiny)
    s = run_cli("sigma", "--eps", "3", "--delta", "1e-4", "--batch-size", "15", "--dataset-size", "150",
                "--epochs", "1.5", "--privacy-unit", "user", "--records-per-user", "4", "--json")
    assert s.exit_code == 0, s.stderr
    assert cal.noise_multiplier == s.json()["results"][0]["noise_multiplier"]
    assert cal.accounting.epsilon <= 3.0


def test_ids_file_groups_users_and_the_run_files_name_the_unit(tiny_dir, tmp_path, run_cli):
    ids = np.repeat(np.arange(200)[::-1], 3)  # 200 users of 3 records, ids decreasing
    np.save(tmp_path / "ids.npy", ids)
    ck, model = tmp_path / "ck", tmp_path / "m.pt"
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--batch-size", "20",
                "--noise-multiplier", "1", "--delta", "1e-4", "--threads", "1", "--quiet", "--privacy-unit", "user",
                "--user-ids", tmp_path / "ids.npy", "--checkpoint", ck, "--save-model", model, "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["inputs"]["privacy_unit"] == "user" and out["inputs"]["users"] == 200
    det = out["results"][0]["details"]
    assert det["users"] == 200 and det["max_records_per_user"] == 3 and det["dataset_size"] == 200
    ledger = json.loads((ck / ckpt.LEDGER_NAME).read_text())
    assert ledger["privacy_unit"] == "user" and ledger["users"]["grouping"] == "file"
    assert ledger["dataset_size"] == 200 and ledger["users"]["records"] == N_TRAIN
    assert ckpt.PrivacyLedger.from_json(ledger).users == ledger["users"]
    side = json.loads((tmp_path / "m.pt.json").read_text())
    assert side["privacy_unit"] == "user"
    statement = (tmp_path / "m.pt.dp.md").read_text()
    assert "one user" in statement
    # review finding: the adjacency, sampler and algorithm rows described examples, not users
    assert "add/remove one user with all of their records" in statement
    assert "each user joins each step" in statement and "mean gradient clipped to C" in statement
    assert "one training example" not in statement and "each example joins" not in statement
    assert "N counts users" in statement


@pytest.mark.parametrize("content, words", [
    ("1\n2\n", "has 2 ids, but the training set has 600 records"),
    ("", "holds no user ids"),
    ("\n".join(["3"] * 599 + ["-1"]) + "\n", "line 600: expected one whole number >= 0"),
    ("\n".join(["3"] * 599 + ["1.5"]) + "\n", "line 600"),
    ("\n".join(["3"] * 599 + ["alice"]) + "\n", "line 600"),
    ("3,4\n", "line 1"),
])
def test_bad_user_ids_file_one_line_nothing_written(tiny_dir, tmp_path, run_cli, content, words):
    ids = tmp_path / "ids.csv"
    ids.write_text(content)
    out = tmp_path / "out"
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--noise-multiplier", "1",
                "--delta", "1e-4", "--quiet", "--privacy-unit", "user", "--user-ids", ids,
                "--checkpoint", out / "ck", "--save-model", out / "m.pt", "--log", out / "log.jsonl")
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith("Error: --user-ids") and words in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("array, words", [
    (np.array([1.0, 2.5]), "entry 1: expected a whole number >= 0"),
    (np.array([3, -2]), "entry 1: expected a whole number >= 0"),
    (np.zeros((2, 2), dtype=np.int64), "expected a 1-D array"),
    (np.array(["a", "b"]), "expected a 1-D array of whole numbers"),
])
def test_bad_npy_ids(tmp_path, array, words):
    path = tmp_path / "ids.npy"
    np.save(path, array)
    with pytest.raises(ParameterError, match=words):
        read_user_ids(str(path), records=2)


@pytest.mark.parametrize("args, words", [
    (["--privacy-unit", "user", "--records-per-user", "0"], "--records-per-user must be a whole number >= 1, got 0"),
    (["--privacy-unit", "user", "--records-per-user", "2.5"], "--records-per-user"),
    (["--privacy-unit", "user", "--records-per-user", "601"], "--records-per-user must be a whole number in [1, 600]"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--user-ids", "x.txt"], "not both"),
    (["--privacy-unit", "user"], "needs exactly one of --user-ids FILE"),
    (["--records-per-user", "3"], "--records-per-user applies with --privacy-unit user"),
    (["--user-ids", "x.txt"], "--user-ids applies with --privacy-unit user"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--sampling", "shuffle"], "does not support --sampling"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--audit-canaries", "10"], "--audit-canaries"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--batch-size", "300"], "--batch-size"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--delta", "0.006"], "for N = 200 users"),
    (["--privacy-unit", "user", "--user-ids", "/nonexistent/ids.txt"], "--user-ids"),
    (["--privacy-unit", "user", "--records-per-user", "3", "--nproc", "2"], "--privacy-unit user runs in one process"),
])
def test_bad_user_options_one_line_exit_2(tiny_dir, tmp_path, run_cli, args, words):
    out = tmp_path / "out"
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--noise-multiplier", "1",
                "--quiet", "--save-model", out / "m.pt", "--checkpoint", out / "ck", *args)
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith("Error: ") and words in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists()


def test_users_from_ids_order():
    g = users_from_ids(np.array([5, 2, 5, 9, 2, 2]), digest="0" * 64)
    assert g.users == 3 and list(g.counts) == [3, 2, 1]  # ids 2, 5, 9
    assert g.records.tolist() == [1, 4, 5, 0, 2, 3]
    assert g.record["max_records_per_user"] == 3


def test_a_user_level_run_is_not_charged_to_a_record_level_ledger(tiny_dir, tmp_path, run_cli):
    """Review finding: a user-level run's --ledger charge (its user-level ε) was added to a budget whose
    statement certifies ε for one record — but removing one record of a user who holds several is a
    replace of that user's update, which the user-level ε does not bound. Refused in one line, exit 2,
    and nothing is written to the ledger."""
    from dpcalc.ledger import Ledger

    path = tmp_path / "l.db"
    with Ledger(path, create=True) as led:
        led.add_dataset("people", budget_epsilon=50.0, delta=1e-4, adjacency="add-remove")
    before = path.read_bytes()
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--batch-size", "20",
                "--noise-multiplier", "1", "--delta", "1e-4", "--threads", "1", "--quiet", "--privacy-unit", "user",
                "--records-per-user", "3", "--ledger", path, "--ledger-dataset", "people", "--json")
    assert r.exit_code == 2 and "--ledger with --privacy-unit user is refused" in r.one_line_error()
    assert path.read_bytes() == before
    with Ledger(path) as led:
        assert led.records(led.dataset("people")) == []


def test_resume_continues_the_same_users_only(tiny_dir, tiny, tmp_path):
    """A resumed user-level run continues with the same users (the ledger's grouping); other users are refused."""
    ck = str(tmp_path / "ck")
    first = train(base(tiny_dir, privacy_unit="user", records_per_user=3, batch_size=20, epochs=1, checkpoint=ck),
                  data=tiny)
    more = train(base(tiny_dir, privacy_unit="user", records_per_user=3, batch_size=20, epochs=2, checkpoint=ck,
                      resume=True), data=tiny)
    assert more.resumed_from_steps == first.steps and more.steps == 2 * first.steps
    with pytest.raises(ParameterError, match="--resume"):
        train(base(tiny_dir, privacy_unit="user", records_per_user=2, batch_size=20, epochs=3, checkpoint=ck,
                   resume=True), data=tiny)


@pytest.mark.parametrize("unit", [[], ["--privacy-unit", "user", "--records-per-user", "3"]])
def test_same_as_line_keeps_every_digit_of_delta(tiny_dir, run_cli, unit):
    """Review finding: the "Same as: dpcalc epsilon …" line printed δ with 6 significant digits; a δ
    rounded up there gives a smaller ε than the run's. It is printed exactly now."""
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--batch-size", "20",
                "--noise-multiplier", "1", "--delta", "1.2345678e-4", "--threads", "1", *unit)
    assert r.exit_code == 0, r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "Same as: dpcalc epsilon" in text and "--delta 0.00012345678 " in text

"""``dpcalc ledger`` and the --ledger options of the releasing commands (in-process CLI)."""

from __future__ import annotations

import json

import pytest

from dpcalc.ledger import Ledger


@pytest.fixture
def budget(tmp_path, run_cli):
    path = tmp_path / "budget.db"
    assert run_cli("ledger", "init", str(path), "--dataset", "census", "--budget-eps", "1",
                   "--delta", "1e-6").exit_code == 0
    return path


def release(run_cli, path, *args):
    return run_cli(*args, "--ledger", str(path), "--dataset", "census", "--json")


def test_refusal_says_what_is_left_and_records_nothing(budget, run_cli):
    assert release(run_cli, budget, "laplace", "--eps", "0.75", "--release", "10").exit_code == 0
    res = release(run_cli, budget, "laplace", "--eps", "0.5", "--release", "10")
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr == ("Error: refused, nothing drawn or recorded: dataset 'census' has ε 0.25 left of its budget 1 "
                          "(δ = 1e-06, rdp-filter); this release would bring it to ε 1.25\n")
    with Ledger(budget) as led:
        assert len(led.records(led.dataset("census"))) == 1


def test_each_release_records_its_event(budget, tmp_path, run_cli):
    scores = tmp_path / "scores.txt"
    scores.write_text("a,10\nb,8\nc,3\n")
    r1 = release(run_cli, budget, "laplace", "--eps", "0.1", "--release", "12.34", "--granularity", "0.01")
    r2 = release(run_cli, budget, "gaussian", "--eps", "0.2", "--delta", "1e-7", "--release", "5")
    r3 = release(run_cli, budget, "noisy-max", "--eps", "0.1", "--scores", str(scores), "--noise", "gumbel",
                 "--top", "2", "--release")
    for r in (r1, r2, r3):
        assert r.exit_code == 0, r.stderr
    ids = [r.json()["results"][0]["ledger"]["event"] for r in (r1, r2, r3)]
    assert ids == [1, 2, 3]
    with Ledger(budget) as led:
        recs = led.records(led.dataset("census"))
    assert [r.mechanism for r in recs] == ["discrete-laplace", "discrete-gaussian", "noisy-max-gumbel-top-2"]
    assert all(r.status == "released" and r.version and r.command for r in recs)
    assert recs[0].params["sensitivity_units"] == 100  # ⌈1/0.01⌉ grid steps
    # the discrete Gaussian: the filter uses its zCDP (the Gaussian RDP curve), the non-adaptive
    # accountants its computed (ε, δ) guarantee
    sigma = r2.json()["results"][0]["noise_multiplier"]
    assert recs[1].event.noise_multiplier == sigma
    assert recs[1].dp_event.epsilon == 0.2 and 0 < recs[1].dp_event.delta <= 1e-7
    assert recs[2].event.count == 2 and recs[2].event.event.epsilon * 2 >= 0.1


def test_show_json_and_totals(budget, run_cli):
    for _ in range(2):
        assert release(run_cli, budget, "laplace", "--eps", "0.25", "--release", "10").exit_code == 0
    res = run_cli("ledger", "show", str(budget), "--json")
    assert res.exit_code == 0, res.stderr
    (ds,) = res.json()["results"]
    assert ds["name"] == "census" and ds["filter_epsilon"] == 0.5 and ds["left"] == 0.5
    assert [e["filter_epsilon_after"] for e in ds["events"]] == [0.25, 0.5]
    methods = {t["method"]: t for t in ds["totals"]}
    assert methods["rdp-filter"]["enforced"] and methods["rdp-filter"]["adaptive"]
    assert not methods["pld"]["adaptive"] and not methods["pld"]["enforced"]
    # two ε = 0.25 pure mechanisms: the optimal composition is at most 0.5 (basic composition)
    assert methods["pld"]["epsilon"] <= 0.5 + 1e-9
    text = run_cli("ledger", "show", str(budget))
    assert text.exit_code == 0 and "non-adaptive (fixed sequence), reporting only" in text.stdout
    assert "enforced: valid under adaptive composition" in text.stdout


def test_show_plot(budget, tmp_path, run_cli):
    pytest.importorskip("matplotlib")
    assert release(run_cli, budget, "laplace", "--eps", "0.25", "--release", "10").exit_code == 0
    png = tmp_path / "spent.png"
    res = run_cli("ledger", "show", str(budget), "--plot", str(png))
    assert res.exit_code == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_import_round_trip(budget, tmp_path, run_cli):
    assert release(run_cli, budget, "laplace", "--eps", "0.25", "--release", "10").exit_code == 0
    assert release(run_cli, budget, "gaussian", "--eps", "0.25", "--delta", "1e-7", "--release", "10").exit_code == 0
    exported = run_cli("ledger", "export", str(budget))
    assert exported.exit_code == 0
    lines = exported.stdout.splitlines()
    assert json.loads(lines[0])["format"] == "dpcalc-ledger-export/1" and len(lines) == 4
    src = tmp_path / "audit.jsonl"
    src.write_text(exported.stdout)
    copy = tmp_path / "copy.db"
    res = run_cli("ledger", "import", str(copy), str(src), "--json")
    assert res.exit_code == 0 and res.json()["results"][0] == {"datasets": 1, "events": 2}
    again = run_cli("ledger", "export", str(copy))
    strip = [{k: v for k, v in json.loads(x).items() if k != "source"} for x in again.stdout.splitlines()]
    assert strip == [{k: v for k, v in json.loads(x).items() if k != "source"} for x in lines]
    shown = [run_cli("ledger", "show", str(p), "--json").json()["results"][0] for p in (budget, copy)]
    assert shown[0]["filter_epsilon"] == shown[1]["filter_epsilon"]
    # importing again: the dataset exists, nothing written
    res = run_cli("ledger", "import", str(copy), str(src))
    assert res.exit_code == 2 and "already in ledger" in res.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("", "line 1 of the import: empty input"),
    ('{"format": "other"}\n', "not a dpcalc ledger export"),
    ('{"format": "dpcalc-ledger-export/1"}\n{"type": "event", "dataset": "x"}\n', "line 2 of the import: an event "
                                                                                  "must follow its dataset"),
    ('{"format": "dpcalc-ledger-export/1"}\n{"type": "dataset", "name": "x", "budget_epsilon": -1, "delta": 0.1, '
     '"adjacency": "add-remove", "created": "t"}\n', "line 2 of the import: budget_epsilon must be"),
    ('{"format": "dpcalc-ledger-export/1"}\nnot json\n', "line 2 of the import: not JSON"),
])
def test_bad_imports_write_nothing(tmp_path, run_cli, text, message):
    src = tmp_path / "in.jsonl"
    src.write_text(text)
    target = tmp_path / "new.db"
    res = run_cli("ledger", "import", str(target), str(src))
    assert res.exit_code == 2 and message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not target.exists()


@pytest.mark.parametrize("args", [
    ["laplace", "--eps", "1", "--ledger", "{path}", "--dataset", "census"],           # no --release
    ["laplace", "--eps", "1", "--release", "3", "--ledger", "{path}"],                # no --dataset
    ["laplace", "--eps", "1", "--release", "3", "--dataset", "census"],               # no --ledger
    ["laplace", "--eps", "1", "--release", "3", "--ledger", "{path}", "--dataset", "nope"],
    ["laplace", "--eps", "1", "--release", "3.5", "--ledger", "{path}", "--dataset", "census"],  # not an integer
    ["gaussian", "--eps", "1", "--delta", "1e-5", "--release", "x", "--ledger", "{path}", "--dataset", "census"],
    ["noisy-max", "--eps", "1", "--candidates", "5", "--ledger", "{path}", "--dataset", "census"],
    ["ledger", "init", "{path}", "--dataset", "", "--budget-eps", "1", "--delta", "1e-6"],
    ["ledger", "init", "{path}", "--dataset", "x\ny", "--budget-eps", "1", "--delta", "1e-6"],
    ["ledger", "show", "{path}", "--dataset", "nope"],
])
def test_bad_options_are_one_line_and_record_nothing(budget, run_cli, args):
    res = run_cli(*[a.replace("{path}", str(budget)) for a in args])
    assert res.exit_code == 2 and res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1, res.stderr
    assert res.stdout == ""
    with Ledger(budget) as led:
        assert [d.name for d in led.datasets()] == ["census"]
        assert led.records(led.dataset("census")) == []


def test_train_refuses_resume_with_a_ledger(budget, run_cli, tmp_path):
    pytest.importorskip("torch")
    res = run_cli("train", "--quiet", "--noise-multiplier", "1", "--checkpoint", str(tmp_path / "ck"), "--resume",
                  "--ledger", str(budget),
                  "--ledger-dataset", "census")
    assert res.exit_code == 2 and "--resume with --ledger is not supported" in res.stderr

"""MNIST-format IDX files: reading, validation with clear errors, dataset search, download
failure without network. No test touches the network (pooch is monkeypatched)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

pytest.importorskip("torch")

from dpcalc.train import data as d  # noqa: E402
from dpcalc.train.data import DataError, find_dataset, load_dataset, read_idx, write_idx  # noqa: E402


def make_dataset(directory, *, n_train=30, n_test=10, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test),
    }
    for stem, arr in arrays.items():
        write_idx(directory / (stem + ext), arr)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_round_trip_raw_and_gzip(tmp_path, gz):
    arrays = make_dataset(tmp_path, gz=gz)
    ds = load_dataset("mnist", tmp_path)
    np.testing.assert_array_equal(ds.train_images, arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(ds.train_labels, arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(ds.test_images, arrays["t10k-images-idx3-ubyte"])
    assert ds.train_images.dtype == np.uint8 and ds.train_labels.dtype == np.int64
    assert ds.dataset_size == 30


def test_header_layout_matches_the_idx_specification(tmp_path):
    # LeCun's format description: magic 0x00000803 for ubyte 3-D, then big-endian sizes.
    write_idx(tmp_path / "x", np.zeros((2, 28, 28)))
    raw = (tmp_path / "x").read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03"
    assert raw[4:16] == (2).to_bytes(4, "big") + (28).to_bytes(4, "big") + (28).to_bytes(4, "big")
    assert len(raw) == 16 + 2 * 28 * 28


def test_bad_magic(tmp_path):
    path = tmp_path / "labels"
    write_idx(path, np.zeros((3, 28, 28)))  # an images file where labels are expected
    with pytest.raises(DataError, match=r"magic number 0x00000803, expected 0x00000801"):
        read_idx(path, kind="labels")


def test_truncated_file(tmp_path):
    path = tmp_path / "imgs"
    write_idx(path, np.zeros((3, 28, 28)))
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DataError, match=r"declares 3×28×28 = 2352 bytes of data but holds 2347"):
        read_idx(path, kind="images")


def test_too_short_for_a_header(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match="too short"):
        read_idx(path, kind="images")


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "x.gz"
    good = gzip.compress(b"\x00" * 100)
    path.write_bytes(good[:20])
    with pytest.raises(DataError, match="not a valid gzip file"):
        read_idx(path, kind="images")


def test_label_out_of_range(tmp_path):
    path = tmp_path / "labels"
    write_idx(path, np.array([1, 2, 10, 3]))
    with pytest.raises(DataError, match=r"label 10 at index 2; labels must be in 0..9"):
        read_idx(path, kind="labels")


def test_wrong_image_size(tmp_path):
    path = tmp_path / "imgs"
    write_idx(path, np.zeros((2, 32, 32)))
    with pytest.raises(DataError, match=r"32×32 images, expected 28×28"):
        read_idx(path, kind="images")


def test_count_mismatch(tmp_path):
    make_dataset(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(29))
    with pytest.raises(DataError, match="holds 30 images but .* holds 29 labels"):
        load_dataset("mnist", tmp_path)


def test_missing_files_in_data_dir(tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="lacks t10k-labels-idx1-ubyte"):
        find_dataset("mnist", tmp_path)


def test_search_order_env_before_cache_before_system(tmp_path, monkeypatch):
    monkeypatch.setenv("DPCALC_DATA", str(tmp_path / "env"))
    monkeypatch.setattr(d, "_cache_dir", lambda: tmp_path / "cache")
    dirs = d.search_dirs("fashion-mnist")
    assert dirs == [tmp_path / "env" / "fashion-mnist", tmp_path / "cache" / "fashion-mnist",
                    d.Path("/usr/share/datasets/fashion-mnist")]
    make_dataset(tmp_path / "cache" / "fashion-mnist")
    assert find_dataset("fashion-mnist")["train_images"].parent == tmp_path / "cache" / "fashion-mnist"
    make_dataset(tmp_path / "env" / "fashion-mnist")
    assert find_dataset("fashion-mnist")["train_images"].parent == tmp_path / "env" / "fashion-mnist"


def test_not_found_anywhere_lists_where_to_put_files(tmp_path, monkeypatch):
    monkeypatch.setenv("DPCALC_DATA", str(tmp_path / "env"))
    monkeypatch.setattr(d, "_cache_dir", lambda: tmp_path / "cache")
    if d.Path("/usr/share/datasets/mnist").exists():
        pytest.skip("MNIST is installed system-wide here")
    with pytest.raises(DataError) as info:
        find_dataset("mnist")
    msg = str(info.value)
    assert "MNIST not found" in msg and str(tmp_path / "env" / "mnist") in msg and "--download" in msg
    assert "\n" not in msg


def test_download_without_network_is_one_line(tmp_path, monkeypatch):
    import pooch

    def offline(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(pooch, "retrieve", offline)
    monkeypatch.setattr(d, "_cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(DataError) as info:
        d.download_dataset("mnist")
    msg = str(info.value)
    assert "could not download train-images-idx3-ubyte.gz of MNIST (no network connection)" in msg
    assert not (tmp_path / "cache" / "mnist").exists()  # nothing half-made left behind
    assert str(tmp_path / "cache" / "mnist") in msg and "\n" not in msg


def test_download_passes_official_md5(tmp_path, monkeypatch):
    import pooch

    calls = []

    def fake_retrieve(url, known_hash, fname, path, progressbar):
        calls.append((url, known_hash))
        # pretend success: write a valid tiny file
        make_dataset(d.Path(path))

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    monkeypatch.setattr(d, "_cache_dir", lambda: tmp_path / "cache")
    target = d.download_dataset("fashion-mnist")
    assert target == tmp_path / "cache" / "fashion-mnist"
    # official Fashion-MNIST checksums (Zalando; torchvision.datasets.FashionMNIST.resources)
    assert calls[0] == ("https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/"
                        "data/fashion/train-images-idx3-ubyte.gz", "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d")
    assert len(calls) == 4


def test_cli_corrupt_file_is_one_line_error(tmp_path, run_cli):
    make_dataset(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"garbage that is not gzip or idx")
    r = run_cli("train", "--data-dir", tmp_path, "--noise-multiplier", "1", "--delta", "1e-3",
                "--quiet")
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "train-images-idx3-ubyte.gz is not a valid gzip file" in r.stderr

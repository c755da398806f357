"""MNIST-format datasets: find, validate, load (and optionally download) IDX files.

The IDX format (LeCun et al., "THE MNIST DATABASE of handwritten digits") is a
big-endian header — two zero bytes, a type code (0x08 = unsigned byte), the number
of dimensions — then one 4-byte size per dimension, then the data. Images are
``idx3`` (count × rows × cols), labels ``idx1`` (count). Files may be gzip-compressed.

Every file is validated (magic number, declared sizes against the actual length,
image size 28×28, label range 0–9, image and label counts equal) and any problem
raises :class:`DataError` with one line naming the file and what is wrong.

Only numpy and the standard library are used here; tensors are made by the caller.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import DpcalcError, ParameterError

__all__ = [
    "DataError",
    "DATASETS",
    "SPLIT_FILES",
    "IdxDataset",
    "read_idx",
    "write_idx",
    "search_dirs",
    "find_dataset",
    "load_dataset",
    "download_dataset",
]

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)

#: file stem of each part; the file on disk is ``stem`` or ``stem + ".gz"``
SPLIT_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True)
class DatasetInfo:
    """Where a dataset is published and how to normalise it.

    ``mean``/``std`` are the customary public per-pixel constants (used by torchvision
    and the DP literature); they are fixed numbers, not computed from the private data.
    """

    name: str
    title: str
    urls: tuple[str, ...]
    md5: dict
    mean: float
    std: float


DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(
        "mnist", "MNIST",
        # torchvision's mirrors of LeCun's files (same bytes; md5 as in torchvision.datasets.MNIST)
        ("https://ossci-datasets.s3.amazonaws.com/mnist/",
         "https://storage.googleapis.com/cvdf-datasets/mnist/"),
        {"train_images": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
         "train_labels": "d53e105ee54ea40749a09fcbcd1e9432",
         "test_images": "9fb629c4189551a2d022fa330f9573f3",
         "test_labels": "ec29112dd5afa0611ce80d1b7f02629c"},
        0.1307, 0.3081,
    ),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist", "Fashion-MNIST",
        # Zalando's official locations (md5 as in torchvision.datasets.FashionMNIST)
        ("https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
         "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
        {"train_images": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
         "train_labels": "25c81989df183df01b3e8a0aad5dffbe",
         "test_images": "bef4ecab320f06d8554ea6380940ec79",
         "test_labels": "bb300cfdad3c16e7a12a480ee83cd310"},
        0.2860, 0.3530,
    ),
}

_IMAGES_MAGIC = 0x00000803  # unsigned byte, 3 dimensions
_LABELS_MAGIC = 0x00000801  # unsigned byte, 1 dimension
_MAX_BYTES = 1 << 31  # refuse absurd declared sizes before allocating


class DataError(DpcalcError):
    """A dataset file is missing, unreadable or not a valid MNIST-format IDX file."""


@dataclass(frozen=True)
class IdxDataset:
    """A loaded MNIST-format dataset (uint8 pixels, int64 labels).

    Attributes:
        name: dataset name (``mnist``, ``fashion-mnist``).
        directory: where the files were read from.
        train_images: array of shape (N, 28, 28), uint8.
        train_labels: array of shape (N,), int64 in 0..9.
        test_images: array of shape (M, 28, 28), uint8.
        test_labels: array of shape (M,), int64 in 0..9.
    """

    name: str
    directory: Path
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray

    @property
    def dataset_size(self) -> int:
        """N, the number of training examples (the DP dataset)."""
        return int(self.train_labels.shape[0])


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path} is not a valid gzip file ({e})") from None
    return raw


def read_idx(path: str | os.PathLike, *, kind: str) -> np.ndarray:
    """Read and validate one IDX file (raw or gzip).

    Args:
        path: the file.
        kind: ``"images"`` (idx3, 28×28 uint8) or ``"labels"`` (idx1, uint8 in 0..9).

    Returns:
        uint8 array of shape (count, 28, 28) for images, int64 array of shape (count,) for labels.

    Raises:
        DataError: unreadable file, bad gzip stream, wrong magic number, declared sizes
            that disagree with the file length, wrong image size or a label outside 0..9.
    """
    kind = v.choice("kind", kind, ("images", "labels"))
    path = Path(path)
    raw = _read_bytes(path)
    magic_expected, ndim = (_IMAGES_MAGIC, 3) if kind == "images" else (_LABELS_MAGIC, 1)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path} is too short ({len(raw)} bytes) to be an IDX {kind} file")
    magic = int.from_bytes(raw[:4], "big")
    if magic != magic_expected:
        raise DataError(
            f"{path} has magic number 0x{magic:08x}, expected 0x{magic_expected:08x} "
            f"(MNIST-format {kind} file)")
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    size = int(np.prod(dims, dtype=np.int64))
    if size > _MAX_BYTES:
        raise DataError(f"{path} declares an implausible size {dims}")
    if len(raw) != header + size:
        raise DataError(
            f"{path} declares {'×'.join(map(str, dims))} = {size} bytes of data but holds "
            f"{len(raw) - header} (truncated or corrupt)")
    data = np.frombuffer(raw, dtype=np.uint8, count=size, offset=header)
    if kind == "images":
        if dims[1:] != IMAGE_SHAPE:
            raise DataError(f"{path} holds {dims[1]}×{dims[2]} images, expected 28×28")
        return data.reshape(dims).copy()
    labels = data.astype(np.int64)
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        bad = int(np.argmax(labels >= NUM_CLASSES))
        raise DataError(f"{path} has label {int(labels[bad])} at index {bad}; labels must be in 0..9")
    return labels


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzip if the name ends in ``.gz``).

    Used by tests to generate tiny datasets; arrays of 1 or 3 dimensions.
    """
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    header = (0x0800 + arr.ndim).to_bytes(4, "big") + b"".join(
        int(d).to_bytes(4, "big") for d in arr.shape)
    payload = header + arr.tobytes()
    path = Path(path)
    path.write_bytes(gzip.compress(payload, mtime=0) if path.suffix == ".gz" else payload)


def _cache_dir() -> Path | None:
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # pragma: no cover - platformdirs is in the train extra
        return None
    return Path(user_cache_dir("dpcalc")) / "datasets"


def search_dirs(name: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The directories searched for dataset ``name``, in order.

    ``--data-dir`` (if given), ``$DPCALC_DATA/<name>``, the user cache directory
    (platformdirs: ``<cache>/dpcalc/datasets/<name>``), ``/usr/share/datasets/<name>``
    (Debian's ``dataset-fashion-mnist`` installs Fashion-MNIST there).
    """
    name = v.choice("dataset", name, tuple(DATASETS))
    dirs: list[Path] = []
    if data_dir is not None:
        dirs.append(Path(data_dir))
    env = os.environ.get("DPCALC_DATA")
    if env:
        dirs.append(Path(env) / name)
    cache = _cache_dir()
    if cache is not None:
        dirs.append(cache / name)
    dirs.append(Path("/usr/share/datasets") / name)
    return dirs


def _files_in(directory: Path) -> dict[str, Path] | None:
    found = {part: _files_in_part(directory, part) for part in SPLIT_FILES}
    return None if any(p is None for p in found.values()) else found


def find_dataset(name: str, data_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """The four IDX files of ``name`` from the first directory of :func:`search_dirs` holding all of them.

    Raises:
        ParameterError: unknown dataset name; ``data_dir`` given but missing or not a directory.
        DataError: not found anywhere (the message lists where to put the files);
            ``data_dir`` given but incomplete.
    """
    dirs = search_dirs(name, data_dir)
    if data_dir is not None:
        if not Path(data_dir).exists():
            raise ParameterError("data_dir", "", str(data_dir),
                                 message=f"--data-dir {data_dir} does not exist")
        if not Path(data_dir).is_dir():
            raise ParameterError("data_dir", "", str(data_dir),
                                 message=f"--data-dir {data_dir} is not a directory")
        files = _files_in(Path(data_dir))
        if files is None:
            missing = [SPLIT_FILES[p] for p in SPLIT_FILES
                       if _files_in_part(Path(data_dir), p) is None]
            raise DataError(f"--data-dir {data_dir} lacks {', '.join(missing)} (raw or .gz)")
        return files
    for d in dirs:
        files = _files_in(d)
        if files is not None:
            return files
    raise DataError(
        f"{DATASETS[name].title} not found; put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        f"t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz in one of: "
        + ", ".join(str(d) for d in dirs) + " (or use --data-dir, or --download)")


def _files_in_part(directory: Path, part: str) -> Path | None:
    stem = SPLIT_FILES[part]
    for candidate in (directory / stem, directory / (stem + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def load_dataset(name: str, data_dir: str | os.PathLike | None = None) -> IdxDataset:
    """Find and load a dataset, validating every file.

    Args:
        name: ``"mnist"`` or ``"fashion-mnist"``.
        data_dir: a directory to use instead of the search path.

    Raises:
        ParameterError: unknown dataset name.
        DataError: files missing or invalid, or image/label counts that disagree.
    """
    files = find_dataset(name, data_dir)
    arrays = {}
    for part, path in files.items():
        arrays[part] = read_idx(path, kind="images" if part.endswith("images") else "labels")
    for split in ("train", "test"):
        n_img, n_lab = len(arrays[f"{split}_images"]), len(arrays[f"{split}_labels"])
        if n_img != n_lab:
            raise DataError(
                f"{files[f'{split}_images']} holds {n_img} images but "
                f"{files[f'{split}_labels']} holds {n_lab} labels")
    if len(arrays["train_labels"]) == 0:
        raise DataError(f"{files['train_images']} holds no training examples")
    return IdxDataset(name, files["train_images"].parent, **arrays)


def download_dataset(name: str) -> Path:
    """Fetch the official files of ``name`` into the user cache directory, verifying
    their MD5 checksums (pooch), and return that directory.

    Raises:
        DataError: no network, or every mirror failed, or a checksum mismatch; the message
            says where to put the files by hand.
    """
    info = DATASETS[v.choice("dataset", name, tuple(DATASETS))]
    cache = _cache_dir()
    if cache is None:  # pragma: no cover
        raise DataError("--download needs platformdirs (pip install 'dpcalc[train]')")
    target = cache / name
    try:
        import pooch
    except ImportError:  # pragma: no cover
        raise DataError("--download needs pooch (pip install 'dpcalc[train]')") from None
    pooch.get_logger().setLevel("WARNING")  # no "Downloading ..." chatter on stderr
    existed = target.exists()
    for part, stem in SPLIT_FILES.items():
        fname = stem + ".gz"
        last_error: Exception | None = None
        for base in info.urls:
            try:
                pooch.retrieve(base + fname, known_hash="md5:" + info.md5[part], fname=fname,
                               path=target, progressbar=False)
                last_error = None
                break
            except Exception as e:  # noqa: BLE001 - network/checksum errors of any kind -> one line
                last_error = e
        if last_error is not None:
            if not existed and target.is_dir() and not any(target.iterdir()):
                target.rmdir()  # leave nothing half-made behind
            raise DataError(
                f"could not download {fname} of {info.title} ({_short_reason(last_error)}); "
                f"without network, put the four files (train/t10k images/labels, .gz) in {target} "
                "or pass --data-dir")
    return target


def _short_reason(err: Exception) -> str:
    text = str(err)
    if "hash" in text.lower() and isinstance(err, ValueError):
        return "checksum mismatch"
    if isinstance(err, OSError) or "Connection" in type(err).__name__ or "resolve" in text.lower():
        return "no network connection"
    first = text.splitlines()[0] if text else type(err).__name__
    return first[:120]

"""Digits and CIFAR loaders: split sizes, stratification, train-only normalisation, on-disk formats."""

import os
import pickle

import numpy as np
import pytest
import torch

from ensemblize.data.images import load_cifar, load_digits, load_images


def test_digits_split_is_stratified_seeded_and_normalised_on_train():
    s = load_digits(seed=3)
    n = len(s.y_train) + len(s.y_val) + len(s.y_test)
    assert n == 1797 and s.x_train.shape[1:] == (1, 8, 8)
    assert abs(len(s.y_test) - 0.2 * 1797) <= 1 and abs(len(s.y_val) - 0.15 * 1797) <= 1
    # train statistics are exactly zero-mean / unit-std after normalisation; the others are not forced to be
    assert abs(float(s.x_train.mean())) < 1e-5 and abs(float(s.x_train.std(unbiased=False)) - 1) < 1e-4
    # stratified: every class's share in test within 1 sample of its overall share
    counts = torch.bincount(torch.cat([s.y_train, s.y_val, s.y_test]), minlength=10).double()
    test_counts = torch.bincount(s.y_test, minlength=10).double()
    assert torch.all((test_counts - counts * len(s.y_test) / n).abs() <= 1.0)
    again = load_digits(seed=3)
    assert torch.equal(again.x_test, s.x_test) and not torch.equal(load_digits(seed=4).y_test, s.y_test)
    # normalize/denormalize round trip to [0, 1] pixels
    px = s.denormalize(s.x_test)
    assert float(px.min()) > -1e-5 and float(px.max()) < 1 + 1e-5
    torch.testing.assert_close(s.normalize(px), s.x_test)


def test_digits_class_subset_relabels_in_given_order():
    s = load_digits(seed=0, classes=[7, 2])
    assert s.num_classes == 2 and s.class_names == ("7", "2")
    full = load_digits(seed=0)
    assert set(s.y_train.tolist()) == {0, 1}
    assert len(s.y_train) + len(s.y_val) + len(s.y_test) == int(
        (
            (torch.cat([full.y_train, full.y_val, full.y_test]) == 7)
            | (torch.cat([full.y_train, full.y_val, full.y_test]) == 2)
        ).sum()
    )
    with pytest.raises(ValueError, match="classes"):
        load_digits(classes=[3, 3])
    with pytest.raises(ValueError, match="unknown"):
        load_digits(classes=[11])


def _write_py_cifar(root, n_per_batch=6, num_classes=10):
    rng = np.random.default_rng(0)
    folder = root / ("cifar-10-batches-py" if num_classes == 10 else "cifar-100-python")
    folder.mkdir()
    names = (
        [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if num_classes == 10 else ["train", "test"]
    )
    key = b"labels" if num_classes == 10 else b"fine_labels"
    truth = {}
    for name in names:
        n = n_per_batch * (5 if num_classes == 100 and name == "train" else 1)
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = list(np.arange(n) % 2)
        with open(folder / name, "wb") as fh:
            pickle.dump({b"batch_label": b"x", key: labels, b"data": data, b"filenames": [b"f"] * n}, fh)
        truth[name] = (data, labels)
    return truth


def test_cifar_python_format_reads_what_was_written(tmp_path):
    truth = _write_py_cifar(tmp_path)
    s = load_cifar(tmp_path, num_classes=10, seed=0, val_fraction=0.2)
    assert s.x_test.shape == (6, 3, 32, 32) and len(s.y_train) + len(s.y_val) == 30
    data, labels = truth["test_batch"]
    expect = data.reshape(-1, 3, 32, 32) / 255.0
    torch.testing.assert_close(s.denormalize(s.x_test).double(), torch.from_numpy(expect), atol=1e-5, rtol=0)
    assert s.y_test.tolist() == labels


def test_cifar_python_batches_whose_labels_do_not_match_their_images_are_refused(tmp_path):
    """A batch one label short used to shift every later label silently; a label 10 loaded as class 10 of
    10; images stored channels-last were reshaped into scrambled pixels."""
    _write_py_cifar(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    good = batch.read_bytes()

    def rewrite(change):
        d = pickle.loads(good)
        change(d)
        batch.write_bytes(pickle.dumps(d))

    for change, match in (
        (lambda d: d.__setitem__(b"labels", d[b"labels"][1:]), "6 images but 5 labels"),
        (
            lambda d: d.__setitem__(b"labels", [10] * len(d[b"labels"])),
            r"labels must lie in \[0, 9\], got 10..10",
        ),
        (lambda d: d.__setitem__(b"data", d[b"data"].reshape(-1, 32, 32, 3)), "uint8 rows of 3072 values"),
    ):
        rewrite(change)
        with pytest.raises(ValueError, match=match):
            load_cifar(tmp_path, num_classes=10, seed=0, val_fraction=0.2)


def test_cifar_binary_format(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        rows = rng.integers(0, 256, size=(4, 3073), dtype=np.uint8)
        rows[:, 0] = [0, 1, 0, 1]
        rows.tofile(folder / name)
    s = load_images("cifar10", root=tmp_path)
    assert s.x_test.shape == (4, 3, 32, 32) and s.y_test.tolist() == [0, 1, 0, 1]


def test_cifar_missing_files_name_what_is_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        load_cifar(tmp_path)
    with pytest.raises(ValueError, match="root"):
        load_images("cifar100")


def test_cifar_python_reader_refuses_code(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": Evil()}, fh)
    with pytest.raises(ValueError, match="not a CIFAR python batch: refusing to load posix.system|refusing"):
        load_cifar(tmp_path)


def _opcodes_array(shape_ops: bytes, dtype: str, buffer: bytes) -> bytes:
    """Pickle opcodes calling numpy.ndarray(shape, numpy.dtype(dtype), buffer) directly (REDUCE)."""

    def glob(module, name):
        return b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def text(s):
        return b"X" + len(s).to_bytes(4, "little") + s.encode()

    def raw(b):
        return b"B" + len(b).to_bytes(4, "little") + b

    return (glob("numpy", "ndarray") + b"(" + shape_ops + b"t" + glob("numpy", "dtype") + text(dtype) + b"\x85R"
            + raw(buffer) + b"\x87R")  # fmt: skip


@pytest.mark.parametrize(
    ("array", "why"),
    [
        # an object array whose PyObject pointers are bytes from the file: a segfault when the labels were read
        (_opcodes_array(b"K\x01", "O", b"A" * 8), "must reconstruct numpy.ndarray"),
        # a 16 TiB allocation asked for by a 100-byte file
        (_opcodes_array(b"\x8a\x06\x00\x00\x00\x00\x00\x10", "u1", b""), "must reconstruct numpy.ndarray"),
    ],
    ids=["object-pointers", "huge-shape"],
)
def test_cifar_python_reader_never_lets_the_file_call_numpy(tmp_path, array, why):
    """numpy.ndarray was an allowed global, so a crafted batch could call it: memory corruption (SIGSEGV)."""
    from ensemblize.data.array_pickle import load_array_pickle

    data = _opcodes_array(b"K\x01M\x00\x0c", "u1", bytes(3072))
    crafted = b"\x80\x02}(" + b"C\x04data" + data + b"C\x06labels" + array + b"u."
    with pytest.raises(pickle.UnpicklingError, match=why):
        load_array_pickle(crafted)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_arrays_of_numbers_round_trip_and_other_dtypes_are_refused(protocol):
    from ensemblize.data.array_pickle import load_array_pickle

    rng = np.random.default_rng(0)
    obj = {
        b"data": rng.integers(0, 256, size=(3, 8), dtype=np.uint8),
        b"f": np.asfortranarray(rng.normal(size=(2, 3))),
        b"big": np.arange(4, dtype=">i4"),
        b"labels": [1, 2, 3],
        "t": (b"x", 1.5, None),
    }
    back = load_array_pickle(pickle.dumps(obj, protocol=protocol))
    assert back.keys() == obj.keys() and back[b"labels"] == [1, 2, 3] and back["t"] == (b"x", 1.5, None)
    for key in (b"data", b"f", b"big"):
        np.testing.assert_array_equal(back[key], obj[key])
        assert back[key].dtype == obj[key].dtype and back[key].flags.writeable
    for bad in (np.array([object()], dtype=object), np.zeros(2, dtype=[("a", "u1")]), np.zeros(2, "U3")):
        with pytest.raises(
            pickle.UnpicklingError, match=r"dtype|refusing to load (__builtin__|builtins)\.object"
        ):
            load_array_pickle(pickle.dumps({b"data": bad}, protocol=protocol))


def test_load_digits_names_a_bad_seed_or_a_fraction_too_small_to_stratify():
    from ensemblize.data.images import load_digits

    for seed, error in ((-1, ValueError), (1.5, TypeError), ("0", TypeError), (2**40, ValueError)):
        with pytest.raises(error, match="seed"):
            load_digits(seed=seed)
    with pytest.raises(
        ValueError, match=r"val_fraction=0.001 gives 2 of 1797 digits examples, fewer than its 10"
    ):
        load_digits(val_fraction=0.001)


def test_a_partial_cifar_folder_names_the_missing_files(tmp_path):
    from ensemblize.data.images import load_cifar

    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"x")
    with pytest.raises(
        FileNotFoundError, match=r"holds 1 of the 6 files; missing: data_batch_2, .*test_batch\."
    ):
        load_cifar(tmp_path)


def _py2_array(a: np.ndarray) -> bytes:
    """A uint8 array pickled as Python 2's cPickle writes it (protocol 2): the dtype's type string and byte
    order are Python 2 ``str``, short binary strings (opcode ``U``), which read back as bytes."""

    def short(b: bytes) -> bytes:
        return b"U" + bytes([len(b)]) + b

    def int32(i: int) -> bytes:
        return b"J" + int(i).to_bytes(4, "little", signed=True)

    shape = b"(" + b"".join(int32(n) for n in a.shape) + b"t"
    dtype = b"cnumpy\ndtype\n" + short(b"u1") + b"K\x00K\x01\x87R(K\x03" + short(b"|") + b"NNN"
    dtype += int32(-1) + int32(-1) + b"K\x00tb"
    raw = b"T" + len(a.tobytes()).to_bytes(4, "little") + a.tobytes()
    return (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + short(b"b") + b"\x87R(K\x01"
            + shape + dtype + b"\x89" + raw + b"tb")  # fmt: skip


def test_the_official_python_2_batches_load(tmp_path):
    """CIFAR's own python batches were written by Python 2: their dtype strings come back as bytes, which
    the reader refused ('an array dtype must be a type string, got bytes')."""
    from ensemblize.data.array_pickle import load_array_pickle

    small = np.array([1, 2, 3, 4], dtype=np.uint8)
    np.testing.assert_array_equal(load_array_pickle(b"\x80\x02" + _py2_array(small) + b"."), small)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (20, 3072), dtype=np.uint8)
        labels = np.arange(20) % 10
        body = b"".join(b"J" + int(v).to_bytes(4, "little", signed=True) for v in labels)
        batch = b"\x80\x02}(U\x04data" + _py2_array(data) + b"U\x06labels](" + body + b"eu."
        assert pickle.loads(batch, encoding="bytes")[b"data"].shape == (20, 3072)  # what the stdlib reads
        (folder / name).write_bytes(batch)
        written[name] = (data, labels)
    s = load_cifar(tmp_path, seed=0)
    data, labels = written["test_batch"]
    torch.testing.assert_close(
        s.denormalize(s.x_test).double(),
        torch.from_numpy(data.reshape(-1, 3, 32, 32) / 255.0),
        atol=1e-5,
        rtol=0,
    )
    assert s.y_test.tolist() == labels.tolist()


def test_python_3_protocol_2_batches_with_empty_bytes_load():
    from ensemblize.data.array_pickle import load_array_pickle

    batch = {b"batch_label": b"", b"labels": [0, 1], b"data": np.zeros((2, 3072), dtype=np.uint8)}
    got = load_array_pickle(pickle.dumps(batch, protocol=2))
    assert got[b"batch_label"] == b"" and got[b"labels"] == [0, 1]
    with pytest.raises(pickle.UnpicklingError, match=r"bytes\(\.\.\.\) with arguments"):
        load_array_pickle(b"\x80\x02c__builtin__\nbytes\nJ\x00\x00\x00\x40\x85R.")  # bytes(2**30)


@pytest.mark.parametrize(
    ("labels", "shown"),
    [([2.9] * 6, "float64"), (["cat"] * 6, "<U3"), (None, "object")],
    ids=["float", "text", "none"],
)
def test_cifar_labels_that_are_not_class_indices_are_refused_naming_the_file(tmp_path, labels, shown):
    """Float labels 2.9 were truncated to class 2; text raised int()'s error without the file."""
    _write_py_cifar(tmp_path)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    with open(bad, "rb") as fh:
        batch = pickle.load(fh)
    batch[b"labels"] = labels
    with open(bad, "wb") as fh:
        pickle.dump(batch, fh)
    with pytest.raises(ValueError, match=rf"data_batch_2: labels must be whole numbers .*got {shown}"):
        load_cifar(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"seed": -1}, "seed must be >= 0"), ({"val_fraction": 1.0}, r"val_fraction must be in \(0, 1\)"),
     ({"val_fraction": 0.01}, "fewer than its 2 classes")],
)  # fmt: skip
def test_load_cifar_checks_its_arguments_as_load_digits_does(tmp_path, kwargs, match):
    _write_py_cifar(tmp_path)
    with pytest.raises(ValueError, match=match):
        load_cifar(tmp_path, **kwargs)

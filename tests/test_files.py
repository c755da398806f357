"""dpcalc._files.read_input_file: every bad path is a ParameterError naming the option."""

from __future__ import annotations

import pytest

from dpcalc._files import read_input_file
from dpcalc.errors import ParameterError


@pytest.mark.parametrize("path", ["a\x00b", "\x00", "/tmp/x\x00.json"])
def test_nul_byte_in_path_is_a_parameter_error(path):
    # os.open raises a raw ValueError ("embedded null byte") on such a name (issue 17)
    with pytest.raises(ParameterError) as info:
        read_input_file(path, option="spec", max_bytes=100)
    assert info.value.name == "spec"
    assert "--spec" in str(info.value) and "null" in str(info.value)


def test_regular_file_read(tmp_path):
    f = tmp_path / "s.txt"
    f.write_bytes(b"1 2 3")
    assert read_input_file(str(f), option="scores", max_bytes=100) == b"1 2 3"


def test_streaming_reader_refuses_a_null_byte_in_one_line():
    """open_input_file (pate --votes) shares read_input_file's checks, the null byte included."""
    from dpcalc._files import open_input_file

    with pytest.raises(ParameterError, match="null byte"):
        open_input_file("a\x00b", option="votes", max_bytes=10)

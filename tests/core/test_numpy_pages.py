"""The library's processes leave NumPy's huge-page mark off unless told otherwise (`engram_pipelines/__init__.py`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="NumPy marks huge pages on Linux only")
PROBE = (
    "import engram_pipelines, numpy\n"
    "from numpy._core import multiarray\n"
    "print(multiarray._get_madvise_hugepage())\n"
)


@pytest.mark.parametrize(("setting", "marked"), [(None, "False"), ("1", "True"), ("0", "False")])
def test_numpy_marks_large_arrays_for_huge_pages_only_when_asked(setting: str | None, marked: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if setting is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = setting
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == marked

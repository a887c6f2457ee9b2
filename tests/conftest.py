"""Shared test set-up: the helper modules at the top of tests/ are importable from every room.

The tests live in one folder per stage (tests/cli/, tests/probe/, ...) without `__init__.py`
files, so pytest's default import mode ("prepend") puts each test's own folder on `sys.path`,
not tests/ itself. The helpers the rooms share (report_factory.py, nvml_fakes.py,
engine_flag_check.py, _hf_oracle.py) stay at tests/ and are found through this one entry.
Without packages, two test files may not share a basename: pytest refuses the second at
collection ("import file mismatch"), so a duplicate cannot slip in unnoticed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
# The generic reader keeps counted shapes in a cache folder: the tests' go to a temporary one,
# never the user's ~/.cache (validator/model_cache.py).
os.environ.setdefault("HWADVISOR_CACHE_DIR", tempfile.mkdtemp(prefix="hwadvisor-test-cache-"))

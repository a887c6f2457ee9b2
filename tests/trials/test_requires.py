"""Trials say what they need once (trials.base.Requires), and the first missing piece is named."""

from __future__ import annotations

import pytest

from hwadvisor.trials import base
from hwadvisor.trials.base import Requires

torch = pytest.importorskip("torch")


def test_nothing_required_but_torch_is_met():
    assert Requires().reason() is None


def test_a_missing_torch_feature_is_named_with_its_version_need():
    reason = Requires(torch_features=(("no_such_op", "needs >= 9.9"),)).reason()
    assert reason is not None and "torch.no_such_op" in reason and "needs >= 9.9" in reason


def test_a_submodule_feature_is_found():
    assert Requires(torch_features=(("nn.functional.scaled_dot_product_attention", ""),)) \
        .reason() is None


def test_cuda_is_checked_before_features(monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: False)
    reason = Requires(cuda=True, torch_features=(("no_such_op", ""),)).reason()
    assert reason == base.NO_CUDA


def test_a_missing_compiler_is_said(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = Requires(c_compiler=True).reason()
    assert reason is not None and "compiler" in reason


def test_without_torch_nothing_else_is_asked(monkeypatch):
    monkeypatch.setattr(base, "torch_missing", lambda: base.TORCH_MISSING)
    assert Requires(cuda=True, c_compiler=True).reason() == base.TORCH_MISSING

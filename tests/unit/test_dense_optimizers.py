"""Adam and SGD of aner-dense/v1 against SPEC's formulas evaluated scalar by scalar."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_worker.kernels.dense.optimizers import OptimizerState, initial_state, step


def _adam_scalar(p: float, g_seq: list[float], lr: float) -> tuple[float, float, float]:
    """SPEC's Adam on one parameter, Python floats, the expressions exactly as written."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    m = v = 0.0
    for t, g in enumerate(g_seq, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p -= lr * (m / (1 - beta1**t)) / (math.sqrt(v / (1 - beta2**t)) + eps)
    return p, m, v


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)


@settings(max_examples=100, deadline=None)
@given(
    p0=st.lists(finite, min_size=1, max_size=6),
    steps=st.integers(1, 12),
    lr=st.sampled_from([1e-3, 0.01, 0.5]),
    data=st.data(),
)
def test_adam_is_bitwise_spec(p0: list[float], steps: int, lr: float, data: st.DataObject) -> None:
    grads = [data.draw(st.lists(finite, min_size=len(p0), max_size=len(p0))) for _ in range(steps)]
    params = np.array(p0)
    state = initial_state("adam", len(p0))
    for g in grads:
        params, state = step(params, np.array(g), state, lr)
    assert state.t == steps
    for j in range(len(p0)):
        p, m, v = _adam_scalar(p0[j], [g[j] for g in grads], lr)
        assert params[j] == p and state.m[j] == m and state.v[j] == v


def test_adam_first_step_moves_by_about_lr() -> None:
    params, _ = step(
        np.array([1.0, -2.0, 0.0]), np.array([3.0, -0.5, 0.0]), initial_state("adam", 3), 0.01
    )
    # t = 1: m_hat = g and v_hat = g*g, so the step is lr * sign(g), less eps's share.
    assert params[0] == pytest.approx(1.0 - 0.01 * 3.0 / (3.0 + 1e-8), abs=1e-15)
    assert params[1] == pytest.approx(-2.0 + 0.01 * 0.5 / (0.5 + 1e-8), abs=1e-15)
    assert abs(params[1] + 1.99) > 1e-10  # eps's share is there
    assert params[2] == 0.0


def test_sgd_and_purity() -> None:
    p = np.array([1.0, 2.0])
    g = np.array([0.5, -4.0])
    state = initial_state("sgd", 2)
    new, after = step(p, g, state, 0.1)
    assert new.tolist() == [1.0 - 0.1 * 0.5, 2.0 - 0.1 * -4.0]
    assert after.t == 1 and state.t == 0
    assert p.tolist() == [1.0, 2.0] and g.tolist() == [0.5, -4.0]
    adam = initial_state("adam", 2)
    step(p, g, adam, 0.1)
    assert adam.t == 0 and adam.m.tolist() == [0.0, 0.0]


def test_state_roundtrips_through_npz(tmp_path: Path) -> None:
    params = np.linspace(-1, 1, 7)
    state = initial_state("adam", 7)
    rng = np.random.default_rng(0)
    for _ in range(5):
        params, state = step(params, rng.normal(size=7), state, 1e-3)
    np.savez(tmp_path / "ckpt.npz", **state.to_arrays())
    with np.load(tmp_path / "ckpt.npz", allow_pickle=False) as f:
        restored = OptimizerState.from_arrays(dict(f))
    assert restored.name == "adam" and restored.t == 5
    assert np.array_equal(restored.m, state.m) and np.array_equal(restored.v, state.v)
    g = rng.normal(size=7)
    a, _ = step(params, g, state, 1e-3)
    b, _ = step(params, g, restored, 1e-3)
    assert np.array_equal(a, b)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="'adam' or 'sgd'"):
        initial_state("rmsprop", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="equal flat vectors"):
        step(np.zeros(3), np.zeros(2), initial_state("adam", 3), 0.1)
    with pytest.raises(ValueError, match="positive finite"):
        step(np.zeros(3), np.zeros(3), initial_state("adam", 3), float("nan"))
    with pytest.raises(ValueError, match="holds 2 moments for 3"):
        step(np.zeros(3), np.zeros(3), initial_state("adam", 2), 0.1)
    with pytest.raises(ValueError, match="unknown optimizer"):
        OptimizerState.from_arrays(
            {"optimizer": np.array("x"), "t": np.array(1), "m": np.zeros(1), "v": np.zeros(1)}
        )


def _adam_numpy(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float):  # type: ignore[no-untyped-def]
    """The numpy form (one operation over the whole vector at a time) that the numba loop
    replaced: SPEC's operations in SPEC's order."""
    m = np.multiply(m, 0.9) + np.multiply(g, 1.0 - 0.9)
    v = np.multiply(v, 0.999) + np.multiply(g, 1.0 - 0.999) * g
    m_hat = m / (1.0 - 0.9**t)
    v_hat = v / (1.0 - 0.999**t)
    return p - (m_hat * lr) / (np.sqrt(v_hat) + 1e-8), m, v


@pytest.mark.parametrize("rows", [1, 7, 8192])
def test_adam_on_a_sum_is_bitwise_the_numpy_form_on_its_mean(rows: int) -> None:
    # Wide magnitudes (tiny, huge, subnormal products) over many steps: any fused
    # multiply-add or reordering in the loop would show in some of 50,000 elements.
    rng = np.random.default_rng(rows)
    n = 50_000
    p = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    state = initial_state("adam", n)
    ref_p, ref_m, ref_v = p.copy(), np.zeros(n), np.zeros(n)
    for t in range(1, 6):
        grad_sum = rng.standard_normal(n) * 10.0 ** rng.integers(-150, 150, n)
        ref_p, ref_m, ref_v = _adam_numpy(ref_p, grad_sum / rows, ref_m, ref_v, t, 3e-3)
        p, state = step(p, grad_sum, state, 3e-3, n=rows)
        assert state.t == t
        assert np.array_equal(p, ref_p) and np.array_equal(state.m, ref_m)
        assert np.array_equal(state.v, ref_v)


def test_sgd_on_a_sum_divides_first() -> None:
    grad_sum = np.array([3.0, -1.0, 0.1])
    p, _ = step(np.ones(3), grad_sum, initial_state("sgd", 3), 0.1, n=3)
    assert np.array_equal(p, np.ones(3) - 0.1 * (grad_sum / 3))

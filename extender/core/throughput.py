"""Single-GPU throughput curves sPR(b') beside GENIE's Eq. 7, and their choice by held-out error.

Seed 001 §5.1.5 fits sPR(b') = k0 + k1 b' + k2 b'^2 (Eq. 7). Measured rates saturate in the
batch: the iteration time is close to affine in b' (with steps at small batches where cuDNN
switches kernels), and a quadratic bends back down past its vertex (issue 23). So a profile
may use one of four forms, chosen per model by leave-one-out error:

- ``quadratic``: Eq. 7 as written, the seed's reference;
- ``affine-time``: iteration time t(b') = a + c b', so sPR = b' / t(b');
- ``interpolated``: iteration times made non-decreasing in b' (a bigger batch never takes
  less time) and interpolated piecewise-linearly; outside the measured batches the first or
  last segment's slope is followed;
- ``launch-floor``: t(b') = max(f, a + c b'). Small models at small batches are launch-bound:
  the host thread issuing the kernels sets the step time, whatever the batch (measured on an
  H200: ResNet-18's step takes 4.6-5.1 ms from batch 16 to 384), until the GPU's work
  overtakes it and the time grows with the batch. One floor fitted over all launch-bound sizes
  averages their host noise out, which a curve through every point cannot.

Outside the measured range every iteration-time form is guarded the same way
(:func:`time_at`): below the smallest measured batch the rate never exceeds the rate
measured there, and above the largest the time keeps growing (when the last slope is flat
the rate is held at the last measured rate). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from qosmos.extender.core.errors import InvalidInput

QUADRATIC = "quadratic"
AFFINE_TIME = "affine-time"
INTERPOLATED = "interpolated"
LAUNCH_FLOOR = "launch-floor"
FORMS: tuple[str, ...] = (QUADRATIC, AFFINE_TIME, INTERPOLATED, LAUNCH_FLOOR)  # ties go left
KNOTTED: tuple[str, ...] = (INTERPOLATED, LAUNCH_FLOOR)  # forms stored as knots of iteration time
MIN_BATCHES: Mapping[str, int] = {QUADRATIC: 3, AFFINE_TIME: 2, INTERPOLATED: 2, LAUNCH_FLOOR: 3}
# Held-out errors (in %) closer than this are a tie, won by the simpler form.
TIE_PCT = 1e-6

Knots = tuple[tuple[float, float], ...]
"""(b', iteration time in s) pairs, b' strictly increasing, times > 0 and non-decreasing."""


def check_samples(batches: Sequence[float], rates: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Batches and rates as arrays; InvalidInput unless equally many, positive and finite."""
    b = np.asarray(batches, dtype=float)
    r = np.asarray(rates, dtype=float)
    if b.ndim != 1 or b.shape != r.shape or b.size == 0:
        raise InvalidInput("samples", (b.size, r.size), "need as many rates as batch sizes, at least one")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(r)) and np.all(b > 0) and np.all(r > 0)):
        raise InvalidInput("samples", "batch/rate", "batch sizes and rates must be > 0 and finite")
    return b, r


def distinct_batches(batches: Sequence[float]) -> int:
    return int(np.unique(np.asarray(batches, dtype=float)).size)


def fittable(form: str, batches: Sequence[float]) -> bool:
    """Whether ``form`` is identifiable from these batch sizes (quadratic 3, the others 2 distinct)."""
    return distinct_batches(batches) >= MIN_BATCHES[form]


def fit_affine_time(batches: Sequence[float], rates: Sequence[float]) -> tuple[float, float]:
    """a, c of t(b') = a + c b' (seconds) from single-GPU rates, t = b' / sPR.

    Least squares on the relative time error ((t_fit - t) / t), so each sample weighs the same
    in the rate's relative error that the held-out comparison scores. The slope is kept >= 0:
    a bigger batch never takes less time.
    """
    b, r = check_samples(batches, rates)
    if np.unique(b).size < 2:
        raise InvalidInput("samples", np.unique(b).size, "affine-time needs two distinct batch sizes")
    return _relative_lstsq(b, b / r)


def fit_monotone_knots(batches: Sequence[float], rates: Sequence[float]) -> Knots:
    """Knots of the interpolated form: mean time per batch size, made non-decreasing in b'.

    Pool-adjacent-violators (isotonic regression, weighted by the runs per size): a measured
    time that falls as the batch grows is pooled with its neighbour.
    """
    b, r = check_samples(batches, rates)
    sizes = np.unique(b)
    if sizes.size < 2:
        raise InvalidInput("samples", sizes.size, "interpolation needs two distinct batch sizes")
    t = b / r
    blocks: list[list[float]] = []  # [time, weight, first index, last index]
    for i, s in enumerate(sizes):
        mask = b == s
        blocks.append([float(np.mean(t[mask])), float(np.sum(mask)), i, i])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (t1, w1, lo, _), (t2, w2, _, hi) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(t1 * w1 + t2 * w2) / (w1 + w2), w1 + w2, lo, hi]]
    times = np.empty(sizes.size)
    for value, _, lo, hi in blocks:
        times[int(lo) : int(hi) + 1] = value
    return tuple((float(s), float(v)) for s, v in zip(sizes, times, strict=True))


def _relative_lstsq(b: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """a, c >= 0 of t = a + c b by least squares on the relative error (see fit_affine_time)."""
    w = 1.0 / t
    a, c = np.linalg.lstsq(np.column_stack([w, b * w]), np.ones_like(t), rcond=None)[0]
    if c < 0:  # time falling with the batch is noise: a constant time (the weighted mean) fits best
        return float(np.sum(w) / np.sum(w * w)), 0.0
    return float(a), float(c)


def fit_launch_floor(batches: Sequence[float], rates: Sequence[float]) -> Knots:
    """Knots of the launch-floor form t(b') = max(f, a + c b'), at b_min, the bend and b_max.

    Every split of the sorted batch sizes into a launch-bound head (one floor f: the relative
    least-squares constant of their times) and a tail (a line, as :func:`fit_affine_time`) is
    tried; the one whose max-curve has the least relative squared time error over all samples
    wins. A head of every size is a flat time (the whole range launch-bound). A tail of one size
    does not determine a line: there the time is taken as proportional to the batch (a = 0, the
    rate held from that size on), as a GPU-bound step's work grows with the batch; measured on an
    H200, EfficientNet's and MobileNetV2's steps bend off the floor between the last two of six
    sizes, and a line through a floor size and the one above put the bend too early (10-17 %).
    """
    b, r = check_samples(batches, rates)
    sizes = np.unique(b)
    if sizes.size < 3:
        raise InvalidInput("samples", sizes.size, "launch-floor needs three distinct batch sizes")
    t = b / r
    w = 1.0 / t
    best: tuple[float, float, float, float] | None = None  # (error, f, a, c)
    for k in range(1, sizes.size + 1):
        head = b <= sizes[k - 1]
        f = float(np.sum(w[head]) / np.sum(w[head] ** 2))
        if k == sizes.size:
            a, c = f, 0.0
        elif sizes.size - k < 2:  # one size above the bend: t = c b through it (its runs' relative least squares)
            a, c = 0.0, float(np.sum(b[~head] * w[~head]) / np.sum((b[~head] * w[~head]) ** 2))
        else:
            a, c = _relative_lstsq(b[~head], t[~head])
        err = float(np.sum(((np.maximum(f, a + c * b) - t) * w) ** 2))
        if best is None or err < best[0]:
            best = (err, f, a, c)
    assert best is not None  # k = sizes.size always fits
    _, f, a, c = best
    lo, hi = float(sizes[0]), float(sizes[-1])
    t_hi = max(f, a + c * hi)
    bend = (f - a) / c if c > 0 else math.inf
    if bend - lo <= 1e-9 * (hi - lo):  # the line is above the floor everywhere measured: affine
        return ((lo, a + c * lo), (hi, t_hi))
    if bend >= hi:  # launch-bound over the whole range
        return ((lo, f), (hi, t_hi))
    return ((lo, f), (float(bend), f), (hi, t_hi))


def check_knots(knots: Knots) -> None:
    if len(knots) < 2:
        raise InvalidInput("knots", knots, "need at least two (batch, time) knots")
    for (b0, t0), (b1, t1) in itertools.pairwise(knots):
        if not (math.isfinite(b1) and math.isfinite(t1) and b1 > b0 > 0 and t1 >= t0 > 0):
            raise InvalidInput("knots", knots, "batches must increase, times must be > 0 and non-decreasing")


def time_at(knots: Knots, local_batch: float) -> float:
    """Iteration time t(b') of a piecewise-linear curve through ``knots`` (seconds), guarded outside them.

    Inside: linear interpolation. Above the last knot: the last segment's slope; a flat last
    segment (slope 0) would let the rate grow without bound, so there the rate is held at the
    last knot's instead. Below the first knot: the first segment's slope, but never less time
    than the first knot's per-sample time allows (sPR(b') <= sPR(b_first)), which also keeps
    the time > 0.
    """
    (b_lo, t_lo), (b_hi, t_hi) = knots[0], knots[-1]
    if local_batch < b_lo:
        slope = (knots[1][1] - t_lo) / (knots[1][0] - b_lo)
        return max(t_lo - slope * (b_lo - local_batch), local_batch * t_lo / b_lo)
    if local_batch > b_hi:
        slope = (t_hi - knots[-2][1]) / (b_hi - knots[-2][0])
        if slope <= 0:
            return local_batch * t_hi / b_hi
        return t_hi + slope * (local_batch - b_hi)
    xs = [k[0] for k in knots]
    return float(np.interp(local_batch, xs, [k[1] for k in knots]))


def affine_knots(a: float, c: float, b_min: float, b_max: float) -> Knots:
    """The affine time line as two knots at the measured range's ends, so :func:`time_at` guards it alike."""
    return ((b_min, a + c * b_min), (b_max, a + c * b_max))


Predictor = Callable[[float], float]
"""sPR(b') of a curve fitted on a training fold."""


def leave_one_out(
    batches: Sequence[float],
    rates: Sequence[float],
    fit: Callable[[Sequence[float], Sequence[float]], Predictor],
    min_batches: int,
) -> float | None:
    """Mean |sPR_pred(b_i) - sPR_i| / sPR_i over i, in %, each prediction fitted without sample i.

    None when some fold keeps fewer than ``min_batches`` distinct batch sizes (the form is not
    fitted, which is not an error of 0). A fold whose fit is refused (InvalidInput, e.g. a
    quadratic that is not positive on its range) predicts no progress: 100 % error.
    """
    b, r = check_samples(batches, rates)
    errors = []
    for i in range(b.size):
        keep = np.arange(b.size) != i
        if np.unique(b[keep]).size < min_batches:
            return None
        try:
            pred = fit(list(b[keep]), list(r[keep]))(float(b[i]))
        except InvalidInput:
            pred = 0.0
        errors.append(abs(pred - r[i]) / r[i])
    return 100.0 * float(np.mean(errors))


def choose_form(errors: Mapping[str, float | None]) -> str | None:
    """The form with the lowest held-out error; ties (within TIE_PCT) go to the simpler (FORMS order)."""
    best: str | None = None
    for form in FORMS:
        e = errors.get(form)
        if e is None:
            continue
        best_e = errors[best] if best is not None else None
        if best_e is None or e < best_e - TIE_PCT:
            best = form
    return best


def split_alternate(batches: Sequence[float]) -> tuple[list[float], list[float]]:
    """Distinct batch sizes split into every other one from the smallest (fit) and the rest (held out)."""
    sizes = [float(s) for s in np.unique(np.asarray(batches, dtype=float))]
    return sizes[0::2], sizes[1::2]

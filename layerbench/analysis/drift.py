"""Did the host move? Read from the drift sentinel (observe/sentinel.py) and the baseline.

- Inside one experiment: each sentinel part's trend over the experiment (Kendall's tau
  against the probe's order, exact for small counts), Holm-corrected over the parts.
- Between two experiments: each part's samples of A against B (the rank-sum test and the
  Hodges-Lehmann ratio with its interval, from stats.methods), Holm-corrected over the
  parts.

A part moved when the test rejects at its corrected level and the change is material
(MATERIAL: beyond x1.25 either way): a 3 % shift of a 25 ms probe found with 30 samples is
real but says nothing about the host."""

import math
from dataclasses import dataclass

import numpy as np

from layerbench.observe import sentinel
from layerbench.stats import family, methods

ALPHA = 0.05
MATERIAL = 1.25
MIN_SAMPLES = 4  # per side or per experiment: fewer cannot reject at ALPHA over four parts


@dataclass(frozen=True)
class Movement:
    part: str
    ratio: float  # later / earlier (B / A between experiments)
    low: float | None  # the ratio's interval at the decision level, where there is one
    high: float | None
    p_adjusted: float
    moved: bool
    samples: tuple[int, int]  # (earlier, later) sample counts

    @property
    def label(self) -> str:
        known = sentinel.PARTS.get(self.part)
        return known.label if known else self.part

    def phrase(self) -> str:
        return f"{self.label} x{self.ratio:.2f}"

    def as_dict(self) -> dict[str, object]:
        return {
            "part": self.part,
            "ratio": self.ratio,
            "ci_low": self.low,
            "ci_high": self.high,
            "p_adjusted": self.p_adjusted,
            "moved": self.moved,
            "samples": list(self.samples),
        }


def _values(samples: list[sentinel.Sample], part: str) -> np.ndarray:
    return np.asarray([s.parts[part] for s in samples if s.parts.get(part, 0) > 0], dtype=float)


def _parts(*sides: list[sentinel.Sample]) -> list[str]:
    names: list[str] = []
    for side in sides:
        for sample in side:
            names += [n for n in sample.parts if n not in names]
    return names


def _material(ratio: float) -> bool:
    return abs(math.log(ratio)) > math.log(MATERIAL)


def within(samples: list[sentinel.Sample]) -> list[Movement]:
    """Each part's trend over one experiment; the ratio is the later half's median over the
    earlier half's."""
    from scipy import stats as scipy_stats  # deferred: 0.45 s of import `clean` needs not

    found: list[tuple[str, float, float, tuple[int, int]]] = []
    for part in _parts(samples):
        values = _values(samples, part)
        if len(values) < MIN_SAMPLES:
            continue
        half = len(values) // 2
        tau = scipy_stats.kendalltau(np.arange(len(values)), values)
        p_value = 1.0 if math.isnan(tau.pvalue) else float(tau.pvalue)
        ratio = float(np.median(values[-half:]) / np.median(values[:half]))
        found.append((part, ratio, p_value, (half, half)))
    adjusted = family.adjust([p for _, _, p, _ in found], ALPHA, "holm")
    return [
        Movement(part, ratio, None, None, a.p_adjusted, p <= a.alpha and _material(ratio), counts)
        for (part, ratio, p, counts), a in zip(found, adjusted, strict=True)
    ]


def between(a: list[sentinel.Sample], b: list[sentinel.Sample]) -> list[Movement]:
    """Each part of B's sentinel against A's."""
    fits: list[tuple[str, methods.Fit, tuple[int, int]]] = []
    for part in _parts(a, b):
        values_a, values_b = _values(a, part), _values(b, part)
        if min(len(values_a), len(values_b)) < MIN_SAMPLES:
            continue
        fit = methods.rank_sum(methods.log_values(values_b), methods.log_values(values_a))
        fits.append((part, fit, (len(values_a), len(values_b))))
    adjusted = family.adjust([f.p_value for _, f, _ in fits], ALPHA, "holm")
    moves = []
    for (part, fit, counts), level in zip(fits, adjusted, strict=True):
        low, high, _ = fit.interval(level.alpha)
        ratio = math.exp(fit.estimate)
        excluded = low > 0 or high < 0
        moves.append(
            Movement(
                part,
                ratio,
                math.exp(low),
                math.exp(high),
                level.p_adjusted,
                excluded and _material(ratio),
                counts,
            )
        )
    return moves


def moved(moves: list[Movement]) -> list[Movement]:
    return [m for m in moves if m.moved]


def sentence(moves: list[Movement], *, where: str) -> str | None:
    """One line naming what moved, or None."""
    found = moved(moves)
    if not found:
        return None
    parts = ", ".join(m.phrase() for m in found)
    return f"the drift sentinel moved {where}: {parts}"


# The CPU part is a fixed loop: its spread from probe to probe is the host's own CPU speed
# moving (a vCPU slowed by the hypervisor's other work shows no steal time when it runs slower
# rather than not at all). Measured on this project's VM with nothing else running: the same
# loop took 105-254 ms, CV 22-30 % per vCPU, in phases of several seconds, the two vCPUs
# largely apart (1-s means correlated 0.29-0.44). Beyond STEADY_CV a comparison finer than that
# spread needs many more repetitions than a quiet host's.
STEADY_CV = 0.10


@dataclass(frozen=True)
class Steadiness:
    cv: float
    low: float
    high: float
    samples: int

    def sentence(self) -> str:
        return (
            f"the host's CPU speed moved from probe to probe: the drift sentinel's fixed CPU loop took "
            f"{1000 * self.low:.0f}-{1000 * self.high:.0f} ms between trials (CV {100 * self.cv:.0f} %, "
            f"{self.samples} probes); a run that spends its time on the CPU (system time included) is no "
            "steadier than that, so comparisons of such runs finer than it need many more repetitions here"
        )


def cpu_steadiness(samples: list[sentinel.Sample]) -> Steadiness | None:
    """The spread of the sentinel's CPU part over one experiment (None: too few probes)."""
    values = _values(samples, "cpu")
    if len(values) < MIN_SAMPLES:
        return None
    cv = float(np.std(values, ddof=1) / np.mean(values))
    return Steadiness(cv, float(values.min()), float(values.max()), len(values))


def unsteady_sentence(samples: list[sentinel.Sample]) -> str | None:
    """A warning where the host's CPU speed spread beyond STEADY_CV, or None."""
    found = cpu_steadiness(samples)
    return found.sentence() if found is not None and found.cv > STEADY_CV else None

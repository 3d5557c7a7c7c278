"""The bounded metrics history of a run: `status.trainer.history`, for curves.

The trainer keeps, per metric, at most `MAX_POINTS` points `[step, value]`, steps ascending,
and sends them with every progress report; the operator mirrors them into
`status.trainer.history`, and the gateway serves them (`GET /v1/fine_tuning/jobs/{id}/metrics`,
the console's curves). Shape:

    {"reward": [[1, 0.12], [2, 0.15], ...], "kl": [[1, 0.0], ...], "eval/greedy_reward": ...}

Downsampling keeps the curve's whole span in bounded space: a series records every
`stride`-th step; when it holds more than `MAX_POINTS`, the stride doubles and the points off
the new stride are dropped. The newest point is always kept (last), so a curve ends at the
latest step. Values are rounded to 6 significant digits. Pure: the operator reads it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

# Which of a step's metrics are kept: the curves a tenant looks at.
HISTORY_METRICS = (
    "reward",
    "kl",
    "response_length",
    "loss",
    "accuracy",
    "eval/greedy_reward",
    "eval/mean_reward",
    # algorithm.rolloutCorrection's: the engine/trainer gap and how much the correction cut
    # (`objectives.online.MISMATCH_STATS`); only a run with the correction on reports them.
    "rollout/mismatch_kl",
    "rollout/rho_mean",
    "rollout/rho_min",
    "rollout/rho_max",
    "rollout/masked_fraction",
    "rollout/truncated_fraction",
)
MAX_POINTS = 200

Point = list[float]  # [step, value]
# The status' types of a point and a series.
HistoryPoint = Annotated[list[float], Field(min_length=2, max_length=2)]
HistorySeries = Annotated[list[HistoryPoint], Field(max_length=MAX_POINTS)]


class MetricsHistory:
    def __init__(self, max_points: int = MAX_POINTS, metrics: tuple[str, ...] = HISTORY_METRICS):
        if max_points < 2:
            raise ValueError("max_points must be >= 2")
        self.max_points = max_points
        self.metrics = metrics
        self._series: dict[str, list[Point]] = {}
        self._latest: dict[str, Point] = {}  # the newest point off the stride
        self._stride: dict[str, int] = {}

    def add(self, step: int, metrics: Mapping[str, float]) -> None:
        for name in self.metrics:
            if name in metrics:
                self._add(name, step, float(metrics[name]))

    def _add(self, name: str, step: int, value: float) -> None:
        series = self._series.setdefault(name, [])
        stride = self._stride.setdefault(name, 1)
        point: Point = [step, float(f"{value:.6g}")]
        if series and step <= series[-1][0]:  # a resumed run repeats steps: keep the newest
            series[:] = [p for p in series if p[0] < step]
        self._latest.pop(name, None)
        if step % stride:
            self._latest[name] = point
            return
        series.append(point)
        while len(series) > self.max_points - 1:  # room for the latest point
            stride *= 2
            series[:] = [p for p in series if int(p[0]) % stride == 0]
        self._stride[name] = stride

    def to_json(self) -> dict[str, list[Point]]:
        """`status.trainer.history`: each metric's points, the newest last."""
        out = {}
        for name, series in self._series.items():
            latest = self._latest.get(name)
            points = [*series, latest] if latest is not None else list(series)
            out[name] = [[int(p[0]), p[1]] for p in points]
        return out

"""An ordered, seeded, resumable sequence of samples read in fixed-size batches.

The order is fixed at load time (shuffled with the job's seed when asked). Training reads it as
one stream that repeats for as many passes (episodes/epochs) as needed; each pass after the
first is reshuffled with `seed + pass`. A position in that stream (the number of samples
consumed so far) is all a checkpoint needs to store: `batches(size, start=position)` continues
exactly where the run stopped.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Batch(Generic[T]):
    """`items` of one step; `position` is the stream position after them (store it to resume)."""

    items: list[T]
    position: int


class OrderedDataset(Generic[T]):
    def __init__(self, items: Sequence[T], *, seed: int, shuffle: bool) -> None:
        if not items:
            raise ValueError("a dataset needs at least one sample")
        self._items = list(items)
        self._seed = seed
        self._shuffle = shuffle
        self._orders: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> T:
        return self._items[index]

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self._items)))
            # The first pass keeps the load order (already shuffled with the seed when asked
            # for); later passes are new, seeded permutations.
            if self._shuffle and epoch > 0:
                random.Random(self._seed + epoch).shuffle(order)
            self._orders[epoch] = order
        return self._orders[epoch]

    def at(self, position: int) -> T:
        """The sample at a stream position (any position >= 0; passes repeat the data)."""
        if position < 0:
            raise ValueError(f"position must be >= 0; got {position}")
        epoch, index = divmod(position, len(self._items))
        return self._items[self._order(epoch)[index]]

    def num_batches(self, batch_size: int, passes: int = 1) -> int:
        """Full batches in `passes` passes over the data (the step count of a run)."""
        _check_batch_size(batch_size)
        return (len(self._items) * passes) // batch_size

    def batches(
        self, batch_size: int, start: int = 0, *, passes: int | None = 1
    ) -> Iterator[Batch[T]]:
        """Full batches from stream position `start` until `passes` passes are consumed
        (`None`: forever). A final incomplete batch is dropped, as every step needs a full one."""
        _check_batch_size(batch_size)
        if start < 0:
            raise ValueError(f"start must be >= 0; got {start}")
        end = None if passes is None else len(self._items) * passes
        position = start
        while end is None or position + batch_size <= end:
            items = [self.at(p) for p in range(position, position + batch_size)]
            position += batch_size
            yield Batch(items, position)


def _check_batch_size(batch_size: int) -> None:
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0; got {batch_size}")

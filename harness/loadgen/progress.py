"""Progress bar over completed requests (tqdm; off when stderr is not a terminal or when told)."""

from __future__ import annotations

from tqdm import tqdm


class Progress:
    """``update(n_done)`` moves the bar to ``n_done`` completed requests; ``close()`` at the end."""

    def __init__(self, total: int, enabled: bool, desc: str = "requests") -> None:
        self._bar = tqdm(total=total, disable=None if enabled else True, unit="req", desc=desc, leave=False)
        self._n = 0

    def update(self, n_done: int) -> None:
        if n_done > self._n:
            self._bar.update(n_done - self._n)
            self._n = n_done

    def close(self) -> None:
        self._bar.close()

"""Progress output for training and prediction: a bar where one can be drawn, one line per step elsewhere.

:class:`Progress` shows a ``tqdm.auto`` bar (a terminal, or a notebook widget) when stderr is a
terminal or the code runs in a Jupyter kernel; otherwise — a CI log, a redirected file — it prints
one concise line per update to stderr, with the elapsed time and an ETA::

    resnet/digits/s0 [3/10 epochs] loss 0.4123 val_nll 0.3310 val_acc 0.9021; 0:04 elapsed, ETA 0:09

``enabled=False`` prints nothing. Only the caller decides (``fit`` passes ``progress`` and rank 0).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping

__all__ = ["Progress", "interactive", "duration"]


def interactive() -> bool:
    """True when stderr is a terminal or the code runs inside a Jupyter kernel (tqdm.auto's widget)."""
    try:
        if sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return bool(get and get() is not None and type(get()).__name__ == "ZMQInteractiveShell")


def duration(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``; ``?`` when unknown."""
    if not math.isfinite(seconds):
        return "?"
    h, rem = divmod(int(round(seconds)), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Counts ``total`` steps labelled ``desc`` (``unit`` names a step); see the module docstring.

    ``initial`` steps are already done (a resumed run): they count for the position, not for the ETA.
    ``total=None``: an open-ended count (a time budget): no ETA.
    """

    def __init__(self, total: int | None, *, desc: str, unit: str, enabled: bool, initial: int = 0) -> None:
        self.total, self.desc, self.unit, self.enabled = total, desc, unit, enabled
        self.done = self.initial = initial
        self.start = time.perf_counter()
        self.bar = None
        if enabled and interactive():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr, leave=True)

    def note(self, text: str) -> None:
        """Describe the step in progress on the bar (no step done); lines mode prints nothing."""
        if self.enabled and self.bar is not None:
            self.bar.set_postfix_str(text)

    def update(self, values: Mapping[str, float] | None = None) -> None:
        """One step done; ``values`` (name -> number) are shown with 4 decimals."""
        self.step(" ".join(f"{k} {v:.4f}" for k, v in (values or {}).items()))

    def step(self, text: str, *, skipped: bool = False) -> None:
        """One step done, described by ``text``. A ``skipped`` step (one resumed from an earlier run, so it
        took no time here) counts for the position like ``initial`` ones, not for the ETA."""
        self.done += 1
        if skipped:
            self.initial += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
            return
        elapsed = time.perf_counter() - self.start
        if self.total is None:
            print(f"{self.desc} [{self.done} {self.unit}s] {text}; {duration(elapsed)} elapsed", file=sys.stderr,
                  flush=True)  # fmt: skip
            return
        ran = self.done - self.initial
        eta = elapsed / ran * (self.total - self.done) if ran else math.inf
        print(
            f"{self.desc} [{self.done}/{self.total} {self.unit}s] {text}; "
            f"{duration(elapsed)} elapsed, ETA {duration(eta)}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        """Close the bar (lines need no closing)."""
        if self.bar is not None:
            self.bar.close()

"""What the model libraries may print: their progress bars and notes are not the user's business.

Our own progress (the rollout, training and evaluation bars) follows each function's ``progress`` flag. The
libraries underneath print bars of their own (transformers' "Loading weights" and "Writing model shards") and
warnings a user cannot act on. `library_bars_off` is put around every load and save this package makes,
whatever the flags, and `library_output` is what the CLI's ``--no-progress`` and ``--quiet`` turn on.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NOISY_MODULES", "library_bars_off", "library_output", "peft_notes_off"]

#: Where the ``warnings`` that ``--quiet`` hides come from (a regex on the warning's module): the model
#: libraries' deprecation and usage notes, which a user of the CLI cannot act on. Our own warnings (a torn
#: last line in a log) still print.
NOISY_MODULES = r"(transformers|peft|accelerate|huggingface_hub|torch)(\.|$)"


@contextmanager
def library_bars_off() -> Iterator[None]:
    """transformers' and huggingface_hub's progress bars off while the block runs, then as they were."""
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # both libraries' bars (transformers turns huggingface_hub's off too)
    try:
        yield
    finally:
        if bars and not hf_logging.is_progress_bar_enabled():
            hf_logging.enable_progress_bar()
        if hub_bars_off and not hub.are_progress_bars_disabled():
            hub.disable_progress_bars()


@contextmanager
def peft_notes_off() -> Iterator[None]:
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a model (peft 0.21,
    ``PeftModel.__init__``), which warns once per wrap; the call is inside peft, so it cannot be fixed here:
    that one warning is ignored while peft wraps, no other."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


@contextmanager
def library_output(progress: bool = True, quiet: bool = False) -> Iterator[None]:
    """While a command runs: the libraries' progress bars off unless ``progress``; under ``quiet`` also their
    warnings (the ``warnings`` of `NOISY_MODULES`) and every log record below ERROR. Everything is put
    back afterwards (the CLI also runs in-process, in tests)."""
    from transformers.utils import logging as hf_logging

    verbosity, disabled = hf_logging.get_verbosity(), logging.root.manager.disable
    with warnings.catch_warnings():
        if quiet:
            hf_logging.set_verbosity_error()
            logging.disable(logging.WARNING)  # errors still print
            warnings.filterwarnings("ignore", module=NOISY_MODULES)
        try:
            if progress:
                yield
            else:
                with library_bars_off():
                    yield
        finally:
            if quiet:
                hf_logging.set_verbosity(verbosity)
                logging.disable(disabled)

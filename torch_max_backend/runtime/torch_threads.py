"""PyTorch's OpenMP threads sleep between parallel regions instead of spinning
on the cores MAX's kernels need.

After each parallel region, GNU OpenMP (libgomp, which PyTorch's CPU wheels
load) keeps its worker threads spinning for about 300,000 iterations,
milliseconds, before they sleep. A process that runs MAX graphs between
small PyTorch ops (transformers' generate(): the argmax, the logits' copy,
the stopping checks) loses that much of a core at every step: a decode
loop's samples were 11 % libgomp spinning beside 18 % MAX's own idle workers
(docs/benchmarks.md). ``OMP_WAIT_POLICY=PASSIVE`` fixes it but must be set
before PyTorch is imported, which a backend cannot do.

What a backend can do: libgomp spins only 100 iterations (then sleeps) in a
process with more OpenMP threads than usable CPUs (its documented
``GOMP_SPINCOUNT`` rule). One daemon thread of ours starts a team of that
many threads once (each runs ``free(NULL)``, nothing), then waits forever,
so its team stays parked, asleep, and the count stays over. PyTorch's
parallel regions are unchanged; only their threads' wait after each region
is. Nothing is done where the user chose a wait policy or spin count, or
where PyTorch's OpenMP runtime is not libgomp.

The price is a wake-up per parallel region of PyTorch's own: about 50-60 us
on a 2-core Intel Xeon, where a decode step gains 1.5-2 ms (docs/benchmarks.md).
Doing it only around MAX's executes did not pay: a worker already spinning
keeps the spin count it started with, lowering its priority for each
execute gained nothing measurable (kept low, it starves PyTorch's own
parallel ops), and a region that restarts its wait cost milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import threading

from .. import logs

_ENV_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_log = logs.get_logger("runtime")
_lock = threading.Lock()
_done = False


def _libgomp() -> ctypes.CDLL | None:
    """The libgomp already loaded in this process (PyTorch's), else None."""
    try:
        return ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def quiet() -> bool:
    """Make PyTorch's OpenMP threads sleep soon after each parallel region,
    once per process; whether that is now so."""
    global _done
    with _lock:
        if _done:
            return True
        chosen = [name for name in _ENV_CHOICES if name in os.environ]
        if chosen:
            _log.info("torch-max-backend: OpenMP waits as %s says", chosen[0])
            return False
        gomp = _libgomp()
        if gomp is None:
            return False
        team = _usable_cpus() + 1
        ready = threading.Event()

        def park() -> None:
            # free(NULL) on every thread of the team: a no-op with the right
            # signature, no Python and no GIL on the team's threads.
            nothing = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p)
            gomp.GOMP_parallel(nothing, None, ctypes.c_uint(team), ctypes.c_uint(0))
            ready.set()
            threading.Event().wait()  # the team stays parked while this lives

        threading.Thread(
            target=park, name="torch-max-backend-omp-park", daemon=True
        ).start()
        ready.wait()
        _done = True
        _log.info(
            "torch-max-backend: %d OpenMP threads parked; PyTorch's now sleep "
            "after a parallel region instead of spinning",
            team,
        )
        return True

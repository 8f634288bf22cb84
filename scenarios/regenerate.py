"""Redraw every committed file of plots/ with one command.

Each figure in plots/ has one producer: a scenario script of this folder (its
``main()``, run as ``python scenarios/NAME.py``) or, for the capacity plan, the
README's ``llmqueue plan`` command.  :data:`PRODUCERS` says which files each
one writes and how long it takes on one core of the reference machine (2
cores), so ``--quick`` can leave out the long ones.  Every producer runs in a
subprocess of its own from the repository root (this checkout's ``llmqueue``
first on the path), ``--jobs N`` of them at once, longest first; each one's
wall time is printed as it finishes.  A producer whose input is not here (the
Azure trace, which is not shipped) is reported as skipped, with where to get
that input, and does not run.  At the end the files of plots/ are reported as new,
changed or unchanged (``git status`` when in a git checkout), and a file of
plots/ no producer writes, or a declared file a producer did not write, is
flagged (exit 1).  ``save`` writes no version or date into a file, so a second
run leaves git clean.

Run:  python scenarios/regenerate.py [--jobs N] [--quick] [--only NAME ...] [--list]
      (everything: about 80 min of CPU, an hour of it coprime; --quick: about 8 min)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from llmqueue.cli.script import Parser

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PLOTS = os.path.join(ROOT, "plots")
#: A producer that takes longer than this (seconds) is left out by ``--quick``.
QUICK = 120.0


@dataclass(frozen=True)
class Producer:
    """What redraws some files of plots/: a scenario script (``argv`` empty:
    ``python scenarios/NAME.py``) or a command (``argv`` after ``python``),
    the files it writes (names in plots/), its wall time in seconds on the
    reference machine, and ``skip``: why it cannot run here (``None``: it can)."""

    name: str
    outputs: Tuple[str, ...]
    seconds: float
    argv: Tuple[str, ...] = ()
    skip: Optional[Callable[[], Optional[str]]] = None

    def command(self) -> List[str]:
        """The command line that runs it."""
        if self.argv:
            return [sys.executable, *self.argv]
        return [sys.executable, os.path.join(HERE, f"{self.name}.py")]


def azure_absent() -> Optional[str]:
    """Why the azure producer cannot run here: the Azure trace, not shipped,
    is absent (where to get it and where to put it); ``None`` when it is there."""
    from llmqueue.experiments import azure  # loaded only when azure is to run
    return azure.absent_note()


#: The README's capacity-plan command (section "Capacity planning").
PLAN = ("-m", "llmqueue", "plan", "--set", "scheduler=sarathi", "--set", "bmax=512",
        "--set", "kmax=none", "--set", "vp=geometric:129", "--set", "vd=geometric:112",
        "--ttft", "1", "--tpot", "0.15", "--requests", "1000", "--reps", "3",
        "--price", "2.21", "--engines-for", "39", "--router", "jsq-tokens",
        "--plot", "plots/capacity_plan.png")

#: The published-measurement figures (docs/validation.md, docs/mlperf.md).
VALIDATE = ("-m", "llmqueue", "validate", "--plot", "plots/validation.png")
CALIBRATE = ("-m", "llmqueue", "calibrate", "--plot", "plots/calibration.png")
MLPERF = ("-m", "llmqueue", "mlperf", "--measurements", "shipped", "--plot",
          "plots/mlperf_v41.png")

#: Every producer of plots/, quickest first, with its wall time measured on the
#: reference machine (2 cores, one producer at a time).
PRODUCERS: Tuple[Producer, ...] = (
    Producer("point_c", ("point_c_pending.png",), 2),
    Producer("sarathi_demo", ("sarathi_chunk_sweep.png",), 3),
    Producer("agents", ("agents.png",), 3),
    Producer("capacity_plan", ("capacity_plan.png",), 5, PLAN),
    Producer("vertex_c", ("vertex_c_pending.png",), 5),
    Producer("engines", ("engines.png",), 8),
    Producer("parallel", ("parallel_routers.png",), 8),
    Producer("prefix_capacity", ("prefix_capacity.png",), 8),
    Producer("prefix_mooncake", ("prefix_mooncake.png",), 9),
    Producer("theorem2", ("theorem2.png",), 13),
    Producer("blowup", ("blowup.png", "blowup.gif"), 15),
    Producer("azure", ("azure_pending.png", "azure_latency_cdf.png"), 17, skip=azure_absent),
    Producer("memory_waste", ("memory_waste.png",), 23),
    Producer("capacity_sweep", ("capacity_sweep.csv", "capacity_sweep.png"), 23),
    Producer("disaggregated", ("disaggregated.png",), 33),
    Producer("prefix_collapse", ("prefix_collapse.png",), 17),
    Producer("validation", ("validation.png",), 15, VALIDATE),
    Producer("calibration", ("calibration.png",), 35, CALIBRATE),
    Producer("mlperf", ("mlperf_v41.png",), 95, MLPERF),
    Producer("prefix_sessions", ("prefix_sessions.png",), 26),
    Producer("prefix_che", ("prefix_che.png",), 35),
    Producer("nie_table1", ("nie_table1.png",), 34),
    Producer("goodput", ("goodput.png",), 43),
    Producer("theorem2_roofline", ("theorem2_roofline.png",), 20),
    Producer("limit_cycle", ("limit_cycle.png",), 60),
    Producer("rybko_stolyar", ("rybko_stolyar.png",), 100),
    Producer("prefix_routing", ("prefix_routing.png",), 75),
    Producer("kmax_region", ("kmax_region.png",), 52),
    Producer("storms", ("storms.png", "storms.gif"), 180),
    Producer("memory_boundary", ("memory_boundary.png",), 440),
    Producer("coprime", ("coprime.png",), 3600),
)


def committed() -> List[str]:
    """The files of plots/ (names): those git tracks when in a git checkout,
    else those on disk."""
    tracked = _git("ls-files", "plots")
    if tracked is not None:
        return sorted(os.path.basename(line) for line in tracked.splitlines() if line)
    return sorted(os.listdir(PLOTS)) if os.path.isdir(PLOTS) else []


def producer_of() -> Dict[str, str]:
    """Each file a producer writes, mapped to the producer's name."""
    return {out: p.name for p in PRODUCERS for out in p.outputs}


def orphans() -> List[str]:
    """The files of plots/ no producer writes."""
    owners = producer_of()
    return [name for name in committed() if name not in owners]


def select(only: Sequence[str], quick: bool) -> List[Producer]:
    """The producers to run: those named in ``only`` (all when empty), without
    the long ones when ``quick``."""
    names = {p.name for p in PRODUCERS}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"--only: no producer named {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(names))}")
    return [p for p in PRODUCERS
            if (not only or p.name in only) and not (quick and p.seconds > QUICK)]


def run(producer: Producer) -> Tuple[Producer, int, float, str]:
    """Run one producer from the repository root; its exit code, wall time (s)
    and output (stdout and stderr)."""
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    start = time.perf_counter()
    proc = subprocess.run(producer.command(), cwd=ROOT, env=env, capture_output=True, text=True)
    return producer, proc.returncode, time.perf_counter() - start, proc.stdout + proc.stderr


def _git(*args: str) -> Optional[str]:
    """The output of ``git args`` in the repository, or None outside git."""
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def listing() -> int:
    """Print each producer, its time and its files, and the orphans; 1 if any."""
    for p in PRODUCERS:
        print(f"{p.name:<18} {p.seconds:>6.0f} s  {' '.join(p.outputs)}")
    lost = orphans()
    for name in lost:
        print(f"no producer: plots/{name}")
    return 1 if lost else 0


def report(ran: Sequence[Producer], started: float) -> int:
    """Print what the run changed in plots/; 1 if a file has no producer or a
    producer did not write a file it declares."""
    written = {out for p in ran for out in p.outputs}
    problems = [f"no producer: plots/{name}" for name in orphans()]
    for name in sorted(written):
        path = os.path.join(PLOTS, name)
        if not os.path.exists(path) or os.path.getmtime(path) < started:
            problems.append(f"not written: plots/{name}")
    owners = producer_of()
    for name in sorted(os.listdir(PLOTS)) if os.path.isdir(PLOTS) else []:
        if name not in owners and os.path.getmtime(os.path.join(PLOTS, name)) >= started:
            problems.append(f"written but declared by no producer: plots/{name}")
    status = _git("status", "--porcelain", "--", "plots")
    if status is None:
        print("\nwritten: " + ", ".join(f"plots/{n}" for n in sorted(written)))
    else:
        moved = {os.path.basename(line[3:]): line[:2].strip() for line in status.splitlines()}
        kinds = {"??": "new", "A": "new", "M": "changed", "D": "deleted"}
        for name, code in sorted(moved.items()):
            print(f"{kinds.get(code, code):>9}: plots/{name}")
        same = sorted(written - set(moved))
        print(f"unchanged: {len(same)} of {len(written)} files written"
              + (f" ({', '.join(same)})" if same and len(same) < len(written) else ""))
    for line in problems:
        print(line)
    return 1 if problems else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the producers (all, ``--only`` some, ``--quick`` the short ones) or
    ``--list`` them; the exit code is 1 if any failed or a file is unaccounted."""
    parser = Parser(description=__doc__.splitlines()[0])  # errors: one line, exit code 2
    parser.add_argument("--jobs", type=int, default=1, help="producers run at once (default 1)")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help="run only these producers")
    parser.add_argument("--quick", action="store_true",
                        help=f"leave out producers of more than {QUICK:.0f} s")
    parser.add_argument("--list", action="store_true", help="list producers and their files")
    args = parser.parse_args(argv)
    if args.list:
        return listing()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1; got {args.jobs}")
    try:
        chosen = select(args.only, args.quick)
    except ValueError as err:
        parser.error(str(err))
    chosen.sort(key=lambda p: -p.seconds)  # longest first: N at a time end soonest
    skipped: Dict[str, str] = {}
    for p in chosen:
        reason = p.skip() if p.skip is not None else None
        if reason:
            skipped[p.name] = reason
    chosen = [p for p in chosen if p.name not in skipped]
    total = sum(p.seconds for p in chosen)
    spent = f"{total:.0f} s" if total < 120 else f"{total / 60:.0f} min"
    print(f"{len(chosen)} producers, about {spent} of CPU, {args.jobs} at a time"
          + (f" ({len(skipped)} skipped)" if skipped else ""))
    for name, reason in skipped.items():
        print(f"{name:<18} skipped: {reason}", flush=True)
    started = time.time() - 1.0  # file times may be coarser than the clock
    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done in as_completed([pool.submit(run, p) for p in chosen]):
            producer, code, wall, output = done.result()
            print(f"{producer.name:<18} {wall:7.1f} s  "
                  + ("ok" if code == 0 else f"FAILED (exit {code})"), flush=True)
            if code != 0:
                failed += 1
                print(output[-2000:])
    print()
    return 1 if report(chosen, started) or failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Azure Functions 2019 trace reader and the materialised workload the simulator runs.

The dataset (Microsoft Azure Public Dataset, Shahrad et al., "Serverless in the Wild", USENIX
ATC 2020, CC-BY 4.0) comes in two layouts, both read here by column *names*:

* the samples' layout (as redistributed by vHive In-Vitro): ``inv.csv`` with
  ``HashFunction,HashApp,HashOwner,minute_1..minute_N``, ``run.csv`` (execution-time
  percentiles, ms) and ``mem.csv`` (allocated memory per app, MB);
* the original layout: ``invocations_per_function_md.anon.dNN.csv`` with
  ``HashOwner,HashApp,HashFunction,Trigger,1..1440``,
  ``function_durations_percentiles.anon.dNN.csv`` and ``app_memory_percentiles.anon.dNN.csv``.

Counts are per minute; :meth:`AzureTrace.to_workload` spreads each minute's invocations over
the minute (seeded, per function, so a function's arrivals do not depend on which other
functions were loaded) and samples each invocation's execution time from the function's
percentiles.
"""

from __future__ import annotations

import csv
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from controlplane.errors import ConfigError

__all__ = [
    "DURATION_PERCENTILES",
    "AzureFunctionRecord",
    "AzureTrace",
    "FunctionWorkload",
    "TraceFormatError",
    "Workload",
    "load_azure_trace",
]

FloatArray = npt.NDArray[np.float64]

#: The percentiles (0-100) of per-invocation execution time the dataset gives.
DURATION_PERCENTILES: tuple[int, ...] = (0, 1, 25, 50, 75, 99, 100)
_DURATION_COLUMNS = tuple(f"percentile_Average_{p}" for p in DURATION_PERCENTILES)
_KEY_COLUMNS = ("HashOwner", "HashApp", "HashFunction")
_SAMPLE_MINUTE = re.compile(r"^minute_(\d+)$")
_ORIGINAL_MINUTE = re.compile(r"^(\d+)$")

Layout = Literal["samples", "original"]
Spread = Literal["uniform", "equidistant"]


class TraceFormatError(ConfigError):
    """A trace file is missing or malformed; names the file, the column and the reason."""

    code = "trace_format"

    def __init__(self, path: str | Path, column: str, reason: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(where, column, reason)
        self.file = str(path)
        self.column = column
        self.line = line


# --------------------------------------------------------------------------------------------
# The simulator's input


@dataclass(slots=True)
class FunctionWorkload:
    """One function's invocations: sorted arrival times and execution times, in seconds."""

    function_id: str
    memory_mb: float
    arrivals_s: FloatArray
    durations_s: FloatArray

    def __post_init__(self) -> None:
        if self.arrivals_s.shape != self.durations_s.shape:
            raise ValueError(f"{self.function_id}: arrivals and durations differ in length")


@dataclass(slots=True)
class Workload:
    """A set of functions over ``[0, horizon_s)``."""

    name: str
    horizon_s: float
    functions: list[FunctionWorkload]

    @property
    def invocations(self) -> int:
        return int(sum(len(f.arrivals_s) for f in self.functions))


# --------------------------------------------------------------------------------------------
# The dataset


@dataclass(slots=True)
class AzureFunctionRecord:
    """One function's row: per-minute counts, execution-time percentiles (ms) and memory (MB).

    ``duration_ms``/``memory_mb`` are ``None`` where the dataset has no row for the function;
    :meth:`AzureTrace.to_workload` then uses the trace-wide median.
    """

    function_id: str
    app_id: str
    owner_id: str
    trigger: str | None
    per_minute: npt.NDArray[np.int64]
    duration_ms: tuple[float, ...] | None
    memory_mb: float | None

    @property
    def invocations(self) -> int:
        return int(self.per_minute.sum())


@dataclass(slots=True)
class AzureTrace:
    """The parsed dataset (one day or a sample of it)."""

    directory: Path
    layout: Layout
    minutes: int
    functions: list[AzureFunctionRecord]

    @property
    def invocations(self) -> int:
        return int(sum(f.invocations for f in self.functions))

    @property
    def missing_durations(self) -> int:
        return sum(1 for f in self.functions if f.duration_ms is None)

    @property
    def missing_memory(self) -> int:
        return sum(1 for f in self.functions if f.memory_mb is None)

    def to_workload(self, *, seed: int = 0, spread: Spread = "uniform") -> Workload:
        """Materialise arrivals and execution times.

        ``uniform``: each invocation at a uniformly random second of its minute.
        ``equidistant``: a minute's k invocations at (i + 1/2)/k of the minute.
        An app's memory is shared equally by the app's functions in the trace (Azure reports
        memory per app, and an app's functions share its instance).
        """
        known_d = [f.duration_ms for f in self.functions if f.duration_ms is not None]
        default_d = (
            tuple(float(x) for x in np.median(np.array(known_d), axis=0))
            if known_d
            else (100.0, 100.0, 300.0, 1000.0, 3000.0, 30000.0, 60000.0)
        )
        known_m = [f.memory_mb for f in self.functions if f.memory_mb is not None]
        default_m = float(np.median(known_m)) if known_m else 170.0
        per_app: dict[tuple[str, str], int] = {}
        for f in self.functions:
            per_app[(f.owner_id, f.app_id)] = per_app.get((f.owner_id, f.app_id), 0) + 1
        out = []
        for f in self.functions:
            n = f.invocations
            if n == 0:
                continue
            rng = np.random.default_rng([seed, zlib.crc32(f.function_id.encode())])
            arrivals = _spread(f.per_minute, rng, spread)
            durations = _sample_durations(f.duration_ms or default_d, n, rng)
            mem = (f.memory_mb if f.memory_mb is not None else default_m) / per_app[(f.owner_id, f.app_id)]
            out.append(FunctionWorkload(f.function_id, mem, arrivals, durations))
        return Workload(f"azure:{self.directory.name}", self.minutes * 60.0, out)


def _spread(per_minute: npt.NDArray[np.int64], rng: np.random.Generator, how: Spread) -> FloatArray:
    minutes = np.repeat(np.arange(len(per_minute), dtype=np.float64), per_minute)
    if how == "uniform":
        offsets = rng.random(len(minutes))
        return np.sort((minutes + offsets) * 60.0)
    if how == "equidistant":
        counts = per_minute[per_minute > 0]
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        rank = np.arange(len(minutes)) - starts
        return (minutes + (rank + 0.5) / np.repeat(counts, counts)) * 60.0
    raise ValueError(f"unknown spread {how!r}")


def _sample_durations(pct_ms: Sequence[float], n: int, rng: np.random.Generator) -> FloatArray:
    # Inverse CDF, piecewise linear through the given percentiles.
    q = np.array(DURATION_PERCENTILES, dtype=np.float64) / 100.0
    v = np.maximum.accumulate(np.maximum(np.asarray(pct_ms, dtype=np.float64), 0.0))
    return np.interp(rng.random(n), q, v) / 1000.0


# --------------------------------------------------------------------------------------------
# Reading


def load_azure_trace(
    directory: str | Path,
    *,
    day: int = 1,
    functions: int | None = None,
    hours: float | None = None,
) -> AzureTrace:
    """Read a trace directory in either layout (see the module docstring).

    ``day`` picks the original layout's ``dNN`` files; ``functions`` keeps the first N rows of
    the invocation file; ``hours`` keeps the first H hours. Raises :class:`TraceFormatError`.
    """
    d = Path(directory)
    if not d.is_dir():
        raise TraceFormatError(d, "-", "trace directory does not exist")
    layout, inv_path, run_path, mem_path = _locate(d, day)
    max_minutes = None if hours is None else max(1, round(hours * 60))
    records, minutes = _read_invocations(inv_path, functions, max_minutes)
    durations = _read_durations(run_path) if run_path is not None else {}
    memory = _read_memory(mem_path) if mem_path is not None else {}
    for r in records:
        r.duration_ms = durations.get((r.owner_id, r.app_id, r.function_id))
        r.memory_mb = memory.get((r.owner_id, r.app_id))
    return AzureTrace(d, layout, minutes, records)


def _locate(d: Path, day: int) -> tuple[Layout, Path, Path | None, Path | None]:
    if (d / "inv.csv").is_file():
        run, mem = d / "run.csv", d / "mem.csv"
        return "samples", d / "inv.csv", run if run.is_file() else None, mem if mem.is_file() else None
    suffix = f"anon.d{day:02d}.csv"
    inv = d / f"invocations_per_function_md.{suffix}"
    if not inv.is_file():
        raise TraceFormatError(
            d, "-", f"no inv.csv (samples layout) nor invocations_per_function_md.{suffix} (original layout)"
        )
    run = d / f"function_durations_percentiles.{suffix}"
    mem = d / f"app_memory_percentiles.{suffix}"
    return "original", inv, run if run.is_file() else None, mem if mem.is_file() else None


def _rows(path: Path) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    """Yield (line number, row, column index) for each data row; checks the row width."""
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceFormatError(path, "-", f"cannot open: {exc.strerror}") from exc
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceFormatError(path, "-", "empty file (no header)") from None
        except csv.Error as exc:
            raise TraceFormatError(path, "-", f"not CSV: {exc}", line=1) from exc
        header = [h.strip().lstrip("\ufeff") for h in header]
        index = {h: i for i, h in enumerate(header)}
        try:
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise TraceFormatError(
                        path, "-", f"row has {len(row)} fields, header has {len(header)}", line=line
                    )
                yield line, row, index
        except csv.Error as exc:
            raise TraceFormatError(path, "-", f"not CSV: {exc}", line=reader.line_num) from exc


def _header(path: Path) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
    except OSError as exc:
        raise TraceFormatError(path, "-", f"cannot open: {exc.strerror}") from exc
    if not header:
        raise TraceFormatError(path, "-", "empty file (no header)")
    return [h.strip().lstrip("\ufeff") for h in header]


def _require(path: Path, header: Sequence[str], columns: Sequence[str]) -> None:
    for c in columns:
        if c not in header:
            raise TraceFormatError(path, c, "required column is missing")


def _read_invocations(
    path: Path, keep_functions: int | None, max_minutes: int | None
) -> tuple[list[AzureFunctionRecord], int]:
    header = _header(path)
    _require(path, header, _KEY_COLUMNS)
    minute_cols: list[tuple[int, int]] = []  # (minute number, column index)
    for i, h in enumerate(header):
        m = _SAMPLE_MINUTE.match(h) or _ORIGINAL_MINUTE.match(h)
        if m:
            minute_cols.append((int(m.group(1)), i))
    if not minute_cols:
        raise TraceFormatError(path, "minute_1", "no per-minute columns (minute_N or N)")
    minute_cols.sort()
    numbers = [n for n, _ in minute_cols]
    if numbers != list(range(1, len(numbers) + 1)):
        missing = next(n for n in range(1, len(numbers) + 2) if n not in set(numbers))
        raise TraceFormatError(path, f"minute {missing}", "per-minute columns are not 1..N without gaps")
    if max_minutes is not None:
        minute_cols = minute_cols[:max_minutes]
    cols = [i for _, i in minute_cols]
    records: list[AzureFunctionRecord] = []
    seen: set[tuple[str, str, str]] = set()
    for line, row, index in _rows(path):
        if keep_functions is not None and len(records) >= keep_functions:
            break
        owner, app, fn = (row[index[c]].strip() for c in _KEY_COLUMNS)
        if not fn:
            raise TraceFormatError(path, "HashFunction", "empty function hash", line=line)
        if (owner, app, fn) in seen:
            raise TraceFormatError(path, "HashFunction", f"duplicate function {fn[:12]}...", line=line)
        seen.add((owner, app, fn))
        counts = _ints(path, line, header, row, cols)
        trigger = row[index["Trigger"]].strip() if "Trigger" in index else None
        records.append(AzureFunctionRecord(fn, app, owner, trigger, counts, None, None))
    return records, len(cols)


def _ints(
    path: Path, line: int, header: Sequence[str], row: Sequence[str], cols: Sequence[int]
) -> npt.NDArray[np.int64]:
    try:
        values = np.array([int(row[i]) if row[i] else 0 for i in cols], dtype=np.int64)
    except ValueError:
        bad = next(i for i in cols if row[i] and not row[i].strip().lstrip("-").isdigit())
        raise TraceFormatError(path, header[bad], f"not an integer count: {row[bad]!r}", line=line) from None
    if values.size and values.min() < 0:
        bad = cols[int(np.argmin(values))]
        raise TraceFormatError(path, header[bad], f"negative count: {row[bad]!r}", line=line)
    return values


def _float(path: Path, line: int, column: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise TraceFormatError(path, column, f"not a number: {text!r}", line=line) from None
    if not np.isfinite(v) or v < 0:
        raise TraceFormatError(path, column, f"not a finite non-negative number: {text!r}", line=line)
    return v


def _read_durations(path: Path) -> dict[tuple[str, str, str], tuple[float, ...]]:
    header = _header(path)
    _require(path, header, (*_KEY_COLUMNS, *_DURATION_COLUMNS))
    out: dict[tuple[str, str, str], tuple[float, ...]] = {}
    for line, row, index in _rows(path):
        key = (
            row[index["HashOwner"]].strip(),
            row[index["HashApp"]].strip(),
            row[index["HashFunction"]].strip(),
        )
        if key in out:  # the original files repeat a few functions; the first row wins
            continue
        out[key] = tuple(_float(path, line, c, row[index[c]]) for c in _DURATION_COLUMNS)
    return out


def _read_memory(path: Path) -> dict[tuple[str, str], float]:
    header = _header(path)
    _require(path, header, ("HashOwner", "HashApp", "AverageAllocatedMb"))
    out: dict[tuple[str, str], float] = {}
    for line, row, index in _rows(path):
        key = (row[index["HashOwner"]].strip(), row[index["HashApp"]].strip())
        if key not in out:
            out[key] = _float(path, line, "AverageAllocatedMb", row[index["AverageAllocatedMb"]])
    return out

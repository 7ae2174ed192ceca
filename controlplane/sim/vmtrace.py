"""Azure VM trace 2017 reader (Resource Central; the binned layout of ``trace_generation_rnn``).

The dataset (Microsoft Azure Public Dataset V1, ``vmtable.csv.gz``; Cortez et al., "Resource
Central", SOSP 2017, CC-BY 4.0), as binned by huaweicloud/trace_generation_rnn, is a folder of:

* ``v1.<split>.txt``: one line per 5-minute bin, ``<t> <flavors>``: the VMs that arrived in
  ``(t - 300, t]``, comma-separated flavor letters, ``|`` closing each tenant batch;
* ``v1.<split>.c<T>.txt``: the same requests token for token, ``U<bin>`` (finished before ``T``)
  or ``C<bin>`` (still running at ``T``: right-censored, the bin is the time run so far);
* ``flav_map.txt``: ``<vcpus>,<memory_gb> <letter>``;
* ``v1.interval_map.txt``: ``<seconds> <bin>``: which duration bin a lifetime of that many
  seconds (the trace's 300-second resolution) falls in.

:func:`load_vm_trace` pairs the two split files and reads every line it keeps in full, so a
malformed token fails with :class:`~controlplane.serverless.traces.TraceFormatError` naming the
file and line. Turning arrivals into simulator tasks is :mod:`.vmreplay`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from controlplane.serverless.traces import TraceFormatError

__all__ = ["BIN_S", "TraceFormatError", "VmArrival", "VmFlavor", "VmTrace", "load_vm_trace"]

#: The trace's resolution: arrivals come in 5-minute bins, lifetimes in multiples of 300 s.
BIN_S = 300.0

_SPLIT = re.compile(r"^[A-Za-z0-9_-]+$")
_DURATION = re.compile(r"^([UC])(\d+)$")


@dataclass(frozen=True, slots=True)
class VmFlavor:
    """One VM size: its letter in the trace and what it requests."""

    letter: str
    vcpus: float
    memory_gb: float


@dataclass(frozen=True, slots=True)
class VmArrival:
    """One VM request. ``bin`` counts 5-minute bins from the replay's start (it arrived in
    ``[bin * 300, (bin + 1) * 300)`` s); ``batch`` numbers the tenant batches of the replay."""

    bin: int
    batch: int
    flavor: VmFlavor
    duration_bin: int
    censored: bool


@dataclass(slots=True)
class VmTrace:
    """A split of the trace, from its first line up to the ``hours`` asked for."""

    directory: Path
    split: str
    first_t: float  # the first line's timestamp in the trace's clock (the end of bin 0)
    censor_t: float  # T: censored VMs were still running then
    bins: int  # bins kept (lines, counting gaps between timestamps)
    flavors: dict[str, VmFlavor]
    intervals: dict[int, tuple[float, float]]  # duration bin -> (fewest, most) seconds in it
    vms: list[VmArrival]
    batches: int

    @property
    def hours(self) -> float:
        return self.bins * BIN_S / 3600.0

    @property
    def censored(self) -> int:
        return sum(1 for vm in self.vms if vm.censored)

    def lifetime_range(self, vm: VmArrival) -> tuple[float, float]:
        """Seconds the VM may have lived: ``[low, high)``.

        Uncensored: its bin's span; the trace rounds lifetimes to 300 s, so up to 300 s more
        than the bin's largest value. Censored: it was alive at ``T``, so at least from its
        arrival bin's end to ``T``; nothing bounds it above (``high`` is infinite).
        """
        if vm.censored:
            return self.censor_t - (self.first_t + vm.bin * BIN_S), float("inf")
        low, high = self.intervals[vm.duration_bin]
        return low, high + BIN_S


def load_vm_trace(directory: str | Path, *, split: str = "dev", hours: float | None = None) -> VmTrace:
    """Read split ``split`` of a trace folder, its first ``hours`` only if given.

    Raises :class:`TraceFormatError` (one line: file, line, what is wrong) on a missing or
    malformed file.
    """
    d = Path(directory)
    if not d.is_dir():
        raise TraceFormatError(d, "-", "trace directory does not exist")
    if not _SPLIT.match(split):
        raise TraceFormatError(d, "split", f"not a split name: {split!r}")
    flavors = _read_flavors(d / "flav_map.txt")
    intervals = _read_intervals(d / "v1.interval_map.txt")
    arrivals_path = d / f"v1.{split}.txt"
    durations_path, censor_t = _censor_file(d, split)
    max_bins = None if hours is None else max(1, round(hours * 3600.0 / BIN_S))
    vms: list[VmArrival] = []
    batch = 0
    first_t: float | None = None
    last_t = -1.0
    bins = 0
    pairs = zip(_lines(arrivals_path), _lines(durations_path), strict=False)
    for (line, a_text), (_, d_text) in pairs:
        t, flav_tokens = _split_line(arrivals_path, line, a_text)
        t_d, dur_tokens = _split_line(durations_path, line, d_text)
        if t_d != t:
            raise TraceFormatError(
                durations_path, "time", f"{t_d:.10g} where {arrivals_path.name} has {t:.10g}", line=line
            )
        if first_t is None:
            first_t = t
        elif t <= last_t:
            raise TraceFormatError(
                arrivals_path, "time", f"{t:.10g} does not follow {last_t:.10g}", line=line
            )
        elif (t - first_t) % BIN_S:
            raise TraceFormatError(arrivals_path, "time", f"{t:.10g} is not on the 300 s grid", line=line)
        last_t = t
        index = round((t - first_t) / BIN_S)
        if max_bins is not None and index >= max_bins:
            break
        bins = index + 1
        if len(dur_tokens) != len(flav_tokens):
            raise TraceFormatError(
                durations_path,
                "tokens",
                f"{len(dur_tokens)} tokens where {arrivals_path.name} has {len(flav_tokens)}",
                line=line,
            )
        open_batch = False
        for k, (f, u) in enumerate(zip(flav_tokens, dur_tokens, strict=True), start=1):
            if f == "|" or u == "|":
                if f != u:
                    raise TraceFormatError(
                        durations_path, f"token {k}", f"{u!r} where the flavors have {f!r}", line=line
                    )
                if open_batch:
                    batch += 1
                open_batch = False
                continue
            flavor = flavors.get(f)
            if flavor is None:
                raise TraceFormatError(
                    arrivals_path, f"token {k}", f"unknown flavor {f!r} (not in flav_map.txt)", line=line
                )
            m = _DURATION.match(u)
            if m is None:
                raise TraceFormatError(
                    durations_path, f"token {k}", f"not U<bin> or C<bin>: {u!r}", line=line
                )
            dbin = int(m.group(2))
            if dbin not in intervals:
                raise TraceFormatError(
                    durations_path,
                    f"token {k}",
                    f"duration bin {dbin} is not in v1.interval_map.txt",
                    line=line,
                )
            vms.append(VmArrival(index, batch, flavor, dbin, m.group(1) == "C"))
            open_batch = True
        if open_batch:  # a line's last batch may end without its "|"
            batch += 1
    else:
        _check_same_length(arrivals_path, durations_path)
    if first_t is None:
        raise TraceFormatError(arrivals_path, "-", "no lines")
    if last_t >= censor_t:
        raise TraceFormatError(
            durations_path, "T", f"censoring time {censor_t:.10g} is not after the last bin {last_t:.10g}"
        )
    return VmTrace(d, split, first_t, censor_t, bins, flavors, intervals, vms, batch)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line."""
    try:
        f = path.open(encoding="utf-8")
    except OSError as exc:
        raise TraceFormatError(path, "-", f"cannot open: {exc.strerror}") from exc
    with f:
        try:
            for number, text in enumerate(f, start=1):
                if text.strip():
                    yield number, text.strip()
        except UnicodeDecodeError:
            raise TraceFormatError(path, "-", "not UTF-8 text") from None


def _check_same_length(a: Path, b: Path) -> None:
    na = sum(1 for _ in _lines(a))
    nb = sum(1 for _ in _lines(b))
    if na != nb:
        raise TraceFormatError(b, "-", f"{nb} lines where {a.name} has {na}")


def _split_line(path: Path, line: int, text: str) -> tuple[float, list[str]]:
    head, _, rest = text.partition(" ")
    t = _number(path, line, "time", head)
    tokens = [tok.strip() for tok in rest.strip().split(",")] if rest.strip() else []
    if tokens and tokens[-1] == "":
        tokens.pop()  # the lines end with "|," in the published files
    if "" in tokens:
        raise TraceFormatError(path, f"token {tokens.index('') + 1}", "empty token", line=line)
    return t, tokens


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(path, column, f"not a number: {text!r}", line=line) from None
    if not value >= 0 or value == float("inf"):
        raise TraceFormatError(path, column, f"not a finite non-negative number: {text!r}", line=line)
    return value


def _fields(path: Path, line: int, text: str) -> list[str]:
    parts = text.split()
    if len(parts) != 2:
        raise TraceFormatError(path, "-", f"expected 2 fields, got {len(parts)}: {text!r}", line=line)
    return parts


def _read_flavors(path: Path) -> dict[str, VmFlavor]:
    out: dict[str, VmFlavor] = {}
    for line, text in _lines(path):
        size, letter = _fields(path, line, text)
        cpu_text, sep, mem_text = size.partition(",")
        if not sep:
            raise TraceFormatError(path, "size", f"not <vcpus>,<memory_gb>: {size!r}", line=line)
        cpu = _number(path, line, "vcpus", cpu_text)
        mem = _number(path, line, "memory_gb", mem_text)
        if cpu <= 0 or mem <= 0:
            raise TraceFormatError(
                path, "size", f"a flavor needs vcpus and memory above 0: {size!r}", line=line
            )
        if letter in out or letter == "|":
            raise TraceFormatError(
                path, "letter", f"flavor letter {letter!r} defined twice or reserved", line=line
            )
        out[letter] = VmFlavor(letter, cpu, mem)
    if not out:
        raise TraceFormatError(path, "-", "no flavors")
    return out


def _read_intervals(path: Path) -> dict[int, tuple[float, float]]:
    out: dict[int, tuple[float, float]] = {}
    last = (-1.0, -1)
    for line, text in _lines(path):
        s_text, b_text = _fields(path, line, text)
        seconds = _number(path, line, "seconds", s_text)
        if not b_text.isdigit():
            raise TraceFormatError(path, "bin", f"not a bin number: {b_text!r}", line=line)
        b = int(b_text)
        if seconds <= last[0] or b < last[1]:
            raise TraceFormatError(path, "-", "seconds must increase and bins must not decrease", line=line)
        last = (seconds, b)
        low = out.get(b, (seconds, seconds))[0]
        out[b] = (low, seconds)
    if not out:
        raise TraceFormatError(path, "-", "no duration bins")
    return out


def _censor_file(d: Path, split: str) -> tuple[Path, float]:
    pattern = re.compile(rf"^v1\.{re.escape(split)}\.c(\d+)\.txt$")
    found = sorted((p, float(m.group(1))) for p in d.iterdir() if (m := pattern.match(p.name)))
    if not found:
        raise TraceFormatError(d / f"v1.{split}.c<T>.txt", "-", "no censoring file for this split")
    if len(found) > 1:
        names = ", ".join(p.name for p, _ in found)
        raise TraceFormatError(d, "-", f"several censoring files for split {split!r}: {names}")
    return found[0]

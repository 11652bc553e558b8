"""A JVM's memory from outside it: resident memory (``/proc``), the heap as
the JVM counts it (``jcmd GC.heap_info``), and the resident memory split by
mapping: the heap's reserved range, files mapped, and the rest (anonymous:
the JVM's own native memory, native libraries' allocations such as
RocksDB's, the C library's arenas, thread stacks)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def jvm_memory(pid: int) -> dict:
    """kB: ``vmrss_kb``, ``vmhwm_kb`` (peak), ``heap_committed_kb``,
    ``heap_used_kb``, and ``heap_resident_kb``, ``files_resident_kb``,
    ``other_anon_kb``."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key.lower() + "_kb"] = int(value.split()[0])
    if not shutil.which("jcmd"):
        return out
    info = subprocess.run(
        ["jcmd", str(pid), "GC.heap_info"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    found = re.search(r"total (\d+)K, used (\d+)K", info)
    if found:
        out["heap_committed_kb"] = int(found.group(1))
        out["heap_used_kb"] = int(found.group(2))
    heap = re.search(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\)", info)
    if heap:
        out.update(resident_split(pid, *(int(a, 16) for a in heap.groups())))
    return out


def resident_split(pid: int, heap_start: int, heap_end: int) -> dict:
    """Resident kB by mapping: the Java heap's reserved range, files mapped,
    and the rest."""
    split = {"heap_resident_kb": 0, "files_resident_kb": 0, "other_anon_kb": 0}
    kind = "other_anon_kb"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            start = int(fields[0].split("-")[0], 16)
            path = fields[5] if len(fields) > 5 else ""
            if heap_start <= start < heap_end:
                kind = "heap_resident_kb"
            elif path.startswith("/"):
                kind = "files_resident_kb"
            else:
                kind = "other_anon_kb"
        elif fields[0] == "Rss:":
            split[kind] += int(fields[1])
    return split

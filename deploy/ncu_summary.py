#!/usr/bin/env python3
"""Trims `ncu --print-details all` output to its summary sections.

    ncu_summary.py REPORT.txt > SUMMARY.txt

Keeps each profiled kernel's header line and the sections that say where its time went
(speed of light, compute and memory workload, scheduler, warp states, instructions, launch,
occupancy without its graphs, workload distribution); drops the roofline and memory chart
tables, which are most of the text. Lines are cut at 160 characters.
"""
import re
import sys

KEEP = ("GPU Speed Of Light Throughput", "PM Sampling", "Compute Workload Analysis",
        "Memory Workload Analysis", "Scheduler Statistics", "Warp State Statistics",
        "Instruction Statistics", "Launch Statistics", "Occupancy",
        "GPU and Memory Workload Distribution")


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    on = True
    with open(sys.argv[1], encoding="utf-8", errors="replace") as report:
        for line in report:
            section = re.match(r"\s+Section: (.*)", line)
            if section:
                on = section.group(1).strip() in KEEP
            elif re.match(r"  \S", line):
                on = True  # a kernel's header line
            if "Occupancy Graphs" in line:
                on = False
            if on:
                sys.stdout.write(line.rstrip()[:160] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One current section per CPU vendor in docs/benchmarks.md.

MAX's CPU kernels win on an AMD EPYC and lose to oneDNN/MKL on an Intel
Xeon, so the page keeps the latest run of each benchmark on each vendor side
by side: a run replaces its own vendor's section (between its markers) and
leaves the other's alone. History lives in git.
"""

from __future__ import annotations

import sys
from pathlib import Path


def vendor_label(machine: dict[str, object]) -> str:
    """ "AMD" or "Intel" (another vendor by its CPUID name, or "unknown")."""
    return str(machine.get("cpu_vendor") or "unknown")


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command that reruns a benchmark as it ran, for the section's date
    line: its options as given (this process's own when ``argv`` is None),
    but where it wrote its JSON (a path on the machine that ran it) left out."""
    kept: list[str] = []
    skip = False
    for arg in sys.argv[1:] if argv is None else argv:
        if skip:
            skip = False
        elif arg == "--json":
            skip = True
        elif not arg.startswith("--json="):
            kept.append(arg)
    return " ".join(["python -m", module, *kept])


def markers(kind: str, vendor: str, command: str) -> tuple[str, str]:
    """The comment lines that open and close ``kind``'s section for ``vendor``."""
    return (
        f"<!-- {kind} on {vendor}: begin ({command}) -->",
        f"<!-- {kind} on {vendor}: end -->",
    )


def replace_section(page: Path, begin: str, end: str, section: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``)
    where the page has those markers; a first run goes after the last section
    of the same kind, else before the page's first heading after its title."""
    text = page.read_text()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        page.write_text(head + section + rest.split(end, 1)[1])
        return
    kind_end = end.split(" on ", 1)[0]  # "<!-- decode"
    last = text.rfind(kind_end)
    if last >= 0:
        at = text.index("-->", last) + len("-->")
        page.write_text(text[:at] + "\n\n" + section + text[at:])
        return
    heading = text.find("\n## ")
    at = len(text) if heading < 0 else heading + 1
    page.write_text(text[:at] + section + "\n\n" + text[at:])

"""Reading a MAX graph's text: what MAX would evaluate at compile time."""

from __future__ import annotations

import re

# Ops MAX applies to constants without compiling a kernel (read from its
# ConstantFold's kernel listing, max-debug.ir-output-dir): views and splats.
_KEPT_AS_CONSTANTS = frozenset(
    {"rmo.shape_to_tensor", "rmo.reshape", "rmo.broadcast_to", "rmo.concat"}
)


def foldable_ops(text: str) -> list[str]:
    """The ops of a MAX graph's text whose operands are all constants (or
    static sizes, or results of such ops) and that MAX's ConstantFold would
    compile a kernel for."""
    constant: set[str] = set()
    found = []
    for line in text.splitlines():
        m = re.match(r"\s*(%\w+) = ([\w.]+)\(([^)]*)\)", line)
        if m is None:
            m = re.match(r"\s*(%\w+) = (mo\.constant)", line)
            if m is not None:
                constant.add(m.group(1))
            continue
        result, op, operands = m.groups()
        names = re.findall(r"%\w+", operands)
        static_size = op == "rmo.shape_to_tensor" and not names
        if static_size or (names and all(n in constant for n in names)):
            constant.add(result)
            if op not in _KEPT_AS_CONSTANTS:
                found.append(op)
    return found


def unread_inputs(text: str) -> list[str]:
    """The inputs a MAX graph's text declares and no op reads (each one is
    still passed at every call)."""
    header, _, body = text.partition("\n")
    declared = re.findall(r"(%arg\d+): !mo\.", header)
    read = set(re.findall(r"%arg\d+\b", body))
    return [name for name in declared if name not in read]

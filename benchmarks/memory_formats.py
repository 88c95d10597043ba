"""A conv net left contiguous and converted to channels-last, in one process.

    python -m benchmarks.memory_formats [--model resnet18|mobilenetv2|convnext]
                                        [--backends eager,max] [--train]

``model.to(memory_format=torch.channels_last)`` with channels-last images is
a common recipe for CPU inference and training. Each backend compiles both
forms of the model in one process; their calls then alternate in blocks
(the order turning each round), so that the machine's drift slows both
alike. Printed: the median ms a call of each form, and that the outputs
match eager's. ``--train`` times whole training steps instead (AdamW, the
suite's ResNet-18 step at batch 2 and 112x112), each form's first loss
checked against eager's. ``mobilenetv2`` is the ImageNet MobileNetV2
(1x224) for inference and issue 59's small one (depth multiplier 0.35,
2x64) for training; ``convnext`` is ConvNeXt-tiny (1x224, training 2x112).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from benchmarks import cases, zoo

FORMS = ("contiguous", "channels_last")


def _model(name: str, train: bool = False) -> tuple[nn.Module, torch.Tensor]:
    if name == "resnet18":
        model, (x,) = zoo.resnet18(batch=2, size=112) if train else zoo.resnet18()
        return model, x
    if name == "mobilenetv2":  # the ImageNet model; training the small one
        model, (x,) = (
            zoo.mobilenet_v2()
            if train
            else zoo.mobilenet_v2(batch=1, size=224, depth_multiplier=1.0)
        )
        return model, x
    if name == "convnext":  # ConvNeXt-tiny
        model, (x,) = zoo.convnext(batch=2, size=112) if train else zoo.convnext()
        return model, x
    if name == "tiny":  # the tests'
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 4, 1),
        )
        return model, torch.randn(1, 3, 8, 8)
    raise SystemExit(
        f"unknown model {name!r}; choose resnet18, mobilenetv2, convnext or tiny"
    )


def measure(name: str, backend: str, rounds: int, calls: int) -> dict[str, float]:
    """Median ms a call of each form under ``backend``; raises if an output
    differs from eager's."""
    torch.manual_seed(0)
    model, x = _model(name)
    model.eval()
    last = copy.deepcopy(model).to(memory_format=torch.channels_last)
    forms = {
        "contiguous": (model, x),
        "channels_last": (last, x.contiguous(memory_format=torch.channels_last)),
    }
    runs = {}
    with torch.no_grad():
        expected = model(x)
        for form, (module, inp) in forms.items():
            fn = (
                module if backend == "eager" else torch.compile(module, backend=backend)
            )
            torch.testing.assert_close(fn(inp), expected, rtol=1e-4, atol=1e-4)
            runs[form] = (fn, inp)
        if backend == "max":
            from torch_max_backend import wait_compiled

            wait_compiled()
        times: dict[str, list[float]] = {form: [] for form in FORMS}
        for r in range(rounds):
            for form in FORMS if r % 2 == 0 else FORMS[::-1]:
                fn, inp = runs[form]
                fn(inp)
                start = time.perf_counter()
                for _ in range(calls):
                    fn(inp)
                times[form].append((time.perf_counter() - start) / calls * 1e3)
    return {form: statistics.median(t) for form, t in times.items()}


def measure_steps(name: str, backend: str, rounds: int, calls: int) -> dict[str, float]:
    """Median ms an AdamW training step of each form under ``backend``;
    raises if a form's first loss differs from eager's."""
    torch.manual_seed(0)
    model, x = _model(name, train=True)
    model.train()
    # Dropout off (MobileNetV2's classifier): each form's first loss is
    # compared with eager's, which a dropout's draws would not repeat.
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    out = copy.deepcopy(model)(x)
    # Cross-entropy over the output's last dim (cases._stepper).
    y = torch.randint(0, out.shape[-1], out.shape[:-1])
    expected = cases.adamw_stepper(copy.deepcopy(model), x, y)()
    last = copy.deepcopy(model).to(memory_format=torch.channels_last)
    forms = {
        "contiguous": (model, x),
        "channels_last": (last, x.contiguous(memory_format=torch.channels_last)),
    }
    runs = {}
    for form, (module, inp) in forms.items():
        step = cases.adamw_stepper(module, inp, y)
        fn = step if backend == "eager" else torch.compile(step, backend=backend)
        torch.testing.assert_close(fn(), expected, rtol=1e-4, atol=1e-4)
        runs[form] = fn
    if backend == "max":
        from torch_max_backend import wait_compiled

        wait_compiled()
    times: dict[str, list[float]] = {form: [] for form in FORMS}
    for r in range(rounds):
        for form in FORMS if r % 2 == 0 else FORMS[::-1]:
            fn = runs[form]
            fn()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[form].append((time.perf_counter() - start) / calls * 1e3)
    return {form: statistics.median(t) for form, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--backends", default="eager,max")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(
        "--train", action="store_true", help="time AdamW training steps"
    )
    args = parser.parse_args()
    for backend in args.backends.split(","):
        timed = measure_steps if args.train else measure
        ms = timed(args.model, backend, args.rounds, args.calls)
        what = "a step" if args.train else "a call"
        print(
            f"{args.model} {backend}, {what}: contiguous {ms['contiguous']:.2f} ms, "
            f"channels-last {ms['channels_last']:.2f} ms (outputs match eager)"
        )


if __name__ == "__main__":
    main()

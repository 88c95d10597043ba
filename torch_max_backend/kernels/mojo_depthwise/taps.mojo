# What the depthwise kernels share: the float type they sum in, and which
# taps of a window lie inside the image.

comptime ACC = DType.float32


@always_inline
def first_tap(start: Int, step: Int, taps: Int) -> Int:
    """The first tap t < taps whose position start + t * step is >= 0."""
    var t = 0
    while t < taps and start + t * step < 0:
        t += 1
    return t


@always_inline
def end_tap(start: Int, step: Int, taps: Int, size: Int, first: Int) -> Int:
    """One past the last tap whose position start + t * step is < size."""
    var t = taps
    while t > first and start + (t - 1) * step >= size:
        t -= 1
    return t

"""Readable, faithful numbers for rule bounds: where to cut between observed values (:func:`short_cut`) and how to
print a cut (:func:`format_bound`), in the users' units ``raw = x * scale + offset`` of a bound ``x`` stored in the
searched data's units. Both work in exact rational arithmetic (integer ratios), so no finite input overflows.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable
from fractions import Fraction

__all__ = ["admitted_integers", "format_bound", "short_cut"]

_INF_KEY = 0x7FF0000000000000  # the order key of +inf (and minus that of -inf)


def _key(x: float) -> int:
    """Order-preserving integer key of a float64 (-0.0 and 0.0 share the key 0)."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return -(bits & 0x7FFFFFFFFFFFFFFF) if bits < 0 else bits


def _float(key: int) -> float:
    """Inverse of :func:`_key`."""
    bits = key if key >= 0 else (-key) | -0x8000000000000000
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _next(x: float) -> float:
    return math.nextafter(x, math.inf)


def _prev(x: float) -> float:
    return math.nextafter(x, -math.inf)


def _first(pred: Callable[[float], bool], guess: float = math.nan) -> float:
    """The smallest float64 ``p`` with ``pred(p)``, for ``pred`` false then true (``nan`` when ``pred(+inf)`` is
    false): a bracket widened from a finite ``guess`` by doubling steps, then bisection on the floats' order."""
    if pred(-math.inf):
        return -math.inf
    if not pred(math.inf):
        return math.nan
    lo, hi = _bracket(pred, _key(guess)) if math.isfinite(guess) else (-_INF_KEY, _INF_KEY)
    while hi - lo > 1:  # pred(lo) is false, pred(hi) true
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(_float(mid)) else (mid, hi)
    return _float(hi)


def _bracket(pred: Callable[[float], bool], key: int) -> tuple[int, int]:
    """Keys ``(lo, hi)`` around the first true ``pred``, found by doubling steps from ``key`` (pred(-inf) is false,
    pred(+inf) true)."""
    step, outcome = 1, pred(_float(key))
    while True:
        other = max(key - step, -_INF_KEY) if outcome else min(key + step, _INF_KEY)
        if pred(_float(other)) != outcome:
            return (other, key) if outcome else (key, other)
        key, step = other, step * 2


def _to_stored(p: float, scale: float, offset: float) -> float:
    """A printed-units value in stored units, in float64: the map every printed bound is checked against."""
    return (p - offset) / scale


def _floor_log10(num: int, den: int) -> int:
    """``e`` with ``10**e <= num / den < 10**(e + 1)`` for positive integers."""
    e = len(str(num)) - len(str(den))
    while not _at_least_pow10(num, den, e):
        e -= 1
    while _at_least_pow10(num, den, e + 1):
        e += 1
    return e


def _at_least_pow10(num: int, den: int, e: int) -> bool:
    """``num / den >= 10**e`` (exact, positive integers)."""
    return num >= den * 10**e if e >= 0 else num * 10**-e >= den


def _round_half_even(num: int, den: int) -> int:
    """``num / den`` (``den > 0``) rounded to the nearest integer, ties to even (as ``round`` of a Fraction)."""
    q, r = divmod(num, den)
    return q + 1 if 2 * r > den or (2 * r == den and q % 2) else q


def _shortest_in(lo: tuple[int, int], hi: tuple[int, int], min_digits: int = 1) -> tuple[int, int]:
    """``(m, k)``: the decimal ``m * 10**k`` with the fewest significant digits (at least ``min_digits``) strictly
    inside the rationals ``(lo, hi)`` (``(numerator, denominator)`` pairs), the one nearest the middle."""
    (ln, ld), (hn, hd) = lo, hi
    if ln < 0 < hn and min_digits <= 1:
        return 0, 0
    if hn <= 0:
        m, k = _shortest_in((-hn, hd), (-ln, ld), min_digits)
        return -m, k
    e = _floor_log10(hn, hd)
    digits = min_digits
    while True:
        found = _at_step(lo, hi, e - digits + 1, min_digits)
        if found is not None:
            return found
        digits += 1


def _at_step(lo: tuple[int, int], hi: tuple[int, int], k: int, min_digits: int = 1) -> tuple[int, int] | None:
    """``(m, k)``: the multiple ``m * 10**k`` strictly inside the positive rationals ``(lo, hi)`` nearest their middle
    (``None`` when there is none)."""
    (ln, ld), (hn, hd) = lo, hi
    up, down = (10**k, 1) if k >= 0 else (1, 10**-k)  # in integers: lo = ln / ld, hi = hn / hd, step = up / down
    top = -((-hn * down) // (hd * up)) - 1  # the largest multiple of step below hi
    bottom = (ln * down) // (ld * up) + 1  # the smallest one above lo
    if bottom <= top:
        middle = min(max(_round_half_even((ln * hd + hn * ld) * down, 2 * ld * hd * up), bottom), top)
        for m in (middle, middle - 1, middle + 1):
            if bottom <= m <= top and (min_digits <= 1 or m % 10 != 0):
                return m, k
    return None


def _shortest_of(c: float) -> tuple[int, int]:
    """``_shortest_in(*_neighbourhood(c, c))`` as ``(m, k)``, started at the step of ``repr(c)`` (the shortest decimal
    of the closed neighbourhood) when that step holds a decimal strictly inside and the next coarser step none."""
    x = abs(float(c))  # a Python float: numpy's scalars have a repr of their own ('np.float64(0.5)')
    lo, hi = _neighbourhood(x, x)
    if 0.0 < x < sys.float_info.max:  # the largest float's neighbourhood ends past it: the whole search
        mantissa, _, exponent = repr(x).partition("e")
        whole, _, fraction = mantissa.partition(".")
        fraction = fraction.rstrip("0")
        k = (int(exponent) if exponent else 0) - len(fraction)
        m = int(whole + fraction)
        while m % 10 == 0:
            m, k = m // 10, k + 1
        found = _at_step(lo, hi, k) if _at_step(lo, hi, k + 1) is None else None
        if found is not None:
            return (found[0] if c > 0 else -found[0]), k
    m, k = _shortest_in(lo, hi)
    return (m if c >= 0 else -m), k


def _text(m: int, k: int) -> str:
    """``m * 10**k`` as text the way Python prints floats: plain between 1e-4 and 1e16, else ``1.5e+300``."""
    if m == 0:
        return "0"
    sign = "-" if m < 0 else ""
    digits = str(abs(m)).rstrip("0")
    k += len(str(abs(m))) - len(digits)
    lead = k + len(digits) - 1  # the exponent of the leading digit
    if -5 <= lead < 16:
        if k >= 0:
            return sign + digits + "0" * k
        point = len(digits) + k
        return sign + (digits[:point] if point > 0 else "0") + "." + "0" * max(0, -point) + digits[max(point, 0) :]
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'+' if lead >= 0 else '-'}{abs(lead):02d}"


def _n_digits(text: str) -> int:
    """Significant digits of a number written by :func:`_text` (trailing zeros of an integer do not count)."""
    return max(1, len(text.lstrip("-").split("e")[0].replace(".", "").strip("0")))


def _preimage(c: float, scale: float, offset: float) -> tuple[float, float] | None:
    """The float64s ``p`` in printed units with ``_to_stored(p) == c``, as ``(first, last)``; ``None`` when none."""
    sign = 1.0 if scale > 0 else -1.0
    up = lambda p: sign * _to_stored(p, scale, offset)  # noqa: E731 - non-decreasing in p
    guess = c * scale + offset
    first = _first(lambda p: up(p) >= sign * c, guess)
    after = _first(lambda p: up(p) > sign * c, guess)
    if math.isnan(first) or not math.isfinite(first):
        return None
    last = _prev(after) if not math.isnan(after) else math.inf
    if not (first <= last and _to_stored(first, scale, offset) == c and math.isfinite(last)):
        return None
    return first, last


def _half_sum(x: float, y: float) -> tuple[int, int]:
    """``(x + y) / 2`` exactly, as ``(numerator, denominator)``."""
    (a, b), (c, d) = x.as_integer_ratio(), y.as_integer_ratio()
    return a * d + c * b, 2 * b * d


def _neighbourhood(first: float, last: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """The reals that round to a float64 in ``[first, last]`` (open at the midpoints, where rounding ties), as exact
    ``(numerator, denominator)`` pairs ``(lo, hi)``."""
    below, above = _prev(first), _next(last)
    lo = _half_sum(below, first) if math.isfinite(below) else _past(first, _next(first))
    hi = _half_sum(last, above) if math.isfinite(above) else _past(last, _prev(last))
    return (lo, hi) if lo[0] * hi[1] < hi[0] * lo[1] else (hi, lo)


def _past(x: float, inner: float) -> tuple[int, int]:
    """``x + (x - inner) / 2`` exactly: for the largest float64 ``x`` (or the most negative), the midpoint to the next
    value the float64 grid would hold, beyond which reals round to infinity."""
    (a, b), (c, d) = x.as_integer_ratio(), inner.as_integer_ratio()
    return 3 * a * d - c * b, 2 * b * d


def _primary(c: float, scale: float, offset: float) -> str | None:
    """The shortest decimal whose float64 maps back to ``c`` in float64, or ``None`` when no float64 does."""
    if (scale, offset) == (1.0, 0.0):
        return _text(*_shortest_of(c))
    pre = _preimage(c, scale, offset)
    if pre is None:
        return None
    lo, hi = _neighbourhood(*pre)
    digits = 1
    while True:  # the rounding neighbourhood may hold a decimal whose float lies just outside: check, lengthen
        m, k = _shortest_in(lo, hi, digits)
        text = _text(m, k)
        if _to_stored(float(text), scale, offset) == c:
            return text
        digits = max(digits, _n_digits(text)) + 1


def format_bound(c: float, scale: float = 1.0, offset: float = 0.0) -> str:
    """The stored bound ``c`` as text in printed units (``raw = x * scale + offset``): the shortest decimal ``d`` with
    ``(float(d) - offset) / scale == c`` in float64, so two different stored bounds never print alike. When no float64
    maps back to ``c`` (bounds that no search produced, or units that swamp the data's precision), the exact
    ``c * scale + offset`` with as many digits as it takes to tell it from the neighbouring float64s of ``c``.

    Example:
        >>> format_bound(0.5), format_bound(0.1 + 0.2), format_bound(1e300 * 10)
        ('0.5', '0.30000000000000004', '1e+301')
        >>> format_bound((6.7 - 3.5) / 5.5, scale=5.5, offset=3.5)
        '6.7'
    """
    if not math.isfinite(c):
        return "inf" if c > 0 else "-inf" if c < 0 else "nan"
    text = _primary(c, scale, offset)
    if text is not None:
        return text
    # no float64 maps back: the exact value, told apart from the neighbouring bounds' exact values
    exact = lambda v: (Fraction(*v) * Fraction(scale) + Fraction(offset)).as_integer_ratio()  # noqa: E731
    lo, hi = _neighbourhood(c, c)
    lo, hi = sorted((exact(lo), exact(hi)), key=lambda v: Fraction(*v))
    digits = 1
    while True:
        m, k = _shortest_in(lo, hi, digits)
        text = _text(m, k)
        back = _to_stored(float(text), scale, offset)
        if not math.isfinite(back) or _primary(back, scale, offset) != text:  # not what another bound prints
            return text
        digits = max(digits, _n_digits(text)) + 1


def admitted_integers(low: float, high: float, scale: float = 1.0, offset: float = 0.0) -> tuple[float, float]:
    """The integers ``n`` (in printed units) whose stored value ``(n - offset) / scale`` lies in ``[low, high)``, as
    the closed range ``(first, last)``; a side is infinite when open, and ``first > last`` when no integer is
    admitted.

    Example:
        >>> admitted_integers(40.2, math.inf), admitted_integers(3.0, 4.0), admitted_integers(0.5, 0.9, 10.0, 1.0)
        ((41, inf), (3, 3), (6, 9))
    """
    if (scale, offset) == (1.0, 0.0):
        first = math.ceil(low) if math.isfinite(low) else -math.inf
        last = math.ceil(high) - 1 if math.isfinite(high) else math.inf
        return first, last

    def stored(p: float) -> float:
        return _to_stored(p, scale, offset)

    def ceil(p: float) -> float:
        return math.ceil(p) if math.isfinite(p) else p

    near_low, near_high = low * scale + offset, high * scale + offset  # guesses for the searches
    if scale > 0:  # stored >= v <=> printed >= the first p reaching v
        first = ceil(_first(lambda p: stored(p) >= low, near_low)) if math.isfinite(low) else -math.inf
        last = ceil(_first(lambda p: stored(p) >= high, near_high)) - 1 if math.isfinite(high) else math.inf
        return first, last
    # a negative scale flips the order: stored < v <=> printed >= the first p below v
    first = ceil(_first(lambda p: stored(p) < high, near_high)) if math.isfinite(high) else -math.inf
    last = ceil(_first(lambda p: stored(p) < low, near_low)) - 1 if math.isfinite(low) else math.inf
    return first, last


def short_cut(a: float, b: float, scale: float = 1.0, offset: float = 0.0) -> float:
    """A cut ``c`` with ``a < c <= b`` that reads short: as few significant digits as possible in the printed units
    ``c * scale + offset`` (as printed by :func:`format_bound`; in the stored units when the printed ones give no
    cut inside; ``b`` when nothing is shorter). Among cuts of the same length, the one nearest the middle: any bound
    in ``(a, b]`` selects the same samples, and the shortest reads best (``x < 0.5``, not ``x < 0.5017943978``).

    Example:
        >>> short_cut(0.4998, 0.5018), short_cut(-2.31, -2.2999), short_cut(1.0, 1.0000001), short_cut(3.0, 4.0)
        (0.5, -2.3, 1.0000001, 4.0)
        >>> c = short_cut(0.45, 0.46, scale=5.5, offset=3.5)  # printed units (5.975, 6.03]: 6
        >>> format_bound(c, scale=5.5, offset=3.5)
        '6'
    """
    if not (math.isfinite(a) and math.isfinite(b)) or not a < b:
        return b
    best, best_len = b, _n_digits(format_bound(b, scale, offset))
    c = _printed_cut(a, b, scale, offset)
    if c is None:  # no float64 in printed units maps inside: a short one in stored units
        c = float(_text(*_shortest_in(a.as_integer_ratio(), b.as_integer_ratio())))
    if a < c <= b and _n_digits(format_bound(c, scale, offset)) <= best_len:
        best = c
    return best


def _printed_cut(a: float, b: float, scale: float, offset: float) -> float | None:
    """The stored value ``c`` in ``(a, b]`` of the shortest decimal in printed units that maps into ``(a, b]``;
    ``None`` when no float64 in printed units does."""
    sign = 1.0 if scale > 0 else -1.0
    up = lambda p: sign * _to_stored(p, scale, offset)  # noqa: E731 - non-decreasing in p
    near_a, near_b = a * scale + offset, b * scale + offset  # guesses: the first p is near them
    if (scale, offset) == (1.0, 0.0):  # up(p) = p: the floats in (a, b]
        first, after = _next(a), _next(b)
    elif sign > 0:  # c in (a, b] <=> up(p) in (a, b]
        first, after = _first(lambda p: up(p) > a, near_a), _first(lambda p: up(p) > b, near_b)
    else:  # c in (a, b] <=> up(p) = -c in [-b, -a)
        first, after = _first(lambda p: up(p) >= -b, near_b), _first(lambda p: up(p) >= -a, near_a)
    last = _prev(after) if not math.isnan(after) else math.inf
    if math.isnan(first) or not (math.isfinite(first) and math.isfinite(last) and first <= last):
        return None
    lo, hi = _neighbourhood(first, last)
    digits = 1
    while digits < 40:  # a decimal just inside the neighbourhood may round outside: check, lengthen
        text = _text(*_shortest_in(lo, hi, digits))
        c = _to_stored(float(text), scale, offset)
        if a < c <= b:
            return c
        digits = max(digits, _n_digits(text)) + 1
    return None

"""Kubernetes resource quantities (``k8s.io/apimachinery/pkg/api/resource``): ``500m``, ``2``,
``128Mi``, ``1G``, ``1e9``, ``0``.

``edgeplane_contract.resources.parse_cpu``/``parse_memory`` read the forms people type into a
workload spec; a Pod from the API server may use the rest of kube's grammar (exponents, ``n``/``u``
suffixes, ``Pi``/``Ei``, zero), so quantities are read here, exactly, as :class:`~decimal.Decimal`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from controlplane.errors import ValidationError

__all__ = ["parse_quantity"]

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
# The exponent form comes first: "1E3" is 1000, "1E" one exa.
_QUANTITY = re.compile(r"^\+?(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")


def parse_quantity(value: object, *, field: str) -> Decimal:
    """A non-negative quantity; a JSON number is accepted as the API server accepts it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValidationError("must be a quantity such as '500m', '2' or '128Mi'", field=field)
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise ValidationError(f"cannot parse quantity {value!r}", field=field)
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number)
    except InvalidOperation:  # the pattern admits only digits: kept for safety
        raise ValidationError(f"cannot parse quantity {value!r}", field=field) from None
    if exponent is not None:
        return amount.scaleb(int(exponent))
    return amount * _SUFFIX[suffix or ""]

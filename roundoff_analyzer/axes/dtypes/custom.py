from ...emulation import CUSTOM_FORMS, custom_format
from .base import DTYPES, DtypeSpec


def _custom(name: str) -> DtypeSpec | None:
    fmt = custom_format(name)
    return None if fmt is None else DtypeSpec(name, None, fmt, "emulated")


# eXmY: IEEE-like with subnormals, emulated only (rounded by this project's round-to-nearest-even).
DTYPES.register_family(_custom, CUSTOM_FORMS)

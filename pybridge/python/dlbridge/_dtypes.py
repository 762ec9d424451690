"""Data type names <-> DLPack (code, bits, lanes), and their typestr."""

from . import _lib

# name: (code, bits, lanes). Codes are DLDataTypeCode.
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_KNOWN = {
    "bool": (_BOOL, 8, 1),
    "int8": (_INT, 8, 1),
    "int16": (_INT, 16, 1),
    "int32": (_INT, 32, 1),
    "int64": (_INT, 64, 1),
    "uint8": (_UINT, 8, 1),
    "uint16": (_UINT, 16, 1),
    "uint32": (_UINT, 32, 1),
    "uint64": (_UINT, 64, 1),
    "float16": (_FLOAT, 16, 1),
    "float32": (_FLOAT, 32, 1),
    "float64": (_FLOAT, 64, 1),
    "bfloat16": (_BFLOAT, 16, 1),
    "complex64": (_COMPLEX, 64, 1),
    "complex128": (_COMPLEX, 128, 1),
}
_BY_KEY = {v: k for k, v in _KNOWN.items()}

# struct-module formats for reading elements on the host (bfloat16 is
# special-cased; complex is read as two reals).
STRUCT_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float16": "e", "float32": "f", "float64": "d",
}

_typestrs = {}


def parse(dtype):
    """(code, bits, lanes) for a dtype given as a string, a NumPy or torch
    dtype, or a type such as float."""
    if isinstance(dtype, str):
        name = dtype
    elif dtype is bool:
        name = "bool"
    elif dtype is int:
        name = "int64"
    elif dtype is float:
        name = "float64"
    elif dtype is complex:
        name = "complex128"
    else:
        name = str(dtype)  # numpy.dtype('float32') -> 'float32'; torch.float32 -> 'torch.float32'
        if name.startswith("<class 'numpy."):  # numpy scalar types: np.float32
            name = name[len("<class 'numpy."):-2]
    key = _KNOWN.get(name)
    if key is not None:
        return key
    return _lib._core.dlb_parse_dtype(name.encode())


def name(code, bits, lanes):
    """The dtype string for a DLPack data type ("float32", "bfloat16", ...)."""
    key = (code, bits, lanes)
    n = _BY_KEY.get(key)
    if n is not None:
        return n
    n = _lib._core.dlb_dtype_name(code, bits, lanes)
    _BY_KEY[key] = n
    return n


def typestr(code, bits, lanes, padded=False):
    """The array-interface typestr ("<f4", "|b1", "<V2" for bfloat16)."""
    key = (code, bits, lanes, padded)
    ts = _typestrs.get(key)
    if ts is None:
        ts = _typestrs[key] = _lib._core.dlb_typestr(code, bits, lanes, int(padded))
    return ts


# Python buffer-protocol (struct) formats -> typestr kind letter.
_BUFFER_KINDS = {
    "?": "b", "b": "i", "h": "i", "i": "i", "l": "i", "q": "i", "n": "i",
    "B": "u", "H": "u", "I": "u", "L": "u", "Q": "u", "N": "u", "c": "u",
    "e": "f", "f": "f", "d": "f", "Zf": "c", "Zd": "c",
}


def typestr_of_format(fmt, itemsize):
    """The typestr of a buffer-protocol format such as "f", "<d" or "Zf"."""
    f = fmt or "B"
    order = "<"
    if f[0] in "@=<>!":
        if f[0] in ">!":
            raise BufferError("dlbridge: big-endian buffer format %r is not supported" % fmt)
        f = f[1:]
    kind = _BUFFER_KINDS.get(f)
    if kind is None:
        raise BufferError(
            "dlbridge: buffer format %r has no DLPack data type (want a single numeric "
            "or bool item such as 'f', 'd', 'i', 'B', '?')" % fmt
        )
    if itemsize == 1:
        order = "|"
    return "%s%s%d" % (order, kind, itemsize)

"""CPython's capsule functions through ctypes, for tests that build or
inspect raw DLPack capsules the way a foreign producer or consumer does."""

import ctypes

_api = ctypes.pythonapi
PyCapsule_New = _api.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
PyCapsule_GetName = _api.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]
PyCapsule_GetPointer = _api.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

NAME_LEGACY, NAME_VERSIONED = b"dltensor", b"dltensor_versioned"

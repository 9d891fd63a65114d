"""A small GGUF v2/v3 reader (numpy only), written from the GGUF format description.

Reads every metadata key (value in kv, its GGUF value type in kv_types: an int, or for arrays a
tuple (ARRAY, element type), enough to write the value back) and every tensor. Tensor data is
returned as numpy arrays in *numpy*
order, i.e. the reverse of ggml's ne (ne0 is the fastest axis). Supported tensor types: F32, F16,
BF16 (enough for the F32 golden files and for BF16/F16 conversions); other types raise.
"""
from __future__ import annotations

import struct
import numpy as np

GGUF_MAGIC = b"GGUF"

# metadata value types
_T_U8, _T_I8, _T_U16, _T_I16, _T_U32, _T_I32, _T_F32, _T_BOOL, _T_STR, _T_ARR, _T_U64, _T_I64, _T_F64 = range(13)
_SCALAR = {
    _T_U8: "<B", _T_I8: "<b", _T_U16: "<H", _T_I16: "<h", _T_U32: "<I", _T_I32: "<i",
    _T_F32: "<f", _T_BOOL: "<?", _T_U64: "<Q", _T_I64: "<q", _T_F64: "<d",
}
# ggml tensor types we can decode
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


class GGUFFile:
    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self._buf = f.read()
        self._pos = 0
        if self._read(4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.version = self._u32()
        if self.version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = self._u64()
        n_kv = self._u64()
        self.kv: dict[str, object] = {}
        self.kv_types: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._u32()
            if vtype == _T_ARR:
                # peek at the element type: writers need it even for empty arrays
                self.kv_types[key] = (_T_ARR, struct.unpack_from("<I", self._buf, self._pos)[0])
            else:
                self.kv_types[key] = vtype
            self.kv[key] = self._value(vtype)
        self.tensor_info: dict[str, tuple[list[int], int, int]] = {}
        self.tensor_order: list[str] = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = [self._u64() for _ in range(n_dims)]
            ttype = self._u32()
            off = self._u64()
            self.tensor_info[name] = (ne, ttype, off)
            self.tensor_order.append(name)
        align = int(self.kv.get("general.alignment", 32))
        self.data_start = (self._pos + align - 1) // align * align

    # --- primitive readers
    def _read(self, n: int) -> bytes:
        b = self._buf[self._pos:self._pos + n]
        if len(b) != n:
            raise ValueError(f"{self.path}: truncated file")
        self._pos += n
        return b

    def _u32(self) -> int:
        return struct.unpack("<I", self._read(4))[0]

    def _u64(self) -> int:
        return struct.unpack("<Q", self._read(8))[0]

    def _str(self) -> str:
        n = self._u64()
        return self._read(n).decode("utf-8", errors="replace")

    def _value(self, vtype: int):
        if vtype in _SCALAR:
            fmt = _SCALAR[vtype]
            return struct.unpack(fmt, self._read(struct.calcsize(fmt)))[0]
        if vtype == _T_STR:
            return self._str()
        if vtype == _T_ARR:
            etype = self._u32()
            n = self._u64()
            if etype in _SCALAR:
                fmt = _SCALAR[etype]
                sz = struct.calcsize(fmt)
                raw = self._read(sz * n)
                return list(np.frombuffer(raw, dtype=np.dtype(fmt)).tolist())
            return [self._value(etype) for _ in range(n)]
        raise ValueError(f"{self.path}: unknown metadata type {vtype}")

    # --- public API
    def arch(self) -> str:
        return str(self.kv["general.architecture"])

    def key(self, name: str, default=None):
        """Arch-relative key: key('block_count') reads '<arch>.block_count'."""
        return self.kv.get(f"{self.arch()}.{name}", default)

    def tensor(self, name: str) -> np.ndarray:
        ne, ttype, off = self.tensor_info[name]
        count = int(np.prod(ne)) if ne else 1
        start = self.data_start + off
        shape = tuple(reversed(ne))
        if ttype == GGML_F32:
            a = np.frombuffer(self._buf, dtype="<f4", count=count, offset=start)
        elif ttype == GGML_F16:
            a = np.frombuffer(self._buf, dtype="<f2", count=count, offset=start).astype(np.float32)
        elif ttype == GGML_BF16:
            u = np.frombuffer(self._buf, dtype="<u2", count=count, offset=start).astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            raise ValueError(f"{self.path}: tensor {name} has ggml type {ttype}; only F32/F16/BF16 supported")
        return a.reshape(shape).copy()

    def has(self, name: str) -> bool:
        return name in self.tensor_info

    def names(self) -> list[str]:
        return list(self.tensor_order)

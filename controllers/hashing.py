"""ECMP hashing as the switches compute it, in pure Python, so hosts and tests can predict a path.

The `asic` and `asic-seeded` hash models have every switch pick its next hop
with Open vSwitch's `multipath` action: `fields=symmetric_l3l4+udp`,
`algorithm=modulo_n`, the switch's seed as `basis`. That is what a commodity
switch does (one hash over the same header fields, bucket = hash mod the
number of next hops); the function below is OVS's own
(`flow_hash_symmetric_l3l4` over MurmurHash3 steps, lib/flow.c and
lib/hash.h, the portable build Debian ships), so a prediction here is the
switch's choice, bit for bit.

- `asic`: the same seed on every switch, as when one vendor's default is
  left alone. Flows a ToR hashed onto one uplink share `hash mod n` there,
  and the next switch hashes them again with the same function: its choices
  are correlated with the ToR's (hash polarization, HPN section 4).
- `asic-seeded`: a different seed per switch, the usual mitigation.
- `ovs`: OVS's select groups (their own hash and bucket choice): not
  predicted here.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass
from typing import Literal, get_args

HashModel = Literal["ovs", "asic", "asic-seeded"]
MODELS: tuple[str, ...] = get_args(HashModel)
NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP = 3  # OVS's enum nx_hash_fields (os-ken names only the first two)
FIELDS = "symmetric_l3l4+udp"  # the same, as ovs-ofctl spells it
ECMP_TABLE = 1  # where (set, hash mod n) picks the port
SET_REG, HASH_REG = "reg1", "reg0"
ASIC_SEED = 0  # the basis every switch uses under `asic`
TCP, UDP = 6, 17
_M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def _mhash_add(h: int, data: int) -> int:
    if data:
        data = (data * 0xCC9E2D51) & _M32
        data = _rot(data, 15)
        data = (data * 0x1B873593) & _M32
        h ^= data
    h = _rot(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


def _mhash_finish(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _raw_be32(ip: str) -> int:
    """An IPv4 address as OVS reads its network-order word on a little-endian machine."""
    return int.from_bytes(ipaddress.IPv4Address(ip).packed, "little")


def _raw_be16(port: int) -> int:
    return int.from_bytes(port.to_bytes(2, "big"), "little")


@dataclass(frozen=True)
class FiveTuple:
    src: str
    dst: str
    proto: int
    sport: int
    dport: int


def symmetric_l3l4(t: FiveTuple, basis: int) -> int:
    """OVS's flow_hash_symmetric_l3l4(flow, basis, inc_udp_ports=true) for an IPv4, unfragmented packet."""
    h = _mhash_add(basis, _raw_be32(t.src) ^ _raw_be32(t.dst))
    h = _mhash_add(h, t.proto)
    if t.proto in (TCP, UDP, 132):
        h = _mhash_add(h, _raw_be16(t.sport) ^ _raw_be16(t.dport))
    return _mhash_finish(h ^ basis)


def seed(model: str, switch: str) -> int | None:
    """The switch's hash basis (16 bits, as the multipath action takes it); None for `ovs` (select groups)."""
    if model == "ovs":
        return None
    if model == "asic":
        return ASIC_SEED
    if model == "asic-seeded":
        return zlib.crc32(switch.encode()) & 0xFFFF
    raise ValueError(f"unknown hash model {model!r} (one of {', '.join(MODELS)})")


def bucket(t: FiveTuple, n: int, basis: int) -> int:
    """The next hop index `multipath(symmetric_l3l4+udp, basis, modulo_n, n, ...)` writes."""
    return symmetric_l3l4(t, basis) % n

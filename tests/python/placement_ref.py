"""Placement as the docs define it, reimplemented for the tests: rendezvous
weights (docs/protocol.md "Several servers: placement") and a key's shard in
a cluster's shard map (docs/cluster.md "The shard map"). Independent of the
C++ code on purpose: the tests compare the two."""

M64 = (1 << 64) - 1
SHARD_SALT = 0x7368617264736C74  # proto::kShardSalt, "shardslt"


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    h ^= h >> 33
    return h


def hash64(data: bytes) -> int:
    h = 0xCBF29CE484222325  # FNV-1a 64, then fmix64
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return fmix64(h)


def weight(key: bytes, server: str) -> int:
    return fmix64(hash64(key) ^ hash64(server.encode()))


def place(key: bytes, ids: list[str]) -> int:
    """The index of the key's server: the largest weight; a tie goes to the smaller identity."""
    return max(range(len(ids)), key=lambda i: (weight(key, ids[i]), [-c for c in ids[i].encode()]))


def shard_of(key: bytes, shards: int) -> int:
    """proto::shard_of: the key's shard among `shards`."""
    return fmix64(hash64(key) ^ SHARD_SALT) % shards

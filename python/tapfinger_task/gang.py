"""A gang member's place: rank, world size and the rendezvous ``torch.distributed`` reads.

The agent starts a gang's members with ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK`` and ``TAPFINGER_GANG_ROLE`` (``ps``, ``worker`` or a pipeline's
``stage``) set, the way ``torchrun`` does; with them, ``init_process_group("gloo")`` (or
``nccl``) needs no other argument.
"""

import os
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Gang:
    """One member's place in its gang."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    role: str

    @property
    def init_method(self) -> str:
        """The rendezvous as a ``torch.distributed`` init method (``tcp://addr:port``)."""
        return f"tcp://{self.master_addr}:{self.master_port}"


def gang() -> Optional[Gang]:
    """This process's place in its gang, or None for a task that runs alone."""
    e = os.environ
    if "WORLD_SIZE" not in e or "RANK" not in e:
        return None
    return Gang(
        rank=int(e["RANK"]),
        world_size=int(e["WORLD_SIZE"]),
        local_rank=int(e.get("LOCAL_RANK", "0")),
        master_addr=e.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(e.get("MASTER_PORT", "29500")),
        role=e.get("TAPFINGER_GANG_ROLE", "worker"),
    )

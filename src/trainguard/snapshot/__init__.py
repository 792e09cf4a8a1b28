"""The in-memory snapshot tier: slots in host memory, replicas on a buddy host, restore from
the nearest copy (design: docs/design/recovery-in-seconds.md)."""

from trainguard.snapshot.layout import DEFAULT_ROOT, HostDirs
from trainguard.snapshot.slot import Expected, SlotHeader, copy_slot, newest_slot, read_header

__all__ = ["DEFAULT_ROOT", "Expected", "HostDirs", "SlotHeader", "copy_slot", "newest_slot",
           "read_header"]

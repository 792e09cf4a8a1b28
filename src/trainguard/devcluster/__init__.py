"""A namespaced multi-host cluster on one machine (tests, ``make bench``, demos).

:class:`HostCluster` builds N virtual hosts from Linux namespaces; :class:`SlurmHostCluster`
adds a Slurm controller in the root namespace and one ``slurmd`` per host. Root only.
"""

from __future__ import annotations

from trainguard.devcluster.common import DevClusterError, missing_requirements
from trainguard.devcluster.hosts import HostCluster, VirtualHost
from trainguard.devcluster.slurm import SlurmHostCluster

__all__ = ["DevClusterError", "HostCluster", "SlurmHostCluster", "VirtualHost",
           "missing_requirements"]

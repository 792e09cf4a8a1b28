"""Host validation: per-host probes, link localization, verdicts (``trainguard check``)."""

"""condor_lumberjack: carry jobs from an HTCondor queue to an HPC site and back."""

__version__ = "0.1.0"

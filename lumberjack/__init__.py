"""condor_lumberjack: carry jobs from an HTCondor queue to an HPC site and back."""

try:  # written at build or install time from git (setuptools-scm)
    from lumberjack._version import version as __version__
except ImportError:  # a source tree never built or installed
    __version__ = "0+unknown"

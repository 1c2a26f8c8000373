"""The job attributes the path map reads or rewrites (canonical spelling), in groups.

Attribute names are matched case-insensitively; these are the spellings overrides get
when the proc ad has none of its own.
"""

from __future__ import annotations

IWD = "Iwd"
CMD = "Cmd"
TRANSFER_INPUT = "TransferInput"
STDIN = "In"
X509_PROXY = "x509userproxy"
CONTAINER_IMAGE = "ContainerImage"
SINGULARITY_IMAGE = "SingularityImage"
CONTAINER_IMAGE_FULL_PATH = "ContainerImageFullPath"
STDOUT = "Out"
STDERR = "Err"
TRANSFER_OUTPUT = "TransferOutput"
TRANSFER_OUTPUT_REMAPS = "TransferOutputRemaps"
USER_LOG = "UserLog"
DAGMAN_NODES_LOG = "DAGManNodesLog"
#: The event numbers DAGMan wants in its nodes log (the schedd writes only those there).
DAGMAN_NODES_MASK = "DAGManNodesMask"
OUTPUT_DESTINATION = "OutputDestination"
TRANSFER_PLUGINS = "TransferPlugins"
TRANSFER_EXECUTABLE = "TransferExecutable"
TRANSFER_CONTAINER = "TransferContainer"
PRESERVE_RELATIVE_PATHS = "PreserveRelativePaths"
SHOULD_TRANSFER_FILES = "ShouldTransferFiles"

INPUT_ATTRS = (CMD, TRANSFER_INPUT, STDIN, X509_PROXY, CONTAINER_IMAGE, SINGULARITY_IMAGE)
OUTPUT_ATTRS = (STDOUT, STDERR, TRANSFER_OUTPUT_REMAPS)
LOG_ATTRS = (USER_LOG, DAGMAN_NODES_LOG)
REFUSED_ATTRS = (OUTPUT_DESTINATION, TRANSFER_PLUGINS)
# Attributes rewrite_job may set in a proc ad.
REWRITTEN_ATTRS = (IWD,) + INPUT_ATTRS + OUTPUT_ATTRS + LOG_ATTRS + (SHOULD_TRANSFER_FILES,)
# Attributes only read, to decide what to do.
CONTROL_ATTRS = (
    TRANSFER_EXECUTABLE,
    TRANSFER_CONTAINER,
    PRESERVE_RELATIVE_PATHS,
    TRANSFER_OUTPUT,
)

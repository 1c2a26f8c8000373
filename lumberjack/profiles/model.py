"""`SiteProfile`: a checked site profile as the rest of lumberjack uses it.

What a profile file may say and how it is checked: profile_file.py (the whole file),
site_tables.py and queue_tables.py (its tables), value_types.py (each key's value).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from lumberjack.core.units import format_memory, format_walltime
from lumberjack.errors import BadInput
from lumberjack.profiles.local_paths import expand_local_path
from lumberjack.profiles.messages import display_path
from lumberjack.profiles.profile_file import ProfileFile
from lumberjack.profiles.queue_tables import BatchSettings, Queue, RequestDefaults
from lumberjack.profiles.site_tables import ContainerSpec, ScheddSpec


@dataclass(frozen=True)
class SiteProfile:
    """A site as its profile file describes it: [site]'s keys, the other tables, the file."""

    name: str
    system: str
    login_host: str
    base_dir: str
    batch_system: str
    container: ContainerSpec
    queues: tuple[Queue, ...]
    path: Path
    description: str = ""
    source: str = ""
    checked: str = ""
    retired: bool = False
    successor: Optional[str] = None
    tested: str = "untested"
    tested_note: str = ""
    user: Optional[str] = None
    port: int = 22
    known_hosts: Optional[str] = None  # as written; see known_hosts_path()
    identity_file: Optional[str] = None  # as written; see identity_file_path()
    auth: str = "key"
    connection_sharing: bool = True
    scratch: str = ""
    allocation_required: bool = False
    shared_account: bool = False
    outbound_network: bool = False
    schedd: ScheddSpec = ScheddSpec()
    batch: BatchSettings = BatchSettings()
    defaults: RequestDefaults = RequestDefaults()

    @classmethod
    def from_file(cls, file: ProfileFile, path: Path) -> SiteProfile:
        site = file.site.model_dump()
        site["scratch"] = site["scratch"] or site["base_dir"]
        site["known_hosts"] = site["known_hosts"] or None
        site["identity_file"] = site["identity_file"] or None
        return cls(
            **site,
            container=file.container,
            schedd=file.schedd,
            queues=file.queues,
            batch=file.batch,
            defaults=file.defaults,
            path=path,
        )

    @property
    def default_queue(self) -> Queue:
        wanted = self.defaults.queue
        for queue in self.queues:
            if queue.name == wanted or (wanted is None and queue.default):
                return queue
        return self.queues[0]  # a checked profile names its default queue

    def find_queue(self, name: str) -> Optional[Queue]:
        """The queue called `name`, or None."""
        return next((queue for queue in self.queues if queue.name == name), None)

    def queue(self, name: str) -> Queue:
        """The queue called `name`; BadInput naming the site's queues if none."""
        queue = self.find_queue(name)
        if queue is None:
            names = ", ".join(queue.name for queue in self.queues)
            raise BadInput(f'site "{self.name}" has no queue "{name}"; its queues: {names}')
        return queue

    def known_hosts_path(self) -> Optional[Path]:
        """The pinned known_hosts file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("known_hosts", self.known_hosts)

    def identity_file_path(self) -> Optional[Path]:
        """The private key file, with ${VAR} and ~ expanded (BadInput if unset)."""
        return self._local_path("identity_file", self.identity_file)

    def condor_tarball_path(self) -> Optional[Path]:
        """[container].condor_tarball on this machine (runtime "none"), ${VAR} and ~
        expanded; BadInput (one line) if a variable is unset or the file is missing."""
        value = self.container.condor_tarball
        if value is None:
            return None
        path = self._local_path("condor_tarball", value, table="container")
        if path is None or not path.is_file():
            raise BadInput(
                f"{display_path(self.path)}: [container].condor_tarball {path} is not a file; "
                "point it at an HTCondor release tarball"
            )
        return path

    def _local_path(self, key: str, value: Optional[str], table: str = "site") -> Optional[Path]:
        if value is None:
            return None

        def unset(var: str) -> BadInput:
            return BadInput(
                f"{display_path(self.path)}: [{table}].{key} needs ${var}, which is not "
                f"set; export {var} or write the path into the profile"
            )

        return expand_local_path(value, self.path.parent, unset)

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (for --json)."""
        default = self.default_queue.name
        return {
            "name": self.name,
            "system": self.system,
            "description": self.description,
            "source": self.source,
            "checked": self.checked,
            "retired": self.retired,
            "successor": self.successor,
            "tested": self.tested,
            "tested_note": self.tested_note,
            "path": str(self.path),
            "login_host": self.login_host,
            "user": self.user,
            "port": self.port,
            "known_hosts": self.known_hosts,
            "identity_file": self.identity_file,
            "auth": self.auth,
            "connection_sharing": self.connection_sharing,
            "base_dir": self.base_dir,
            "scratch": self.scratch,
            "batch_system": self.batch_system,
            "allocation_required": self.allocation_required,
            "shared_account": self.shared_account,
            "outbound_network": self.outbound_network,
            "container": self.container.model_dump(mode="json"),
            "schedd": self.schedd.model_dump(mode="json"),
            "queues": [
                {
                    **q.model_dump(mode="json", exclude={"memory_per_node_mb", "max_walltime_s"}),
                    "memory_per_node": format_memory(q.memory_per_node_mb),
                    "memory_per_node_mb": q.memory_per_node_mb,
                    "max_walltime": format_walltime(q.max_walltime_s),
                    "max_walltime_s": q.max_walltime_s,
                    "default": q.name == default,
                }
                for q in self.queues
            ],
            "batch": self.batch.model_dump(mode="json"),
            "defaults": {
                **self.defaults.model_dump(mode="json", exclude={"walltime_s"}),
                "walltime": (
                    format_walltime(self.defaults.walltime_s)
                    if self.defaults.walltime_s is not None
                    else None
                ),
                "queue": default,
            },
        }

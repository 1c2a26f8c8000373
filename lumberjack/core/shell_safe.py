"""Words and paths that may go unquoted into a batch directive or a site's shell line.
Stdlib only: the access point checks input with them before anyone logs in, and the
site side checks again before it writes a script."""

from __future__ import annotations

import re

#: An allocation (account/project) or queue name as a batch directive holds it.
DIRECTIVE_WORD = re.compile(r"^[A-Za-z0-9_.@+:-]+$")

#: A path at the site that its shell may expand: starts with /, ~ or $VAR and holds
#: letters, digits and _ . / $ { } ~ @ : + , = -
REMOTE_PATH = re.compile(r"^(/|~|\$)[A-Za-z0-9_./${}~@:+,=-]*$")

#: A PBS chunk resource (`name=value`, e.g. "system=polaris") appended to `-l select=`.
CHUNK_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:+-]+$")

"""What lumberjack remembers between commands: the ledger, the phases, and the lifecycle
that moves an export through them (one step at a time, or `sync`)."""

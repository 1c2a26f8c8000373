"""What lumberjack remembers between commands: the ledger, the phases, the steps that move
an export through them (one at a time), and `sync`, which takes them as far as they go."""

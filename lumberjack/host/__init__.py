"""What every room of the access point stands on (ap, transport, state, cli): its
accounts and acting as one of them, where lumberjack's state lives, reading a file or a
path its owner could have replaced or crafted. Never shipped to a site."""

"""Site profiles and resource requests: pure, validated before anyone logs in."""

"""BFCL v4 inside EnvACE (being built)."""

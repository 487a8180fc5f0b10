"""tau2-bench inside EnvACE (being built)."""

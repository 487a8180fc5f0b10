"""Task suites: builtin domains of our own, and (later) adapters for public benchmarks."""

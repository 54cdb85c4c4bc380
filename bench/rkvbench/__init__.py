"""bench/run's modules (bench/run is the entry point; see its docstring)."""

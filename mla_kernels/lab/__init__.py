"""The measuring lab: timing harness and ceilings, the performance matrix, the measurement
schema and provenance, the roofline and occupancy models, compile checks, output checks.
It imports the operation (the package's top and designs/), never the review layer."""

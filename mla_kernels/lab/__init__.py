"""The measuring lab: random input sets and the cases built on them, output checks, the
timing harness and ceilings, host-cost profiling, the performance matrix, the measurement
schema and provenance, the roofline and occupancy models, compile checks, the launch-config
search and the diagnostics. It imports the operation (core/, designs/ and the call), never
the review layer."""

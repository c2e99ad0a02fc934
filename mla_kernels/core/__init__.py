"""The operation's core, below the designs: argument checks and the problem they describe
(problem), weight and cache formats (formats), the torch reference (reference), the shape
and device registries (shapes, devices), auto's tuned table (tuning, data) and the rules
every named value is checked with (value_rules). It imports nothing of the package above it."""

"""Diagnostics: one-off measurements behind the perf notes, each run on the GPU as
``python3 -m mla_kernels.lab.diagnostics.<name>`` (``--help`` says how; those with a CPU
``--check`` compile or interpret their kernels with no GPU), rows to ``reports/diag/``.

- ``mma_rate``: the tensor cores' rate at hopper_ws's tile shape, with no loads;
- ``write_bound``: what writing the outputs alone costs (``fill_``, an empty launch);
- ``gather_write_bound``: a plain Triton gather-and-store kernel's time over the same bytes;
- ``launch_shape``: what a Gluon launch's shape (shared memory, partitions) costs, empty;
- ``sequence_gaps``: a sequence of calls with idle gaps between them, against the SM clock;
- ``trace_hopper_ws``: per-program timestamps of one hopper_ws launch (on a patched tree);
- ``sequence_trace``: per-program timestamps of each call in a sequence of calls, and the
  hand-over between them (on a tree patched with ``scripts/diag/hopper_ws_sequence_trace.patch``);
- ``profile_hopper_ws``: one hopper_ws launch for Nsight Compute;
- ``absorbed_bounds``: the absorbed attention's Gluon kernel whole and each side alone (its
  dots with no gather, its gather with no dots) and, over fp8, with its tiles unwidened.
- ``expanded_bounds``: the expanded attention's Gluon kernel whole and each side alone (its
  dots over stages loaded once, its loads with no dots), its merge alone, by split count.

The diagnostic builds of hopper_ws (patches of the kernel as it was at the commit each names,
and the shell scripts that timed them) are kept in the history, not in the tree: they apply
to those commits only. ``git show b14c487:scripts/diag/`` lists them and
``git show b14c487:scripts/diag/<name>`` prints one. The sequence trace's patch is the
exception: it sits in ``scripts/diag/``, and ``sequence_trace --check`` (a CPU test) applies
it to the tree and compiles the patched kernel, so it is kept current.
"""

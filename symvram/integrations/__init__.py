"""symvram inside the training run (optional extra ``integrations``): a pre-flight check before step 1 and the
prediction held against the measured peak after it.

- ``integrations.check``: the one check every loop shares (``MemoryCheck``: verdict, triage, measurement,
  report);
- ``integrations.transformers``: ``MemoryCheckCallback`` for transformers' Trainer and TRL's trainers;
- ``integrations.accelerate``: ``preflight(accelerator, model, optimizer, batch)`` for accelerate loops;
- ``integrations.lightning``: ``MemoryCheckCallback`` for PyTorch Lightning (imports lightning on first use).

Importing this package imports none of them, and none imports torch until it runs.
"""

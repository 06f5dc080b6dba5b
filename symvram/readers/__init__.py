"""The user's own setup read into a Scenario: training configs (axolotl, LLaMA-Factory, TRL/Trainer
arguments, DeepSpeed, accelerate) and the live objects of a training run (a Hub model id is a model name:
``presets.load_model`` over ``symvram.hub``).

- ``readers.tools``: the mapping as data, one row per file key (setting, converter, tool default);
- ``readers.read``: ``read_files(paths)`` → a Reading (settings with their sources, warnings);
- ``readers.edits``: a remedy's setting changes written as edits to the user's file;

Importing this package imports none of them.
"""

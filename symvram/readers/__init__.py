"""The user's own setup read into a Scenario: training configs (axolotl, LLaMA-Factory, TRL/Trainer
arguments, DeepSpeed, accelerate) and Hugging Face Hub model ids.

- ``readers.tools``: the mapping as data, one row per file key (setting, converter, tool default);
- ``readers.read``: ``read_files(paths)`` → a Reading (settings with their sources, warnings);
- ``readers.edits``: a remedy's setting changes written as edits to the user's file;
- ``readers.hub``: ``org/name`` → a preset, the local Hugging Face cache, or a download of config.json.

Importing this package imports none of them (``presets.load_model`` reaches ``readers.hub`` lazily).
"""

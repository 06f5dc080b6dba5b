"""Training config files → Scenario settings, each with where it came from.

``read_files(paths)`` loads each file (YAML or JSON), recognises its format, follows the files it
names (a training YAML's ``deepspeed: ds.json``), reads every key through the tool's table
(``readers.tools``) and combines the facts into Scenario settings by the tools' own rules:

>>> import json, pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}))
>>> _ = (d / "axolotl.yml").write_text("base_model: llama-3-8b\\nmicro_batch_size: 2\\ndeepspeed: ds.json\\n")
>>> r = read_files([str(d / "axolotl.yml")])
>>> r.model.value, r.settings["batch"].value, r.settings["zero"].value, r.settings["master"].value
('llama-3-8b', 2, 3, 'fp32')
>>> r.settings["zero"].source.endswith("ds.json:zero_optimization.stage")
True
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..errors import EXCERPT, UserError, excerpt
from ..userfiles import expanded_size, read_user_file, unreadable
from ..scenario import CREATE_SETTINGS, GRPO_SETTINGS
from . import convert as c
from .convert import WrongValue
from .tools import DETECT, FACTS, INFO, NO_DEFAULT, OPTIMIZERS, PENDING, SYMBOL, TOOLS, Tool

MAX_BYTES = 1 << 20  # a training config is a few kB
MAX_VALUES = 100_000  # values (mappings, lists, scalars) a file may hold, its aliases expanded
TRAINING_TOOLS = ("axolotl", "llamafactory", "trl", "trainer", "torchtune", "litgpt")
FORMATS = ("axolotl YAML, LLaMA-Factory YAML, TRL/Trainer arguments JSON, DeepSpeed JSON, accelerate config YAML, "
           "torchtune recipe YAML, LitGPT finetune YAML")


@dataclass(frozen=True)
class Value:
    """A value and where it came from: ``file:key``, ``<tool> default`` or ``command line``."""

    value: object
    source: str
    priority: int = 2   # 0: a tool's default, 1: a weaker file key (accelerate's mixed_precision), 2: a file key
    file: str | None = None
    key: str | None = None


@dataclass
class Reading:
    """What the files say: Scenario settings with their sources, the notes, warnings and unread keys."""

    files: list[tuple[str, str]] = field(default_factory=list)       # (path as shown, tool name)
    model: Value | None = None
    settings: dict[str, Value] = field(default_factory=dict)         # Scenario keyword → Value
    notes: list[tuple[str, Value]] = field(default_factory=list)     # shown, no effect (alpha, packing …)
    warnings: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)                  # "file:key" known to nothing here

    @property
    def primary(self) -> tuple[str, str] | None:
        """The training file (axolotl, LLaMA-Factory, TRL/Trainer) the edits go to, if any."""
        return next(((f, t) for f, t in self.files if t in TRAINING_TOOLS), None)

    def kwargs(self) -> dict:
        """Scenario keywords; the ledger symbols a file sets (``=ds_reduce_bucket``) as ``overrides``."""
        out = {k: v.value for k, v in self.settings.items() if not k.startswith(SYMBOL)}
        if out.get("objective") != "grpo":   # DPO's beta and loss_type change no memory; GRPO's settings are its own
            out = {k: v for k, v in out.items() if k not in GRPO_SETTINGS + CREATE_SETTINGS}
        elif "max_completion_length" in out and "seq" in out and self.settings["seq"].priority == 0:
            del out["seq"]   # a GRPOConfig has no max_length: the sequence is the prompt and the completion
        symbols = {k[len(SYMBOL):]: v.value for k, v in self.settings.items() if k.startswith(SYMBOL)}
        return {**out, "overrides": symbols} if symbols else out


# ------------------------------------------------------------------------------------------ loading
def _load(path: Path, shown: str) -> dict:
    data = read_user_file(path, f"--from {shown}", MAX_BYTES, "a training config")
    try:
        body = data.decode("utf-8-sig")  # a byte-order mark, as Windows editors write, is not content
    except UnicodeDecodeError as e:
        raise UserError(f"{shown}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise UserError(f"{shown}: not valid JSON ({unreadable(e)})") from None
    else:
        doc = _yaml(body, shown)
    if not isinstance(doc, dict):
        raise UserError(f"{shown}: expected a mapping of settings at the top level, got {type(doc).__name__}")
    return doc


def _yaml(body: str, shown: str):
    """A YAML document (PyYAML's safe loader), its aliases bounded: the composed node graph is measured
    before anything is built, so an alias bomb (nine aliases of nine aliases …) is refused at the size
    of its file.

    >>> _yaml("a: &x [1, 2]\\nb: *x\\n", "f.yml")
    {'a': [1, 2], 'b': [1, 2]}
    >>> _yaml("a: &a [x, x]\\n" + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\\n"
    ...                                     for i in range(20)), "bomb.yml")
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: bomb.yml: it expands to over 100000 values (each alias counted where it is used); a training config holds hundreds
    """
    import yaml  # PyYAML, only when a YAML file is read

    def children(node):
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return node.value if isinstance(node, yaml.SequenceNode) else ()

    loader = None
    try:
        try:
            loader = yaml.SafeLoader(body)   # its reader refuses control characters (a NUL) at once
            node = loader.get_single_node()
            if node is None:
                return None
            size = expanded_size(node, children, MAX_VALUES)
            if size is not None:
                return loader.construct_document(node)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            raise UserError(f"{shown}: not valid YAML ({where}{getattr(e, 'problem', None) or e})") from None
        except RecursionError:
            raise UserError(f"{shown}: not valid YAML (nested too deeply)") from None
        except (ValueError, OverflowError) as e:  # a self-containing alias, an integer past Python's digit limit
            raise UserError(f"{shown}: not valid YAML ({unreadable(e)})") from None
    finally:
        if loader is not None:
            loader.dispose()
    raise UserError(f"{shown}: it expands to over {MAX_VALUES} values (each alias counted where it is used); "
                    "a training config holds hundreds")


# The HF Trainer's arguments: the vocabulary LLaMA-Factory and TRL extend and axolotl shares, so its keys are
# evidence for no other tool; a file is read as the Trainer's when no other tool's marker is in it.
SHARED = "trainer"


def detect(doc: dict, shown: str, leaves: list[str]) -> tuple[Tool, list[str]]:
    """The tool whose format ``doc`` is, by the weight of evidence, and a warning for each other tool that
    has keys of its own in it. The candidates are the tools whose marker keys it holds; each is weighed
    by the keys only it reads (not the Trainer's shared ones), and the heaviest wins (the first in DETECT
    among equals). Another tool with two or more keys the winner does not read, and at least half as many
    as the winner has of its own, makes the file a real mix of two tools: refused, both named. Fewer (a
    stray key) are warned about and counted as not read.

    >>> detect({"zero_optimization": {"stage": 2}}, "x", ["zero_optimization.stage"])[0].name
    'deepspeed'
    >>> ax = {"base_model": "m", "sequence_len": 4096, "micro_batch_size": 2, "lora_r": 16, "cutoff_len": 512}
    >>> tool, warnings = detect(ax, "a.yml", list(ax))
    >>> tool.name, warnings
    ('axolotl', ["a.yml: read as axolotl 0.19 (4 keys only it reads); cutoff_len is LLaMA-Factory 0.9.5's, not read"])
    >>> detect({**ax, "lora_rank": 16, "finetuning_type": "lora"}, "b.yml", [*ax, "lora_rank", "finetuning_type"])
    Traceback (most recent call last):
    ...
    symvram.errors.UserError: b.yml mixes two tools: axolotl 0.19 (base_model, sequence_len, micro_batch_size, lora_r) and LLaMA-Factory 0.9.5 (cutoff_len, lora_rank, finetuning_type); a file configures one tool (give each its own file)
    """
    keys = set(doc)
    candidates = [n for n in DETECT if n != SHARED and keys & TOOLS[n].markers]
    if not candidates:
        if keys & TOOLS[SHARED].markers:
            return TOOLS[SHARED], []
        listed = _keys(sorted(map(str, keys)), 6) or "no keys"
        raise UserError(f"{shown}: not a training config symvram reads ({FORMATS}); its keys: {listed}")
    own = {n: [k for k in leaves if _known(k, n) and not _known(k, SHARED)] for n in candidates}
    winner = max(candidates, key=lambda n: len(own[n]))
    warnings = []
    for other in candidates:
        theirs = [k for k in own[other] if not _known(k, winner)]
        mine = [k for k in own[winner] if not _known(k, other)]
        if len(theirs) >= 2 and 2 * len(theirs) >= len(mine):
            raise UserError(f"{shown} mixes two tools: {TOOLS[winner].title} ({_keys(mine)}) and "
                            f"{TOOLS[other].title} ({_keys(theirs)}); a file configures one tool (give each its own file)")
        if theirs and other != winner:
            warnings.append(f"{shown}: read as {TOOLS[winner].title} ({len(own[winner])} keys only it reads); "
                            f"{_keys(theirs)} {'is' if len(theirs) == 1 else 'are'} {TOOLS[other].title}'s, not read")
    return TOOLS[winner], warnings


def _keys(keys: list[str], shown: int = 4) -> str:
    """A few keys for a message: ``a, b, c, d and 3 more`` (a long one as an excerpt)."""
    listed = ", ".join(excerpt(k, 40) if len(k) > 40 else k for k in keys[:shown])
    return listed + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def _lookup(doc: dict, key: str):
    node = doc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


MAX_KEY_CHARS = 4 * MAX_BYTES  # the dotted keys of a file, all together (a deep tree of long keys repeats them)


def _leaves(doc: dict, shown: str = "") -> list[str]:
    """The dotted key of every value that is not a mapping (or an empty one), in file order.

    >>> _leaves({"a": {"b": 1, "c": {}}, "d": [1]})
    ['a.b', 'a.c', 'd']
    """
    out, chars = [], 0
    stack = [(f"{k}", v) for k, v in reversed(doc.items())]
    while stack:
        name, value = stack.pop()
        chars += len(name)
        if chars > MAX_KEY_CHARS:
            raise UserError(f"{shown}: its keys, written out, are over {MAX_KEY_CHARS} characters; "
                            "a training config's are a few thousand")
        if isinstance(value, dict) and value:
            stack += [(f"{name}.{k}", v) for k, v in reversed(value.items())]
        else:
            out.append(name)
    return out


@cache
def vocabulary(tool: str) -> tuple[frozenset[str], frozenset[str]]:
    """The keys ``tool``'s table names (its rows and harmless keys), and the mappings above them."""
    t = TOOLS[tool]
    names = frozenset({r.key for r in t.rows} | t.harmless)
    return names, frozenset(k.rsplit(".", i)[0] for k in names for i in range(1, k.count(".") + 1))


def _known(key: str, tool: str) -> bool:
    """A leaf is known to ``tool`` when a row or a harmless key names it, a mapping above it, or a key below it.

    >>> _known("zero_optimization.stage", "deepspeed"), _known("zero_optimization", "deepspeed")
    (True, True)
    >>> _known("bf16.enabled", "trainer"), _known("my_own_key", "axolotl")
    (True, False)
    """
    names, above = vocabulary(tool)
    parts = key.split(".")
    return key in above or any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))


# ------------------------------------------------------------------------------------------ reading
class _Reader:
    def __init__(self):
        self.reading = Reading()
        self.facts: dict[str, list[Value]] = {}
        self.seen: set[Path] = set()
        self.unmodelled: dict[tuple[str, str], list[str]] = {}   # (file, why) → "key = value", one line each
        self.pending: dict[tuple[str, str], list[str]] = {}

    def add(self, name: str, value: Value) -> None:
        self.facts.setdefault(name, []).append(value)

    def file(self, path: Path, shown: str, tool: Tool | None = None, referenced_by: str | None = None) -> None:
        try:
            real = path.resolve()
        except (OSError, RuntimeError, ValueError):  # a loop of symbolic links, a NUL character: _load says so
            real = path
        if real in self.seen:
            return
        doc = _load(path, shown)
        self.seen.add(real)
        self.mapping(doc, shown, tool, path.parent)

    def mapping(self, doc: dict, shown: str, tool: Tool | None = None, folder: Path = Path(".")) -> None:
        """One document (a file's contents, or a live object's settings as a dict) read with its tool's table."""
        leaves = _leaves(doc, shown)
        if tool is None:
            tool, warnings = detect(doc, shown, leaves)
            self.reading.warnings += warnings
        self.reading.files.append((shown, tool.name))
        self.doc(doc, tool, shown, "", folder, leaves)

    def doc(self, doc: dict, tool: Tool, shown: str, prefix: str, folder: Path, leaves: list[str] | None = None) -> None:
        for key in _leaves(doc, shown) if leaves is None else leaves:
            if not _known(key, tool.name):
                self.reading.unread.append(f"{shown}:{prefix}{key}")
        for row in tool.rows:
            present, raw = _lookup(doc, row.key)
            where = f"{shown}:{prefix}{row.key}"
            if row.setting and row.setting.startswith("@"):
                if present and raw not in (None, "", {}):
                    self.reference(raw, TOOLS[row.setting[1:]], shown, prefix + row.key, folder)
                continue
            value = None
            if present and raw is not None:
                try:
                    value = row.convert(raw)
                except WrongValue as e:
                    raise UserError(f"{shown}: {prefix}{row.key}: {e}") from None
                except (TypeError, AttributeError):
                    raise UserError(f"{shown}: {prefix}{row.key}: unexpected value {excerpt(raw)}") from None
            if row.setting is None:
                if value:
                    self.unmodelled.setdefault((shown, row.why), []).append(f"{prefix}{row.key} = {_show(raw)}")
                continue
            if value is None:
                if row.default is not NO_DEFAULT:
                    entry = Value(row.default, f"{tool.title} default", 0, shown, prefix + row.key)
                    if row.setting == INFO:
                        self.reading.notes.append((prefix + row.key, entry))
                    else:
                        self.add(row.setting, entry)
                continue
            entry = Value(value, where, row.priority, shown, prefix + row.key)
            if row.setting == INFO:
                self.reading.notes.append((prefix + row.key, entry))
            elif row.setting in PENDING:
                default, why = PENDING[row.setting]
                if value != default:
                    self.pending.setdefault((shown, why), []).append(f"{prefix}{row.key} = {_show(raw)}")
            else:
                self.add(row.setting, entry)

    def reference(self, raw, tool: Tool, shown: str, key: str, folder: Path) -> None:
        if isinstance(raw, dict):
            self.reading.files.append((f"{shown}:{key}", tool.name))
            self.doc(raw, tool, shown, key + ".", folder)
            return
        if not isinstance(raw, str):
            raise UserError(f"{shown}: {key}: expected a file name or a mapping, got {excerpt(raw)}")
        try:  # anything there (a directory, a pipe, a loop of links) is read, and refused, as a file
            path = next((p for p in (folder / raw, Path(raw)) if p.exists() or p.is_symlink()), None)
        except (OSError, ValueError):  # a name too long for the file system, a NUL character
            path = None
        if path is None:
            raise UserError(f"{shown}: {key}: no such file {excerpt(raw)} (looked beside {shown} and in the current folder)")
        self.file(path, str(path), tool)

    def best(self, name: str) -> Value | None:
        """The value of a fact: the highest priority wins; among equals, the last file read."""
        found = self.facts.get(name, [])
        if not found:
            return None
        top = max(v.priority for v in found)
        winners = [v for v in found if v.priority == top]
        if top > 0 and len({repr(v.value) for v in winners}) > 1:
            others = ", ".join(f"{v.source} = {_show(v.value)}" for v in winners[:-1])
            self.reading.warnings.append(f"{winners[-1].source} = {_show(winners[-1].value)} overrides {others}")
        return winners[-1]


def _show(value) -> str:
    """A file's value in a warning line: as the file writes it, a long one as an excerpt.

    >>> _show(True), _show(("q_proj", "v_proj")), _show(""), _show("x" * 100)[:8], _show(list(range(50)))
    ('true', 'q_proj,v_proj', "''", "'xxxxxxx", '[0, 1, 2, 3, ...]')
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, str):
        return value if 0 < len(value) <= EXCERPT else excerpt(value)
    return str(value) if isinstance(value, float) else excerpt(value)


def read_files(paths: list[str], cli: dict | None = None) -> Reading:
    """Read ``paths`` (in order; later files win over earlier ones) into a Reading.

    ``cli`` holds the settings given on the command line: the rules that derive one setting from
    another (the precision recipe depends on the method) use them, and they win over the files.
    """
    r = _Reader()
    for p in paths:
        r.file(Path(p), p)
    return _finish(r, cli)


def read_mappings(docs: list[tuple[str, dict, str]], cli: dict | None = None) -> Reading:
    """``read_files`` for documents already in memory: (name shown, mapping, tool name) each — a live
    ``TrainingArguments.to_dict()`` is read with the table that reads its JSON (``readers.live``).

    >>> r = read_mappings([("TrainingArguments", {"per_device_train_batch_size": 2, "bf16": True}, "trainer")])
    >>> r.settings["batch"].value, r.settings["batch"].source, r.settings["autocast"].value
    (2, 'TrainingArguments:per_device_train_batch_size', 'bf16')
    """
    r = _Reader()
    for shown, doc, tool in docs:
        r.mapping(doc, shown, TOOLS[tool])
    return _finish(r, cli)


def _finish(r: "_Reader", cli: dict | None) -> Reading:
    for (shown, why), keys in r.pending.items():
        tail = "" if "estimated" in why else "; estimated without it"
        r.reading.warnings.append(f"{shown}: {', '.join(keys)}: not modelled yet ({why}){tail}")
    for (shown, why), keys in r.unmodelled.items():
        r.reading.warnings.append(f"{shown}: {', '.join(keys)}: {why} — not modelled; the estimate leaves it out")
    facts = {name: v for name in FACTS + tuple(_SETTINGS) if (v := r.best(name)) is not None}
    r.reading.model = facts.get("model")
    r.reading.settings = _resolve(facts, r.reading, cli or {})
    r.reading.settings.update({name: v for name in r.facts if name.startswith(SYMBOL) and (v := r.best(name))})
    return r.reading


# the Trainer's optim names that run bitsandbytes' AdamW (transformers trainer_optimizer.py
# _get_bitsandbytes_optimizer: optim_bits 8 if "8bit" in the name else 32, is_paged if "paged" is) → symvram's
BNB_ADAMW = {"adamw_bnb_8bit": "adamw8bit", "adamw_8bit": "adamw8bit", "paged_adamw_8bit": "paged-adamw8bit",
             "paged_adamw_32bit": "paged-adamw"}

# Scenario settings a table may set directly
_SETTINGS = ("stack", "kbit_prep", "rank", "lora_dropout", "targets", "seq", "batch", "grad_checkpointing", "attention", "gpus",
             "double_quant", "tp", "checkpoint_impl", "checkpoint_every", "offload_activations", "packing", "liger", "loss_impl", "dora", "optimizer_in_backward", "modules_to_save", "objective", "precompute_ref",
             *GRPO_SETTINGS, *CREATE_SETTINGS, "cpo_alpha", "router_aux_loss_coef", "image_tokens",
             "train_vision")


def _join(*values: Value | None) -> str:
    """One source for a setting derived from several facts: ``file:key1,key2`` when they share a file
    (the keys that are on, when some are)."""
    parts = [v for v in values if v is not None and v.priority > 0]
    parts = [v for v in parts if v.value] or parts
    if not parts:
        defaults = [v.source for v in values if v is not None]
        return defaults[0] if defaults else "symvram default"
    files = dict.fromkeys(v.file for v in parts)
    return "; ".join(f"{f}:{','.join(v.key for v in parts if v.file == f)}" for f in files)


def _resolve(f: dict[str, Value], reading: Reading, cli: dict) -> dict[str, Value]:
    out = {k: f[k] for k in _SETTINGS if k in f}
    training = reading.primary[1] if reading.primary else "trainer"
    # method: the adapter and a 4-bit base
    adapter, quant = f.get("adapter"), f.get("quant")
    if adapter is not None or quant is not None:
        method = adapter.value if adapter else "full"
        if quant and quant.value == 4 and method in ("lora", "qlora"):
            method = "qlora"
        elif quant and quant.value == 8:
            reading.warnings.append(f"{quant.source}: an 8-bit (LLM.int8) base is not modelled; estimated as "
                                    f"{'LoRA on a 16-bit base' if method != 'full' else 'full fine-tuning'}")
        out["method"] = Value(method, _join(adapter, quant), max(v.priority for v in (adapter, quant) if v))
    elif training in ("trl", "trainer") and reading.primary:
        out["method"] = Value("full", f"{TOOLS[training].title} default (no adapter in it)", 0)
    elif training == "litgpt":
        out["method"] = Value("full", f"{TOOLS[training].title}: no lora_* key (litgpt finetune full)", 0)
    method = cli.get("method") or (out["method"].value if "method" in out else "full")
    save = out.get("modules_to_save")
    if save is not None and (not save.value or method == "full"):
        del out["modules_to_save"]
        if save.value:
            reading.warnings.append(f"{save.source}: modules_to_save applies beside LoRA adapters; full fine-tuning "
                                    "trains those modules anyway (ignored)")
    vision, projector = f.get("vision_trains"), f.get("projector_trains")
    if vision is not None and projector is not None and (vision.value or projector.value):
        if vision.value != projector.value:   # --train-vision trains the whole tower, its merger too
            raise UserError(f"{_join(vision, projector)}: the vision tower and its projector (Qwen3-VL's visual.merger) "
                            "trained apart are not modelled; --train-vision trains both (freeze_vision_tower: false "
                            "and freeze_multi_modal_projector: false)")
        out["train_vision"] = Value(True, _join(vision, projector), max(vision.priority, projector.priority))
    # LoRA targets: a flag for every linear layer wins over a list
    linear = f.get("target_linear")
    if linear is not None and linear.value:
        out["targets"] = Value(c.targets("all"), linear.source, linear.priority)   # find_all_linear_names' leaf names
    # parallelism: DeepSpeed ZeRO or FSDP, their offload
    ds = any(t == "deepspeed" for _, t in reading.files) or ("ds_stage" in f and f["ds_stage"].priority > 0) \
        or ("distributed" in f and f["distributed"].value == "DEEPSPEED")
    fsdp = f.get("fsdp")
    fsdp_on = fsdp is not None or ("distributed" in f and f["distributed"].value == "FSDP") or \
        (training == "axolotl" and any(t == "fsdp" for _, t in reading.files))
    if ds and fsdp_on:
        raise UserError(f"{_join(f.get('ds_stage'))} and {_join(fsdp) if fsdp else 'the FSDP settings'} "
                        "configure both DeepSpeed and FSDP; a run uses one")
    if ds and "ds_stage" in f:
        out["zero"] = f["ds_stage"]
        opt, par = f.get("ds_offload_optimizer"), f.get("ds_offload_param")
        if par is not None and par.value:
            out["offload"] = Value("optimizer+params", _join(opt, par))
        elif opt is not None and opt.value:
            out["offload"] = Value("optimizer", opt.source)
    elif fsdp_on:
        out["zero"] = fsdp if fsdp is not None else Value(3, "FSDP's default FULL_SHARD", 0)
        off = f.get("fsdp_offload")
        if off is not None and off.value:
            out["offload"] = Value("optimizer+params", off.source)
    if reading.files:
        out["stack"] = _stack(reading, "deepspeed" if ds else "fsdp" if fsdp_on else None)
        unsloth = f.get("use_unsloth")
        if training == "llamafactory" and unsloth is not None and unsloth.value and not (ds or fsdp_on):
            # LLaMA-Factory 0.9.5 model/model_utils/unsloth.py: FastLanguageModel.from_pretrained and get_peft_model
            # with use_gradient_checkpointing="unsloth" (the file's own rank, targets, dropout and quantization)
            from ..stacks import stacks

            out["stack"] = Value("unsloth", f"{_join(unsloth)}: {stacks()['unsloth']['title']}")
        if training == "trl" and out["stack"].value != "trl":  # under DeepSpeed or FSDP too
            from ..stacks import stacks

            out.setdefault("loss_impl", Value("trl", f"{TOOLS['trl'].title}: {stacks()['trl']['title']}", 0))
    if training == "axolotl" and method == "qlora" and not fsdp_on:
        # axolotl runs prepare_model_for_kbit_training, then casts the norms and embeddings back to the compute dtype
        # (loaders/model.py ModelLoader: needs_fa2_dtype is set for every adapter, should_convert unless QLoRA + FSDP)
        out["kbit_prep"] = Value("none", f"{TOOLS['axolotl'].title}: norms and embeddings cast back to 16 bits after "
                                         "prepare_model_for_kbit_training", 0)
    if training == "torchtune":
        out.update(_torchtune(f, reading, method, cli))
        return out
    if training == "litgpt":
        out.update(_litgpt(f, reading, method, cli))
        return out
    _packing(f, out, cli)
    policy = fsdp_on and out.get("stack") is not None and out["stack"].value == "fsdp" and out["zero"].value == 3
    out.update(_precision(f, training, method, ds, reading, policy, cli))
    return out


def _packing(f: dict[str, Value], out: dict[str, Value], cli: dict) -> None:
    """TRL's padding-free collator (``padding_free``, or ``packing`` with its default "bfd" strategy: trl 1.16
    sft_trainer.py:916) flattens the micro-batch into one row of per_device_train_batch_size × max_length tokens
    at most (:187-192; without packing max_length is not enforced: an upper bound), its position ids restarting
    at each sample: ``packing`` = that row."""
    free, packing, strategy = f.get("padding_free"), f.get("packing_on"), f.get("packing_strategy")
    on = [v for v in (free, packing) if v is not None and v.value and v.priority > 0]
    if packing in on and free not in on and strategy is not None and strategy.value == "wrapped":
        on = []   # wrapped packing: rows of max_length, one sequence each as attention sees it (not padding-free)
    if not on or "packing" in cli:
        return
    batch, seq = (cli.get(k) or (out[k].value if k in out else 1) for k in ("batch", "seq"))
    source = _join(*on, out.get("batch"), out.get("seq")) + " (one padding-free row)"
    out["packing"] = out["seq"] = Value(batch * seq, source)
    out["batch"] = Value(1, source)
    for k in ("batch", "seq"):
        cli.pop(k, None)


def _stack(reading: Reading, parallel: str | None) -> Value:
    """The stack a training file implies: axolotl, LLaMA-Factory and the Trainer run transformers' Trainer
    (``hf``), TRL its SFTTrainer (``trl``: the Trainer with TRL's fused LM head); a DeepSpeed or FSDP run takes
    the stack of that name where symvram has one, else ``hf``/``trl`` with the ZeRO stage and offload read from
    the files.

    >>> _stack(Reading(files=[("run.yml", "axolotl")]), None).source
    "axolotl 0.19: runs transformers' Trainer"
    """
    from ..stacks import stacks

    name = (reading.primary or reading.files[0])[1]
    tool = TOOLS[name].title
    if parallel in stacks():
        return Value(parallel, f"{tool}: {stacks()[parallel]['title']}", 0)
    how = {"deepspeed": " with DeepSpeed (ZeRO from its config)", "fsdp": " with FSDP (ZeRO-3 from its config)"}
    if name in ("torchtune", "litgpt"):
        return Value(name, f"{tool}: {stacks()[name]['title']}", 0)
    if name == "trl":
        return Value("trl", f"{tool}: {stacks()['trl']['title']}{how.get(parallel, '')}", 0)
    return Value("hf", f"{tool}: runs transformers' Trainer{how.get(parallel, '')}", 0)


def _torchtune(f: dict[str, Value], reading: Reading, method: str, cli: dict) -> dict[str, Value]:
    """A torchtune recipe's LoRA targets, dtype and optimizer. Its LoRA modules are ``lora_attn_modules`` plus
    w1, w2, w3 with ``apply_lora_to_mlp``; ``dtype`` is the whole model's (adapters and, through torch's optimizers,
    their states too: recipes/lora_finetune_single_device.py:431, :479-481), fp32 when the file is silent
    (``training.get_dtype(None)``); the optimizer is its ``_component_`` with ``fused`` / ``foreach``.

    >>> f = {"lora_attn_modules": Value(("q_proj", "v_proj"), "r.yml:model.lora_attn_modules", 2, "r.yml",
    ...                                 "model.lora_attn_modules"), "lora_mlp": Value(True, "r.yml:x", 2, "r.yml", "x")}
    >>> _torchtune(f, Reading(files=[("r.yml", "torchtune")]), "lora", {"seq": 1024})["targets"].value
    ('q_proj', 'v_proj', 'gate_proj', 'up_proj', 'down_proj')
    """
    out: dict[str, Value] = {}
    if "seq" not in f and not cli.get("seq"):   # max_seq_len: null (the recipes' own): no truncation, each batch padded to its longest sample
        reading.warnings.append(f"{reading.primary[0]}: tokenizer.max_seq_len is not set: torchtune pads each batch to "
                                "its longest sample; estimated at symvram's default length (pass --seq)")
    attn, mlp = f.get("lora_attn_modules"), f.get("lora_mlp")
    if method != "full" and attn is not None:
        out["targets"] = Value(attn.value + (c.TORCHTUNE_MLP if mlp is not None and mlp.value else ()), _join(attn, mlp))
    dtype = f.get("model_dtype")
    out["dtype"] = dtype if dtype is not None else Value("fp32", f"{TOOLS['torchtune'].title}: no dtype key "
                                                                 "(training.get_dtype(None) is fp32)", 0)
    out.update(_torch_optimizer(f))
    return out


def _torch_optimizer(f: dict[str, Value]) -> dict[str, Value]:
    """The optimizer a recipe names by class (torchtune's ``_component_``, LitGPT's ``class_path``) with its ``fused``
    / ``foreach`` keys: torch's fused or foreach as given, foreach on CUDA by default; bitsandbytes' its own."""
    out: dict[str, Value] = {}
    optim = f.get("optim")
    if optim is not None:
        optimizer, impl, eight_bit, paged = OPTIMIZERS[optim.value]
        if optim.value in BNB_ADAMW:
            optimizer = BNB_ADAMW[optim.value]
        fused, foreach = f.get("optim_fused"), f.get("optim_foreach")
        if not (eight_bit or optim.value in BNB_ADAMW):
            impl = "fused" if fused and fused.value else "forloop" if foreach and foreach.value is False else "foreach"
        out["optimizer"] = Value(optimizer, optim.source, optim.priority)
        out["optimizer_impl"] = Value(impl, _join(optim, fused, foreach), optim.priority)
        if eight_bit:
            out["state_dtype"] = Value("int8", optim.source, optim.priority)
    return out


def _litgpt(f: dict[str, Value], reading: Reading, method: str, cli: dict) -> dict[str, Value]:
    """A LitGPT finetune file's LoRA targets, dtype and optimizer: the lora_* switches on (their defaults
    finetune/lora.py:59-64) name the targets (``scenario.LITGPT_LORA``); ``precision`` is Fabric's (bf16-true converts
    the whole module, adapters and their AdamW states too; a silent file gets get_default_supported_precision's
    bf16-mixed, utils.py:363-380); the optimizer is torch's class (instantiate_torch_optimizer, utils.py:636-664).

    >>> v = lambda x: Value(x, "f.yml:k", 2, "f.yml", "k")
    >>> out = _litgpt({"lora_query": v(True), "lora_mlp": v(True), "precision": v(("bf16", "none"))},
    ...               Reading(files=[("f.yml", "litgpt")]), "lora", {"seq": 512})
    >>> out["targets"].value, out["dtype"].value, out["autocast"].value
    (('q_proj', 'gate_proj', 'up_proj', 'down_proj'), 'bf16', 'none')
    """
    from ..scenario import LITGPT_LORA

    out: dict[str, Value] = {}
    if "seq" not in f and not cli.get("seq"):
        reading.warnings.append(f"{reading.primary[0]}: train.max_seq_length is not set: LitGPT trains at the longest "
                                "sample of the data (finetune/lora.py:304); estimated at symvram's default length "
                                "(pass --seq)")
    if method != "full":
        on = [f[k] for k in LITGPT_LORA if k in f and f[k].value]
        if not on:
            raise UserError(f"{reading.primary[0]}: every lora_* switch is off: LitGPT's LoRA would train no adapter")
        out["targets"] = Value(tuple(t for k in LITGPT_LORA if k in f and f[k].value for t in LITGPT_LORA[k]),
                               _join(*on))
    precision = f.get("precision")
    if precision is not None:
        shown = f"{precision.source} (LitGPT's default bf16-mixed)" if precision.priority == 0 else precision.source
        dtype, autocast = precision.value
        out["dtype"] = Value(dtype, shown, precision.priority)
        out["autocast"] = Value(autocast, shown, precision.priority)
    out.update(_torch_optimizer(f))
    return out


def _precision(f: dict[str, Value], training: str, method: str, ds: bool, reading: Reading,
               fsdp_policy: bool = False, cli: dict | None = None) -> dict[str, Value]:
    """bf16/fp16, the tool's way of loading the model, DeepSpeed and the optimizer → the recipe.

    Trainer AMP (no DeepSpeed): autocast in the compute dtype; PEFT keeps adapters in fp32
    (``autocast_adapter_dtype``); torch optimizers keep states in the parameter's dtype; no master.
    axolotl and LLaMA-Factory load the base in the compute dtype (LLaMA-Factory upcasts trainable
    parameters to fp32 unless ``pure_bf16``; with neither flag it infers bf16 and runs without AMP);
    TRL's SFTTrainer loads fp32 unless ``model_init_kwargs`` says otherwise, and a plain Trainer's
    model is taken as fp32 (full fine-tuning with fp16 too: fp16 weights cannot train without a
    master copy). DeepSpeed with bf16/fp16 casts the model to 16-bit and keeps an fp32 master and
    fp32 optimizer states. Under FSDP2 full sharding (``fsdp_policy``) the Trainer's 16-bit compute on
    fp32 weights is FSDP's MixedPrecisionPolicy rather than autocast. torch's optimizers keep their states in the
    trained weights' dtype: the one given on the command line (``cli``: --dtype, --adapter-dtype) where given.
    """
    cli = cli or {}
    bf16, fp16, pure = f.get("bf16"), f.get("fp16"), f.get("pure_bf16")
    top = max((v.priority for v in (bf16, fp16) if v is not None), default=0)
    bf16, fp16 = (v if v is not None and v.priority == top else None for v in (bf16, fp16))  # a file over accelerate
    if bf16 and fp16 and bf16.value and fp16.value:
        raise UserError(f"{bf16.source} and {fp16.source} are both true: choose bf16 or fp16")
    pure_on = pure is not None and pure.value
    compute = "bf16" if (bf16 and bf16.value) or pure_on else "fp16" if fp16 and fp16.value else "fp32"
    src = _join(bf16, fp16, pure)
    lora = method in ("lora", "qlora")
    out: dict[str, Value] = {}
    optim = f.get("optim")
    name = optim.value if optim else "adamw_torch"
    known = OPTIMIZERS.get(name.lower())
    if known is None:
        reading.warnings.append(f"{optim.source} = {name}: this optimizer is not modelled; estimated as torch AdamW")
        known = ("adamw", "foreach", False, False)
    optimizer, impl, eight_bit, paged = known
    if optimizer == "adamw" and name.lower() in BNB_ADAMW:  # bitsandbytes' AdamW8bit / PagedAdamW8bit / 32bit
        optimizer, paged = BNB_ADAMW[name.lower()], False
    if paged:
        reading.warnings.append(f"{optim.source} = {name}: not modelled yet ({PENDING['paged_optimizer'][1]}); "
                                "estimated as resident on the GPU")
    if optim:
        out["optimizer"] = Value(optimizer, optim.source, optim.priority)
        out["optimizer_impl"] = Value(impl, optim.source, optim.priority)
    if pure_on:
        dtype = adapter = "bf16"
        autocast, master, why = "none", "none", "bf16, no AMP"
    elif ds and compute != "fp32":
        dtype = adapter = compute
        autocast, master, why = "none", "fp32", "DeepSpeed"
    else:
        model_dtype, why = f.get("model_dtype"), "Trainer AMP"
        if training == "llamafactory" and compute == "fp32":
            dtype = "bf16" if lora else "fp32"  # no flag: the base loads in the inferred dtype, no AMP
            why = "LLaMA-Factory infers bf16, no AMP"
        elif method == "qlora" or (lora and training in ("axolotl", "llamafactory")) or \
                (training == "axolotl" and compute != "fp16"):
            dtype = compute
        elif training == "llamafactory":
            dtype = "fp32"  # full: trainable parameters upcast to fp32
        elif fsdp_policy and compute != "fp32":
            # accelerate 1.15 fsdp2_prepare_model (utils/fsdp_utils.py:814-820): with mixed precision on, every
            # trainable parameter is upcast to fp32 before fully_shard, whatever dtype the model was loaded in
            dtype, src = "fp32", _join(bf16, fp16, f.get("model_dtype"))
        else:
            dtype = model_dtype.value if model_dtype else "fp32"
            src = _join(bf16, fp16, model_dtype)
            if (model_dtype is None or model_dtype.priority == 0) and "dtype" not in cli:   # never a silent fp32 base
                how = ("TRL loads the model in fp32 unless dtype (or model_init_kwargs.dtype) says otherwise"
                       if training == "trl" else "the Trainer's arguments do not say the model's dtype; "
                       "from_pretrained loads fp32 unless your code passes dtype")
                reading.warnings.append(f"{(reading.primary or reading.files[0])[0]}: no model dtype: {how}; "
                                        "estimated with fp32 weights (pass --dtype bf16 if it loads bf16)")
        if method == "qlora" and dtype == "fp32":
            dtype = "bf16" if compute == "fp32" else compute
        adapter = "fp32"
        autocast = compute if compute != "fp32" else "none"
        master = "none"
        if fsdp_policy and training == "axolotl" and dtype != "fp32":
            # axolotl replaces accelerate's fsdp2_prepare_model with its own, which has no fp32 upcast
            # (monkeypatch/accelerate/fsdp2.py patch_accelerate_fsdp2): the bf16-loaded parameters are sharded as they are
            why = "axolotl's fsdp2_prepare_model keeps the loaded dtype"
        if fsdp_policy and dtype == "fp32" and autocast != "none":
            # FSDP2 full sharding: the 16-bit compute is its MixedPrecisionPolicy on the fp32 shards (accelerate
            # also autocasts, which changes nothing once the gathered parameters are 16-bit)
            out["mp_policy"] = Value(autocast, f"{src} (FSDP2 MixedPrecisionPolicy)")
            autocast, why = "none", "accelerate upcasts to fp32; FSDP2 MixedPrecisionPolicy, not autocast"
    trainable = (cli.get("adapter_dtype") or adapter) if lora else (cli.get("dtype") or dtype)
    state = "int8" if eight_bit else ("fp32" if master == "fp32" else trainable)
    shown = src if src != "symvram default" else f"{TOOLS[training].title if training in TOOLS else training} default"
    shown = f"{shown} ({why})"
    out["dtype"] = Value(dtype, shown)
    out["autocast"] = Value(autocast, shown)
    out["master"] = Value(master, shown)
    if lora:
        out["adapter_dtype"] = Value(adapter, shown if adapter != "fp32" else f"{shown}, PEFT's fp32 adapters")
    out["state_dtype"] = Value(state, optim.source if eight_bit else shown)
    return out

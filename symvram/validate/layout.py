"""Any model's parameter layout, read from transformers' own model built on the meta device, and written as a
family-entry draft (``symvram family-draft CONFIG``).

For a ``model_type`` no entry describes, the model's decoder layer is read parameter by parameter: each
``nn.Linear`` becomes a linear (``d_out``, ``d_in`` matched to the config's fields, its bias), each 1-D weight of a
norm module a norm, every other parameter (fused 3-D experts, a bare router matrix, per-head sinks) a
``moe_weights`` entry with its count. The draft names the layer's module classes no shipped family runs
(``unmodelled``): the ledger refuses its activation block by those names, and counts its parameter side (weights,
LoRA adapters for the same module names PEFT matches, gradients, optimizer states, FSDP shards) exactly.
Needs the validate extra (torch, transformers); nothing here is on the estimate's path.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

import torch

from ..ledger.architecture import family, family_names

# config.json fields → registry symbols, in the order a shape is matched to them (the first match wins)
DIM_KEYS = {
    "hidden": ("hidden_size", "required"), "intermediate": ("intermediate_size", "required"),
    "layers": ("num_hidden_layers", "required"), "heads": ("num_attention_heads", "required"),
    "kv_heads": ("num_key_value_heads", "heads"), "head_dim": ("head_dim", "hidden/heads"),
    "vocab": ("vocab_size", "required"), "experts": ("num_experts|num_local_experts|n_routed_experts", "required"),
    "experts_per_token": ("num_experts_per_tok", "required"), "moe_intermediate": ("moe_intermediate_size", "required"),
}
BASE_DIMS = ("hidden", "intermediate", "layers", "heads", "vocab")    # the dims every model spec holds
ATTENTION_ORDER = ("heads*head_dim", "kv_heads*head_dim", "hidden")   # a projection of the attention module
OTHER_ORDER = ("hidden", "intermediate", "moe_intermediate", "2*intermediate", "2*moe_intermediate", "experts")
BIAS_SWITCHES = ("attention_bias", "mlp_bias", "use_bias", "bias")      # config switches that give linears a bias
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


@dataclass
class Layout:
    """What the meta model holds: the config's dims, layer 0's parameters by kind, what lies outside the layers,
    the layers' module classes, and every parameter's numel (the count the draft must reproduce)."""

    model_type: str
    model_class: str
    source: str
    dims: dict[str, int]
    dim_keys: dict[str, str] = field(default_factory=dict)              # a symbol's config.json key, where aliased
    linears: list[dict] = field(default_factory=list)
    norms: list[dict] = field(default_factory=list)
    others: list[dict] = field(default_factory=list)
    tied: bool = False
    outside: dict[str, tuple[int, ...]] = field(default_factory=dict)   # parameters outside the layers
    differing_layers: list[int] = field(default_factory=list)           # layers whose shapes differ from layer 0's
    switches: dict[str, bool] = field(default_factory=dict)             # the config's bias switches, as read
    switch_defaults: dict[str, bool] = field(default_factory=dict)      # and the config class's defaults of them
    unmodelled: list[str] = field(default_factory=list)
    total_params: int = 0
    activation: str = "silu"


def read_config(path_or_dict) -> dict:
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict)
    from pathlib import Path

    from ..presets import MAX_CONFIG_BYTES
    from ..errors import UserError

    path = Path(path_or_dict)
    path = path / "config.json" if path.is_dir() else path
    try:
        data = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
        cfg = json.loads(data)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read a config.json ({e})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise UserError(f"{path}: a config.json with a model_type is expected")
    return cfg


def causal_lm_auto(hf_cfg):
    """The auto class that builds ``hf_cfg``'s causal LM: AutoModelForCausalLM, or for a text model registered only as
    the pretraining head (transformers 5.24 lists mistral4, Mistral Small 4's text model, under
    MODEL_FOR_PRETRAINING_MAPPING_NAMES alone: models/auto/modeling_auto.py:729) AutoModelForPreTraining."""
    import transformers

    auto, pretraining = transformers.AutoModelForCausalLM, transformers.AutoModelForPreTraining
    if type(hf_cfg) not in auto._model_mapping and type(hf_cfg) in pretraining._model_mapping \
            and pretraining._model_mapping[type(hf_cfg)].__name__.endswith("ForCausalLM"):
        return pretraining
    return auto   # which refuses what it cannot build (an encoder-decoder's pretraining head is no causal LM)


def meta_model(cfg: dict):
    """transformers' causal-LM model of ``cfg`` on the meta device (no storage)."""
    import transformers

    from ..errors import UserError

    try:
        hf_cfg = transformers.AutoConfig.for_model(**cfg)
        with torch.device("meta"):
            return causal_lm_auto(hf_cfg).from_config(hf_cfg)
    except Exception as e:  # noqa: BLE001 - transformers' config validators raise many kinds; one line either way
        raise UserError(f"transformers cannot build model_type {cfg.get('model_type')!r} as a causal LM: "
                        f"{' '.join(str(e).split())[:200]}") from None


def _known_modules() -> set[str]:
    """The transformers modules whose classes the families model (their ``source`` files; a draft that still lists
    ``unmodelled`` classes models none)."""
    out = set()
    for name in family_names():
        if not family(name).unmodelled:
            src = family(name).source.split()[-1]          # "transformers models/qwen3/modeling_qwen3.py"
            out.add("transformers." + src.removesuffix(".py").replace("/", "."))
    return out


def _layers(model, n: int):
    """The decoder layers: the ModuleList of num_hidden_layers modules."""
    from ..errors import UserError

    found = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n), None)
    if found is None:
        raise UserError(f"{type(model).__name__} holds no list of its {n} decoder layers: not a decoder family")
    return found


def _shapes(layer) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((name, tuple(p.shape)) for name, p in layer.named_parameters())


def read_layout(cfg: dict) -> Layout:
    """Layer 0's parameters of the meta model, by kind (see the module docstring)."""
    model = meta_model(cfg)
    text = model.config
    dims = {}
    dim_keys = {}
    aliases = getattr(type(text), "attribute_map", {})   # GPT-2's n_embd is read as hidden_size
    for symbol, (keys, default) in DIM_KEYS.items():
        key = next((k for k in keys.split("|") if getattr(text, k, None) is not None), None)
        if key is not None and isinstance(getattr(text, key), int):
            dims[symbol] = getattr(text, key)
            if key in aliases:
                dim_keys[symbol] = aliases[key]
    dims.setdefault("kv_heads", dims.get("heads", 1))
    if "head_dim" not in dims and "hidden" in dims and "heads" in dims:
        dims["head_dim"] = dims["hidden"] // dims["heads"]
    layers = _layers(model, dims["layers"])
    layer = layers[0]
    src_module = type(layer).__module__
    out = Layout(model_type=cfg["model_type"], model_class=type(model).__name__,
                 source="transformers " + src_module.removeprefix("transformers.").replace(".", "/") + ".py",
                 dims=dims, dim_keys=dim_keys, total_params=sum(p.numel() for p in model.parameters()),
                 activation=str(getattr(text, "hidden_act", "silu")))
    base = _shapes(layer)
    out.differing_layers = [i for i, other in enumerate(layers) if i and _shapes(other) != base]
    shorts = [n.rpartition(".")[2] for n, _ in layer.named_modules() if n]
    for name, p in layer.named_parameters():
        owner_name, _, leaf = name.rpartition(".")
        owner = layer.get_submodule(owner_name) if owner_name else layer
        short = owner_name.rpartition(".")[2]
        if shorts.count(short) > 1:
            short = owner_name   # two modules of the layer share the name (GPT-2's c_proj): its path, as PEFT matches it
        in_attention = any("Attention" in type(layer.get_submodule(".".join(owner_name.split(".")[:i]))).__name__
                           for i in range(1, owner_name.count(".") + 2))
        conv1d = type(owner).__name__ == "Conv1D"   # transformers.pytorch_utils.Conv1D (GPT-2): a linear, weight (in, out)
        if isinstance(owner, torch.nn.Linear) or conv1d:
            if leaf == "weight":
                d_out, d_in = reversed(p.shape) if conv1d else p.shape
                out.linears.append(dict(name=short, d_out=d_out, d_in=d_in, attention=in_attention,
                                        bias=owner.bias is not None))
        elif p.dim() == 1 and "norm" in type(owner).__name__.lower():
            out.norms.append(dict(name=short if leaf == "weight" else f"{short}.{leaf}", width=p.shape[0],
                                  cls=type(owner).__name__))
        else:
            shape = tuple(p.shape)
            count, rest = (shape[0], shape[1:]) if len(shape) == 3 else (1, shape)
            d_out, d_in = (rest + (1,))[:2]
            own = {"weight": short, "bias": f"{short}_bias"}.get(leaf, leaf)   # a router's bare weight: "gate"
            out.others.append(dict(name=own, d_out=d_out, d_in=d_in, count=count, attention=in_attention))
    names = {n for n, _ in model.named_parameters()}
    prefix = next(n for n, m in model.named_modules() if m is layers)
    out.outside = {n: tuple(p.shape) for n, p in model.named_parameters() if not n.startswith(prefix + ".")}
    out.tied = not any(n.endswith("lm_head.weight") for n in names)
    out.switches = {k: getattr(text, k) for k in BIAS_SWITCHES if isinstance(getattr(text, k, None), bool)}
    defaults = type(text)()   # the config class's own defaults: what a config.json without the switch means
    out.switch_defaults = {k: getattr(defaults, k, True) for k in out.switches}
    known = _known_modules()
    out.unmodelled = sorted({type(m).__name__ for m in layer.modules()
                             if not _modelled(type(m), known, out.activation in ACTIVATIONS)})
    return out


TORCH_MODELLED = (torch.nn.Linear, torch.nn.Dropout, torch.nn.Identity, torch.nn.ModuleList, torch.nn.ModuleDict,
                  torch.nn.SiLU)


def _modelled(cls: type, known: set[str], activation_known: bool) -> bool:
    """Whether a module class is one whose saved tensors the ledger models: a class of a shipped family's file,
    torch's linear, dropout and container modules, an activation the families model."""
    if cls.__module__ == "transformers.activations":
        return activation_known
    if cls.__module__.startswith("torch."):
        return issubclass(cls, TORCH_MODELLED)
    return cls.__module__ in known


def _match(n: int, dims: dict[str, int], order: tuple[str, ...]) -> str:
    """The first expression over the config's dims that equals ``n`` (named orders first, then any product of two
    symbols), else the integer itself."""
    from ..ledger.architecture import expr

    def value(text):
        e = expr(text)
        free = {s.name for s in e.free_symbols}
        return int(e.xreplace({s: dims[s.name] for s in e.free_symbols})) if free <= set(dims) else None

    names = [k for k in dims if k not in ("layers", "experts_per_token")]
    pairs = [f"{a}*{b}" for a, b in itertools.combinations_with_replacement(names, 2)]
    multiples = [f"{k}*{a}" for k in (2, 3, 4) for a in names]   # fused q, k, v (GPT-2's c_attn: 3·hidden)
    for text in (*order, *names, *multiples, *pairs):
        if value(text) == n:
            return text
    return str(n)


def _bias_switch(switches: dict[str, bool], attention: bool) -> tuple[str, bool]:
    """The config switch that turns a linear's bias on: the first of BIAS_SWITCHES the config sets true (the
    attention's own first), else a switch of the draft's own, on by default."""
    order = BIAS_SWITCHES if attention else BIAS_SWITCHES[1:] + BIAS_SWITCHES[:1]
    key = next((k for k in order if switches.get(k) is True), None)
    return (key, False) if key else ("attention_bias" if attention else "mlp_bias", True)


def _key(name: str) -> str:
    """A TOML key: bare where it may be, else quoted."""
    return name if name.replace("_", "").replace("-", "").isalnum() else json.dumps(name)


def undescribed(lay: Layout) -> dict[str, tuple[int, ...]]:
    """Parameters outside the layers that an entry cannot describe: all but one (V, h) embedding, a (V, h) lm_head
    unless tied, and one final norm weight of the hidden width (a final norm's bias, position embeddings …)."""
    h, V = lay.dims["hidden"], lay.dims.get("vocab")
    expected = [(V, h)] + ([] if lay.tied else [(V, h)]) + [(h,)]
    out = {}
    for name, shape in lay.outside.items():
        if shape in expected:
            expected.remove(shape)
        else:
            out[name] = shape
    return out


def draft_entry(cfg: dict, layout: Layout | None = None, notes: tuple[str, ...] = ()) -> str:
    """A family entry (TOML) describing ``cfg``'s parameter layout: the start of a new family; ``notes``
    (comment lines) go under its header."""
    lay = layout or read_layout(cfg)
    dims = lay.dims
    q = json.dumps
    lines = [
        f"# Drafted by `symvram family-draft` from transformers' {lay.model_class} (model_type {lay.model_type!r})",
        "# built on the meta device: the parameter layout is the model's; the reads/at sites and the expressions",
        "# are matched by name and value (check them). Its activations are refused until the classes under",
        "# `unmodelled` are modelled (then remove that line): see docs/adding-a-family.md.",
        *notes,
    ]
    if extra := undescribed(lay):
        lines.append("# NOTE: not described by this entry (outside the layers): "
                     + ", ".join(f"{n} {list(shape)}" for n, shape in extra.items()))
    if lay.differing_layers:
        lines.append(f"# NOTE: layers {lay.differing_layers} differ from layer 0 (this draft describes layer 0 only)")
    moe = any(o["count"] > 1 for o in lay.others)
    act = ACTIVATIONS.get(lay.activation, "silu")
    lines += [
        f"description = {q(lay.model_type + ' (drafted from transformers ' + lay.model_class + ')')}",
        f"model_types = [{q(lay.model_type)}]",
        f"source = {q(lay.source)}",
        'norm = "rms"' + (f"   # the model's norm: {lay.norms[0]['cls']}" if lay.norms else ""),
        f'mlp = {{kind = "{"moe" if moe else "gated"}", activation = "{act}"}}'
        + (f"   # hidden_act {lay.activation!r}" if act != lay.activation else ""),
        'attention = {kernels = ["sdpa", "eager"], default = "sdpa"}',
        f"unmodelled = [{', '.join(q(c) for c in lay.unmodelled)}]",
        "", "[dims]",
    ]
    for symbol, (keys, default) in DIM_KEYS.items():
        if symbol in dims:
            key = lay.dim_keys.get(symbol, keys)
            if key not in cfg and default == "required":   # transformers' default for this config: the value read
                lines.append(f"{symbol} = [{q(key)}, {q(str(dims[symbol]))}]   # absent here: transformers' value")
            else:
                lines.append(f"{symbol} = [{q(key)}, {q(default)}]")
        elif symbol in BASE_DIMS:   # every spec has one; this model's shapes are matched without it
            lines.append(f"{symbol} = [{q(keys)}, \"1\"]   # not in this config: no shape below uses it")
    options = {}
    linear_lines = []
    for i, m in enumerate(lay.linears):
        side = [x for x in lay.linears if x["attention"] == m["attention"]]
        last = m is side[-1] and len(side) > 1          # the block's output projection (o_proj, down_proj) is built last
        group = ("attn_out" if last else "attn_in") if m["attention"] else ("mlp_act" if last else "mlp_in")
        inner = ATTENTION_ORDER if m["attention"] else OTHER_ORDER[1:] + OTHER_ORDER[:1]   # widths inside the block
        d_in_order, d_out_order = (inner, OTHER_ORDER) if last else (OTHER_ORDER, inner)
        bias = ""
        if m["bias"]:
            switch, default = _bias_switch(lay.switches, m["attention"])
            options[switch] = (default, lay.switch_defaults.get(switch, True))
            bias = f", bias = {q(switch)}"
        linear_lines.append(f"{_key(m['name'])} = {{d_in = {q(_match(m['d_in'], dims, d_in_order))}, "
                            f"d_out = {q(_match(m['d_out'], dims, d_out_order))}, reads = \"{group}\"{bias}}}")
    lines += ["", "[options]", f"tie_word_embeddings = {str(lay.tied).lower()}"]
    lines += [f"{k} = {str(on).lower()}" + ("   # not a config switch: transformers builds this bias" if own else "")
              for k, (own, on) in options.items()]
    lines += ["", "[linears]", *linear_lines, "", "[norms]"]
    for n in lay.norms:
        at = {"input_layernorm": "layer_in", "q_norm": "q", "k_norm": "k"}.get(n["name"], "resid")
        rows = ""
        if at in ("q", "k") and n["width"] == dims.get("head_dim"):
            rows = f", rows = \"{'heads' if at == 'q' else 'kv_heads'}\""
        after = f", after = \"{at}_proj\"" if at in ("q", "k") else ""
        lines.append(f"{_key(n['name'])} = {{at = \"{at}\", width = {q(_match(n['width'], dims, ATTENTION_ORDER if at in 'qk' else OTHER_ORDER))}{rows}{after}}}")
    if lay.others:
        lines += ["", "# parameters that are not nn.Linear (fused experts, a bare router, per-head vectors): count copies each",
                  "[moe_weights]"]
        for o in lay.others:
            order = ATTENTION_ORDER if o["attention"] else OTHER_ORDER
            group = "mlp_in" if o["d_in"] == dims["hidden"] or o["d_in"] == 1 else "mlp_act"
            lines.append(f"{_key(o['name'])} = {{d_in = {q(_match(o['d_in'], dims, order))}, d_out = "
                         f"{q(_match(o['d_out'], dims, order))}, reads = \"{group}\", "
                         f"count = {q(_match(o['count'], dims, ('experts',)) if o['count'] > 1 else '1')}}}")
    names = [m["name"] for m in lay.linears]
    lines += ["", "# LoRA target groups: PEFT matches target_modules by these module names", "[targets]",
              f"all-linear = [{', '.join(q(n) for n in names)}]"]
    attn = [m["name"] for m in lay.linears if m["attention"]]
    mlp = [m["name"] for m in lay.linears if not m["attention"]]
    if attn:
        lines.append(f"attention = [{', '.join(q(n) for n in attn)}]")
    if mlp:
        lines.append(f"mlp = [{', '.join(q(n) for n in mlp)}]")
    return "\n".join(lines) + "\n"


def parameter_side(cfg: dict, text: str, rank: int = 16, gpus: int = 8) -> tuple[list[str], dict]:
    """The drafted entry's parameter side through the ledger (its SymPy terms, evaluated), beside what the meta
    model and PEFT count: comment lines for the draft, and the numbers (``params``, ``lora_params``, their
    transformers/PEFT counterparts, and each setting's term bytes on one GPU and per GPU under FSDP2 ZeRO-3).

    The entry is registered in this process under ``cfg``'s model_type."""
    from ..evaluate import exact_function
    from ..ledger.architecture import register_family
    from ..ledger.sharding import divide_terms
    from ..ledger.weights import base_terms, definitions, trainable_terms
    from ..presets import spec_from_config
    from ..scenario import Scenario
    from ..symbols import sym
    from ..units import fmt_bytes

    fam = register_family(cfg["model_type"], text)
    spec = spec_from_config(cfg, name=cfg["model_type"], kind="config", source="family-draft")
    lora_targets = ",".join(fam.target_sets["all-linear"])
    settings = {"full": dict(method="full")}
    if lora_targets:   # a model with no linear layer has no LoRA side
        settings["lora"] = dict(method="lora", rank=rank, targets=lora_targets)
    numbers: dict = {"terms": {}}
    lines = []
    for label, kw in settings.items():
        sc = Scenario.create(spec, stack="hf", **kw)
        s = sc.structure
        terms = base_terms(s) + trainable_terms(s)
        shards = divide_terms(terms, 3)
        f = exact_function(tuple(definitions(s)), tuple(t.expr for t in terms + shards) + (sym("P"), sym("P_train")))
        values = {**sc.values(), "gpus": gpus}
        out = f(values)
        one, per_gpu = out[:len(terms)], out[len(terms):2 * len(terms)]
        numbers["params"], numbers[f"{label}_trainable"] = int(out[-2]), int(out[-1])
        numbers["terms"][label] = {t.key: (int(a), int(b)) for t, a, b in zip(terms, one, per_gpu)}
        what = (("full fine-tuning" if label == "full" else f"LoRA r={rank} on all-linear")
                + f" ({sc.dtype} weights, {sc.optimizer} states in {sc.state_dtype}, hf stack)")
        lines.append(f"# {what}: " + ", ".join(f"{t.key} {fmt_bytes(int(a))}" for t, a in zip(terms, one))
                     + f"; FSDP2 ZeRO-3 over {gpus} GPUs, per GPU: {fmt_bytes(int(sum(per_gpu)))}")
    model = meta_model(cfg)
    numbers["meta_params"] = sum(p.numel() for p in model.parameters())
    head = [f"# parameters: {numbers['params']:,} from this entry; {numbers['meta_params']:,} in transformers' model"]
    if "lora" in settings:
        numbers["peft_lora_params"] = _peft_trainable(model, fam.target_sets["all-linear"], rank)
        head.append(f"# LoRA r={rank} all-linear trainable: {numbers['lora_trainable']:,} from this entry; "
                    f"{numbers['peft_lora_params']:,} as PEFT builds it")
    return head + lines, numbers


def _peft_trainable(model, targets, rank: int) -> int:
    import warnings

    import peft

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=list(targets), lora_dropout=0.0))
    return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)

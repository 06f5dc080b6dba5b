"""The library versions an estimate follows: the installed ones, read from their metadata without importing
them (``importlib.metadata``), or those asked for (``--versions bitsandbytes=0.42.0,...``), else the
versions the ledger was modelled from.

Where a version changes what is saved, the mechanism of that version applies, tied to the range in which it
holds (``MECHANISMS``); each names its tagged source.

>>> parse_versions("bitsandbytes=0.42.0, torch=2.5.1")
(('bitsandbytes', '0.42.0'), ('torch', '2.5.1'))
>>> older("0.42.0", "0.43.3"), older("0.50.2", "0.43.3"), older("0.43.3", "0.43.3")
(True, False, False)
"""
from __future__ import annotations

import re
from functools import cache
from importlib import metadata

from .errors import UserError

# the versions whose sources the ledger cites (README, docs/accuracy.md)
MODELLED = {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2", "bitsandbytes": "0.50.2", "trl": "1.16.0"}
PACKAGES = tuple(MODELLED)
_VERSION = re.compile(r"\d+(\.\d+){0,3}([.+-]?[A-Za-z0-9.]+)?")

# mechanism -> (package, the first version without it, what it does, the tagged source)
MECHANISMS = {
    "bnb_input_saved": ("bitsandbytes", "0.43.3",
                        "bitsandbytes' MatMul4Bit saves the 4-bit linear's input for backward (ctx.tensors = (A, B)); "
                        "from 0.43.3 it keeps (None, B)",
                        "bitsandbytes autograd/_functions.py MatMul4Bit.forward (0.43.2: ctx.tensors = (A, B); "
                        "0.50.2 lines 357-360: (None, B))"),
    "hf_shift_logits_copy": ("transformers", "4.49.0",
                             "the causal-LM loss shifts the logits, not the labels: "
                             "shift_logits = logits[..., :-1, :].contiguous(), an fp32 copy of b·(s − 1)·V; "
                             "from 4.49.0 the labels are padded and shifted instead",
                             "transformers 4.44.2 models/llama/modeling_llama.py:1214, 4.45.0 :1221, 4.48.0 "
                             "loss/loss_utils.py:39 ForCausalLMLoss; 4.49.0 loss/loss_utils.py:39 "
                             "nn.functional.pad(labels, (0, 1))"),
    "hf_forward_logits_upcast": ("transformers", "4.45.0",
                                 "LlamaForCausalLM.forward upcasts the logits to fp32 whatever the labels "
                                 "(logits = logits.float()), so the outputs hold fp32 logits and the 16-bit ones "
                                 "are freed; from 4.45.0 only the loss upcasts, beside the 16-bit logits",
                                 "transformers 4.44.2 models/llama/modeling_llama.py:1209; 4.45.0 :1219 (under "
                                 "`if labels is not None`)"),
    "peft_adapters_follow_base": ("peft", "0.12.0",
                                  "LoRA's adapters take the base weight's floating dtype (a 16-bit base: 16-bit "
                                  "adapters; a 4-bit base is not floating, so QLoRA's stay fp32); from 0.12.0 "
                                  "get_peft_model(autocast_adapter_dtype=True) upcasts 16-bit adapters to fp32",
                                  "peft 0.11.1 tuners/lora/layer.py:128-129 (self.to(weight.device, "
                                  "dtype=weight.dtype)); 0.12.0 tuners/tuners_utils.py:316-357 _cast_adapter_dtype, "
                                  "peft_model.py:137"),
}


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.match(r"\d+(\.\d+)*", version).group(0).split("."))


def older(version: str, than: str) -> bool:
    """Whether ``version`` comes before ``than`` (release numbers only: 2.13.0+cpu is 2.13.0)."""
    a, b = _release(version), _release(than)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) < b + (0,) * (width - len(b))


def parse_versions(text: str | dict | tuple | None) -> tuple[tuple[str, str], ...]:
    """``--versions PKG=VERSION,...`` as sorted pairs; UserError names a malformed entry."""
    if not text:
        return ()
    items = text.items() if isinstance(text, dict) else (
        text if isinstance(text, tuple) else [p.partition("=")[::2] for p in str(text).split(",") if p.strip()])
    out = {}
    for name, version in items:
        name, version = str(name).strip().lower(), str(version).strip()
        if name not in MODELLED:
            raise UserError(f"--versions: unknown package {name!r}; expected PKG=VERSION with PKG one of "
                            f"{', '.join(PACKAGES)}")
        if not _VERSION.fullmatch(version):
            raise UserError(f"--versions {name}={version}: expected a version such as {MODELLED[name]}")
        out[name] = version
    return tuple(sorted(out.items()))


@cache
def installed() -> dict[str, str | None]:
    """The installed version of each package (None: not installed), read from its metadata, never imported."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def followed(asked: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The version of each package an estimate follows: asked for, else installed, else modelled."""
    chosen = dict(asked)
    return {name: chosen.get(name) or installed()[name] or MODELLED[name] for name in PACKAGES}


def applies(mechanism: str, asked: tuple[tuple[str, str], ...] = ()) -> bool:
    """Whether a version-dependent mechanism holds for the versions followed."""
    package, fixed_in, _, _ = MECHANISMS[mechanism]
    return older(followed(asked)[package], fixed_in)


def header(asked: tuple[tuple[str, str], ...] = (), packages: tuple[str, ...] = PACKAGES) -> str:
    """What every answer's header says of the versions it follows: each release of ``packages`` (asked for,
    installed, or, where not installed, the one modelled). A stack that runs its own model code (torchtune,
    LitGPT) follows torch and bitsandbytes only, and its title names its own release.

    >>> header((("bitsandbytes", "0.42.0"),)).startswith("follows torch")
    True
    >>> header(packages=("torch",)).count(",")
    0
    """
    chosen = dict(asked)
    parts = []
    for name, version in followed(asked).items():
        if name not in packages:
            continue
        release = ".".join(map(str, _release(version)))
        note = " asked" if name in chosen else "" if installed()[name] else " modelled, not installed"
        parts.append(f"{name} {release}" + (f" ({note.strip()})" if note else ""))
    return "follows " + ", ".join(parts)

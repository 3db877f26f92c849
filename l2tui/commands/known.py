"""``l2tui known``: the known kernels for this GPU (``harness.known``), and what a shape starts from.

    l2tui known                                  # this GPU's known kernels, by accumulator and shape
    l2tui known --shapes llama-3-8b --tokens 16  # what each of these shapes' tracks would time first
    l2tui known --gpu "NVIDIA H200"              # another GPU model's (no GPU needed)
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.known import GpuKey, KnownStore

NAME = "known"
HELP = "list the known kernels for this GPU (bundled winners + this machine's finished tracks)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", metavar="NAME", help="the GPU model, as NVML names it (default: this machine's GPU)")
    p.add_argument("--sms", type=int, default=None, help="its SM count (default: known for common models)")
    p.add_argument("--cuda", type=int, default=None, metavar="MAJOR", help="its CUDA major version (default: the driver's)")
    p.add_argument("--acc", choices=("f32", "f16"), default=None, help="only this accumulator")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="element type of the kernels (default fp16)")
    p.add_argument("--shapes", dest="known_shapes", action="append", metavar="SPEC",
                   help="show what each shape's track times first (its known kernel, else the nearest shapes')")
    p.add_argument("--tokens", default=None, metavar="LIST", help="token counts when --shapes names a model")
    p.add_argument("--tp", type=int, default=None, metavar="N", help="tensor-parallel degree when --shapes names a model")
    p.add_argument("--candidates", action="store_true", help="also list other GPU models' kernels (timed here, never a result here)")


def _gpu_key(args: argparse.Namespace) -> GpuKey:
    from harness.errors import ToolMissing
    from harness.gpuinfo import list_gpus
    from harness.known import KNOWN_SMS, GpuKey

    if args.gpu:
        key = GpuKey(args.gpu.strip(), args.sms or KNOWN_SMS.get(args.gpu.strip()), args.cuda)
        return key
    gpus = list_gpus()
    if not gpus:
        raise ToolMissing("no NVIDIA GPU found: name the model with --gpu (e.g. --gpu 'NVIDIA H200')")
    found = GpuKey.from_info(gpus[0].to_dict())
    if found is None:
        raise ToolMissing("cannot read this GPU's name: name the model with --gpu")
    return GpuKey(found.name, args.sms or found.sms, args.cuda or found.cuda_major)


def run(args: argparse.Namespace) -> int:
    from harness.known import KnownStore

    key = _gpu_key(args)
    store = KnownStore()
    try:
        return _show(args, key, store)
    except BrokenPipeError:   # `l2tui known | head`
        sys.stderr.close()
        return 0


def _show(args: argparse.Namespace, key: GpuKey, store: KnownStore) -> int:
    from harness.known import describe, family_usable, seed_kind
    from harness.models import parse_tokens
    from harness.shapes import resolve_shapes, shape_roles

    mine = store.results(key, args.acc, args.dtype)
    for line in store.problems:
        print(f"l2tui: warning: {line}", file=sys.stderr)
    layers: dict[str, int] = {}
    for k in mine.values():
        layers[k.layer] = layers.get(k.layer, 0) + 1
    per = ", ".join(f"{n} from {layer}" for layer, n in sorted(layers.items())) or "none"
    print(f"known {args.dtype} kernels for {key}: {len(mine)} ({per})")
    if args.known_shapes:
        tokens = parse_tokens(args.tokens) if args.tokens else None
        shapes = resolve_shapes(args.known_shapes, tokens=tokens, tp=args.tp)
        roles = shape_roles(args.known_shapes, tokens=tokens, tp=args.tp)
        for acc in [args.acc] if args.acc else ["f32"]:
            for s in shapes:
                seeds = store.seeds(s, acc, key, usable=family_usable(s, "sm_90a"), dtype=args.dtype)
                what = seed_kind(seeds, s, key)
                print(f"{str(s):<20} {acc}  {roles.get(s, '')[:40]:<40} {what}: "
                      + ", ".join(f"{k.name} ({k.shape}{'' if k.gpu.same_model(key) else ', ' + k.gpu.name})" for k in seeds))
        return 0
    for line in describe(mine.values()):
        print(line)
    if args.candidates:
        others = store.candidates(key, args.acc, args.dtype)
        print(f"candidates from other GPU models (timed here first, never a result here): {len(others)}")
        for line in describe(others):
            print(f"{line}  [{others[0].gpu.name if others else ''}]")
    return 0

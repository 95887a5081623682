"""Command line: ``python -m ggmlgrad demo [--epochs N] [--seed S] [--mode capture|graph|eager]``,
``python -m ggmlgrad info``, ``python -m ggmlgrad build [--optional] [--cuda|--vulkan|--metal]`` and
``python -m ggmlgrad bench [--quick] [--out DIR]`` (ggmlgrad beside torch and JAX: ggmlgrad/bench),
``python -m ggmlgrad port SCRIPT.py [-o OUT | --diff]`` (ggmlgrad/port.py)."""
from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ggmlgrad", description="ggmlgrad command line")
    sub = p.add_subparsers(dest="command", metavar="{demo,info,build,bench,port}")
    d = sub.add_parser("demo", help="train an MLP on the scikit-learn digits and report test accuracy")
    from .demo import DEFAULT_MODE, MODES   # demo imports numpy only at module level besides ggmlgrad
    d.add_argument("--epochs", type=int, default=15, help="training epochs (default 15)")
    d.add_argument("--seed", type=int, default=0, help="seed for the split, init and shuffles (default 0)")
    d.add_argument("--mode", choices=MODES, default=DEFAULT_MODE,
                   help=f"execution mode (default {DEFAULT_MODE})")
    d.add_argument("--batch-size", type=int, default=64, help="minibatch size (default 64)")
    sub.add_parser("info", help="print gg.info(): ggml version, library, devices, build, threads")
    sub.add_parser("build", help="build the fast ggml (this CPU's code, BLAS, vectorised activations) "
                                 "into this environment; `build --help` for options", add_help=False)
    sub.add_parser("bench", help="ggmlgrad eager/graph/captured beside torch and JAX: table, JSON, plots; "
                                 "`bench --help` for options", add_help=False)
    sub.add_parser("port", help="rewrite a PyTorch script's imports to ggmlgrad and list the torch names it uses "
                                "that ggmlgrad lacks; `port --help` for options", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["port"]:
        from .port import main as port_main
        return port_main(argv[1:])
    if argv[:1] == ["build"]:
        from .fastbuild import main as build_main   # imports no ggml: it may replace the libraries
        return build_main(argv[1:])
    if argv[:1] == ["bench"]:
        from .bench import main as bench_main
        return bench_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        if args.epochs < 1 or args.batch_size < 1:
            print("error: --epochs and --batch-size must be >= 1", file=sys.stderr)
            return 2
        run_demo(epochs=args.epochs, seed=args.seed, mode=args.mode, batch_size=args.batch_size)
        return 0
    if args.command == "info":
        import ggmlgrad as gg
        print(json.dumps(gg.info(), indent=2))
        return 0
    _parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())

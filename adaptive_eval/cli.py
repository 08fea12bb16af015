"""The ``adaptive-eval`` command line."""

from __future__ import annotations

import argparse
import sys

from adaptive_eval.config import ConfigError, load_config

__all__ = ["main"]


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="F", default=None,
                   help="a YAML file or a preset name (default, areal, aggressive, budget); default: default")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                   help="override one key, e.g. --set trigger.freq_steps=50 (repeatable)")


def _cmd_config(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    cfg = load_config(args.config, args.overrides)
    sys.stdout.write(OmegaConf.to_yaml(cfg))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adaptive-eval", description=__doc__.strip())
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("config", help="print the resolved configuration")
    _add_config_args(p)
    p.set_defaults(func=_cmd_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"adaptive-eval: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""`python -m trainer train|eval|compare ...`: what `rasp train|eval|compare`
does, without the front end (and what `torchrun --nproc_per_node K -m trainer
train ...` runs)."""
import sys

from rasp.errors import RaspError
from rasp.options import ArgumentParser
from trainer import cli
from trainer.compare import cli as compare_cli


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m trainer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    cli.add_train_args(sub.add_parser("train"))
    cli.add_eval_args(sub.add_parser("eval"))
    compare_cli.add_arguments(sub.add_parser("compare"))
    args = parser.parse_args(argv)
    try:
        return {"train": cli.run_train, "eval": cli.run_eval, "compare": compare_cli.run}[args.cmd](args)
    except RaspError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:            # as `rasp`: Ctrl-C / SIGTERM of `compare` (its runs resume)
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

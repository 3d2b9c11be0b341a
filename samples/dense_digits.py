"""Train a Dense classifier on the handwritten digits, and on a CSV file of your own.

    python samples/dense_digits.py [--csv FILE [--label COLUMN]] [--workers W] [--epochs E]

Needs the optional extra that ships the digits: `.venv/bin/pip install -e '.[digits]'`
(from the checkout; or scikit-learn installed into aner's environment). The digits run
uses the defaults a researcher would choose (Adam, lr 1e-3, batch 256, hidden 64,64, early
stopping with patience 5) on local threads; the result is the same, bit for bit, with any
number of workers. With `--csv`, the same is done on your file: a header row, numeric
features, the label in the last column (or `--label`); rows are split into train, validation
and test by the seed, and the features are normalised on the training rows only.
"""

from __future__ import annotations

import argparse

import aner.parallel as parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="a CSV file of your own to train on as well")
    parser.add_argument("--label", help="its label column (default: the last)")
    parser.add_argument("--workers", type=int, default=0, help="local workers (0: automatic)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        train("digits", None, args)
        if args.csv:
            train(args.csv, args.label, args)
    except parallel.AnerError as exc:  # a bad file or number: one line, no traceback
        raise SystemExit(f"dense_digits: {exc}") from None


def train(data: str, label: str | None, args: argparse.Namespace) -> None:
    fit = parallel.dense_fit(
        data=data,
        label=label,
        seed=args.seed,
        epochs=args.epochs,
        target_accuracy=0.95,
        execution=parallel.local(workers=args.workers, chunk=64),
    )
    print(f"== {data}")
    for record in fit.history[-3:]:
        print(
            f"  epoch {record.epoch:3d}: train loss {record.train_loss:.4f}, validation loss "
            f"{record.validation_loss:.4f}, accuracy {record.validation_accuracy:.4f}"
        )
    reached = fit.time_to_target_s
    print(
        f"  best epoch {fit.best_epoch}; test accuracy {fit.test_accuracy:.4f} on "
        f"{fit.roles['test']} rows; validation accuracy 0.95 "
        + (f"reached after {reached:.2f} s" if reached is not None else "not reached")
    )
    print(f"  {fit.summary()}")
    for worker in fit.workers:
        print(f"  {worker.identity}: {worker.items:,} rows in {worker.chunks:,} chunks")


if __name__ == "__main__":
    main()

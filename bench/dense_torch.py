"""The PyTorch side of the `dense` benchmark, run as its own process by `bench.dense_rivals`
with an interpreter that has torch (torch is not a dependency of aner).

Reads the normalised training and test rows from an .npz file, trains the same MLP (ReLU
hidden layers, linear output, mean cross-entropy, Adam, shuffled batches) on one thread in
the given dtype and prints one JSON line: training rows per second of the training loop
alone (the start of the interpreter, the data and the model are not timed), seconds, test
accuracy. Its caller sets OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS to 1
(read when torch loads); the script also calls `torch.set_num_threads(1)`.

    python bench/dense_torch.py DATA.npz --hidden 256,256 --batch 8192 --epochs 2 \
        --dtype float32 --lr 0.001 --seed 0
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--hidden", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--dtype", choices=("float64", "float32"), required=True)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    with np.load(args.data) as data:
        xtr = torch.from_numpy(data["xtr"]).to(dtype)
        ytr = torch.from_numpy(data["ytr"])
        xte = torch.from_numpy(data["xte"]).to(dtype)
        yte = torch.from_numpy(data["yte"])
    sizes = [xtr.shape[1], *(int(h) for h in args.hidden.split(",")), int(ytr.max()) + 1]
    layers: list[torch.nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(fan_in, fan_out, dtype=dtype))
        if index < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = xtr.shape[0]
    started = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(n)
        for start in range(0, n, args.batch):
            index = order[start : start + args.batch]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xtr[index]), ytr[index])
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - started
    with torch.no_grad():
        accuracy = float((model(xte).argmax(dim=1) == yte).double().mean())
    print(
        json.dumps(
            {
                "rows_per_s": args.epochs * n / seconds,
                "seconds": seconds,
                "test_accuracy": accuracy,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Trains a CTR model on the bexpress parameter server, once per transport, and compares them.

For each transport (rdma:// on the simnic or a real NIC, and tcp://) it starts a `bx ps serve`
cluster of 2 shards x 2 replicas on this host (leases in an etcd of its own), runs --trainers
trainer processes (each its own PsClient, its own slice of a synthetic click log, sparse
features through PsEmbedding, a local MLP with Adam), then one ranker process (rank.py)
scoring held-out traffic with trainer 0's model. It prints per epoch the mean loss, the
held-out AUC beside the ground-truth model's, fetch/push latency P50/P99 and trainer CPU per
step, and writes a PNG plot of loss and AUC against steps for every transport.

    PYTHONPATH=build/python \\
        python3 examples/python/ctr_train.py --plot ctr.png      # or: make demo-python

From an installed package (cmake --install), PYTHONPATH=<prefix>/lib/python3.X/dist-packages:
the clusters run the bx installed in <prefix>/bin (bexpress.testing.find_bx).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transports", default="rdma,tcp")
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--samples", type=int, default=60000, help="impressions (80%% train)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sync", action="store_true",
                   help="push synchronously (each backward waits): with one trainer the run is "
                        "deterministic, whatever the transport")
    p.add_argument("--rank-batches", type=int, default=50, help="ranker batches (0: no ranker)")
    p.add_argument("--plot", help="write the loss/AUC plot here (PNG)")
    p.add_argument("--dump", help="write the final embedding rows here, per transport "
                                  "(<dump>.<transport>.npy)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--cluster", help=argparse.SUPPRESS)
    p.add_argument("--transport", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def percentiles(stats, method):
    one = stats["latency"].get(method, {})
    return {"p50_us": one.get("p50_us", 0.0), "p99_us": one.get("p99_us", 0.0)}


def train(args):
    """One trainer process: its slice of the log, every epoch, then evaluation on held-out."""
    import torch

    import bexpress
    import ctr_model

    torch.manual_seed(args.seed + args.index)
    torch.set_num_threads(1)
    bexpress.init(rdma=args.transport == "rdma")
    (train_ids, train_clicks), (test_ids, test_clicks, _) = ctr_model.split(args.samples,
                                                                            args.seed)
    mine = slice(args.index, None, args.trainers)
    train_ids, train_clicks = train_ids[mine], train_clicks[mine]
    client = bexpress.PsClient(args.cluster, transport=args.transport,
                               client_id=1000 + args.index)
    model = ctr_model.CtrModel(client, max_pushes_in_flight=0 if args.sync else 4)
    optimizer = torch.optim.Adam(model.mlp.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps, epochs = [], []
    order_rng = np.random.default_rng(args.seed * 100 + args.index)
    for epoch in range(args.epochs):
        order = order_rng.permutation(len(train_ids))
        cpu0, wall0 = time.process_time(), time.monotonic()
        losses = []
        for start in range(0, len(order), args.batch):
            batch = order[start:start + args.batch]
            logits = model(train_ids[batch])
            loss = loss_fn(logits, torch.from_numpy(train_clicks[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            steps.append(loss.item())
        model.flush()
        count = len(losses)
        scores = ctr_model.score(model, test_ids)
        epochs.append({"epoch": epoch + 1, "steps": len(steps), "loss": float(np.mean(losses)),
                       "auc": ctr_model.auc(scores, test_clicks),
                       "cpu_ms_per_step": 1e3 * (time.process_time() - cpu0) / count,
                       "wall_ms_per_step": 1e3 * (time.monotonic() - wall0) / count})
    stats = client.stats()
    result = {"index": args.index, "steps": steps, "epochs": epochs,
              "fetch": percentiles(stats, "ps.Fetch"), "push": percentiles(stats, "ps.Push"),
              "push_failovers": stats["push_failovers"]}
    if args.index == 0:
        torch.save({"mlp": model.mlp.state_dict()}, args.out + ".model")
        if args.dump:
            keys = np.concatenate([np.arange(v) + f * 1_000_000
                                   for f, (_, _, v) in enumerate(ctr_model.FIELDS)])
            tables = [client.fetch(table, keys[(keys // 1_000_000) == f].astype(np.uint64))
                      for f, (_, table, _) in enumerate(ctr_model.FIELDS)]
            np.save(args.out + ".dump.npy", np.concatenate(tables))
    client.close()
    with open(args.out, "w") as f:
        json.dump(result, f)


def run_transport(args, transport, workdir):
    """A cluster, the trainers, then the ranker, over one transport."""
    import ctr_model
    from bexpress.testing import LocalCluster

    _, (_, test_clicks, test_logit) = ctr_model.split(args.samples, args.seed)
    with LocalCluster(shards=2, replicas=2, tables=ctr_model.cluster_tables(), etcd=True,
                      workdir=tempfile.mkdtemp(dir=workdir)) as cluster:
        outs = [os.path.join(cluster.dir, f"trainer{i}.json") for i in range(args.trainers)]
        common = ["--cluster", cluster.path, "--transport", transport, "--samples",
                  str(args.samples), "--epochs", str(args.epochs), "--batch", str(args.batch),
                  "--seed", str(args.seed), "--trainers", str(args.trainers)]
        common += ["--sync"] if args.sync else []
        common += ["--dump", "yes"] if args.dump else []
        started = time.monotonic()
        trainers = [subprocess.Popen([sys.executable, __file__, "--role", "trainer", "--index",
                                      str(i), "--out", outs[i]] + common)
                    for i in range(args.trainers)]
        for i, trainer in enumerate(trainers):
            if trainer.wait() != 0:
                raise SystemExit(f"trainer {i} over {transport} exited {trainer.returncode}")
        elapsed = time.monotonic() - started
        results = [json.load(open(out)) for out in outs]
        if args.dump:
            os.replace(outs[0] + ".dump.npy", f"{args.dump}.{transport}.npy")
        ranker = None
        if args.rank_batches > 0:
            reply = subprocess.run(
                [sys.executable, os.path.join(HERE, "rank.py"), "--cluster", cluster.path,
                 "--transport", transport, "--model", outs[0] + ".model", "--samples",
                 str(args.samples), "--seed", str(args.seed), "--batches",
                 str(args.rank_batches), "--json"], check=True, capture_output=True, text=True)
            ranker = json.loads(reply.stdout)
    return {"transport": transport, "seconds": elapsed, "trainers": results, "ranker": ranker,
            "ground_truth_auc": ctr_model.auc(test_logit, test_clicks)}


def report(runs):
    for run in runs:
        print(f"\n{run['transport']}: {len(run['trainers'])} trainers, {run['seconds']:.1f} s; "
              f"ground-truth AUC {run['ground_truth_auc']:.4f}")
        print(f"{'epoch':>5} {'loss':>8} {'AUC':>7} {'AUC min':>7} {'CPU ms/step':>11} "
              f"{'wall ms/step':>12}")
        for e in range(len(run["trainers"][0]["epochs"])):
            rows = [t["epochs"][e] for t in run["trainers"]]
            print(f"{e + 1:>5} {np.mean([r['loss'] for r in rows]):>8.4f} "
                  f"{np.mean([r['auc'] for r in rows]):>7.4f} {min(r['auc'] for r in rows):>7.4f} "
                  f"{np.mean([r['cpu_ms_per_step'] for r in rows]):>11.2f} "
                  f"{np.mean([r['wall_ms_per_step'] for r in rows]):>12.2f}")
        t0 = run["trainers"][0]
        print(f"trainer 0: fetch P50 {t0['fetch']['p50_us']:.0f} us P99 "
              f"{t0['fetch']['p99_us']:.0f} us; push P50 {t0['push']['p50_us']:.0f} us P99 "
              f"{t0['push']['p99_us']:.0f} us")
        if run["ranker"]:
            r = run["ranker"]
            print(f"ranker: {r['batches']} batches of {r['batch']}: P50 {r['p50_ms']:.2f} ms "
                  f"P99 {r['p99_ms']:.2f} ms, AUC {r['auc']:.4f}")


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, auc_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        steps = np.array(run["trainers"][0]["steps"])
        window = min(20, len(steps))
        smooth = np.convolve(steps, np.ones(window) / window, mode="valid")
        loss_axis.plot(np.arange(len(smooth)) + window, smooth, label=run["transport"])
        epochs = run["trainers"][0]["epochs"]
        auc_axis.plot([e["steps"] for e in epochs],
                      [np.mean([t["epochs"][i]["auc"] for t in run["trainers"]])
                       for i in range(len(epochs))], marker="o", label=run["transport"])
    auc_axis.axhline(runs[0]["ground_truth_auc"], color="gray", linestyle="--",
                     label="ground truth")
    loss_axis.set(xlabel="step (trainer 0)", ylabel="training loss (moving mean)")
    auc_axis.set(xlabel="step (trainer 0)", ylabel="held-out AUC")
    loss_axis.legend()
    auc_axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    args = parse_args()
    if args.role == "trainer":
        return train(args)
    with tempfile.TemporaryDirectory(prefix="ctr-train-") as workdir:
        runs = [run_transport(args, transport, workdir)
                for transport in args.transports.split(",")]
    if args.json:
        print(json.dumps(runs))
    else:
        report(runs)
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A ranker: scores batches of held-out impressions with a trained CTR model (ctr_train.py)
whose embeddings it fetches from the parameter server through PsEmbedding under no_grad, and
reports per-batch latency percentiles and the AUC of its scores.

    rank.py --cluster cluster.json --model trainer0.json.model --transport rdma --json
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cluster", required=True)
    p.add_argument("--model", required=True, help="the MLP a trainer saved")
    p.add_argument("--transport", default="rdma")
    p.add_argument("--samples", type=int, default=60000, help="as the trainers' --samples")
    p.add_argument("--seed", type=int, default=1, help="as the trainers' --seed")
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    import torch

    import bexpress
    import ctr_model

    torch.set_num_threads(1)
    bexpress.init(rdma=args.transport == "rdma")
    _, (ids, clicks, _) = ctr_model.split(args.samples, args.seed)
    with bexpress.PsClient(args.cluster, transport=args.transport) as client:
        model = ctr_model.CtrModel(client)
        model.mlp.load_state_dict(torch.load(args.model)["mlp"])
        model.eval()
        latencies, scores, labels = [], [], []
        for b in range(args.batches):
            start = (b * args.batch) % max(1, len(ids) - args.batch)
            batch = slice(start, start + args.batch)
            began = time.perf_counter()
            with torch.no_grad():
                scores.append(model(ids[batch]).numpy())
            latencies.append(1e3 * (time.perf_counter() - began))
            labels.append(clicks[batch])
        pushes = sum(emb.pushes for emb in model.embeddings)
    result = {"transport": args.transport, "batches": args.batches, "batch": args.batch,
              "p50_ms": float(np.percentile(latencies, 50)),
              "p99_ms": float(np.percentile(latencies, 99)),
              "auc": ctr_model.auc(np.concatenate(scores), np.concatenate(labels)),
              "pushes": pushes}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.transport}: {args.batches} batches of {args.batch}: P50 "
              f"{result['p50_ms']:.2f} ms, P99 {result['p99_ms']:.2f} ms, AUC {result['auc']:.4f}")


if __name__ == "__main__":
    main()

"""The CTR example's data and model, shared by the trainer (ctr_train.py) and the ranker
(rank.py).

Data: a synthetic click log drawn from a known ground-truth model, so learning is checkable:
the ground truth's own AUC on held-out data is the ceiling a trained model approaches. Each
impression has a user, an item and a category (ids skewed as real traffic is); its click
probability is sigmoid(bias + user effect + item effect + category effect + user . item).

Model: one bexpress.torch.PsEmbedding per field (rows on the parameter server, updated there
by the table's optimiser) and a small dense MLP trained locally with a torch optimiser.
"""

import numpy as np
import torch
from torch import nn

from bexpress.torch import PsEmbedding

# (name, table id, vocabulary size). Ids are offset per field so that the tables hold disjoint
# keys even if a deployment put every field in one table.
FIELDS = [("user", 1, 400), ("item", 2, 200), ("category", 3, 20)]
DIM = 8


def cluster_tables(learning_rate=0.1, seed=7):
    """The cluster file's table entries: one embedding table per field, Adagrad on the server."""
    return [{"id": table, "name": name, "kind": "embedding", "dim": DIM,
             "init": {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": seed + table},
             "optimizer": {"kind": "adagrad", "learning_rate": learning_rate}}
            for name, table, _ in FIELDS]


def make_click_log(samples, seed):
    """(ids int64 (samples, fields), clicks float32 (samples,), true logits (samples,))."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(seed + 1000)
    columns, logit = [], np.full(samples, -0.5)
    vectors = []
    for field, (_, _, vocabulary) in enumerate(FIELDS):
        # Zipf-like popularity: a few heavy ids, a long tail.
        popularity = 1.0 / (np.arange(vocabulary) + 5.0)
        ids = rng.choice(vocabulary, size=samples, p=popularity / popularity.sum())
        effect = truth.normal(0.0, 1.0 if field < 2 else 0.5, size=vocabulary)
        logit += effect[ids]
        vectors.append(truth.normal(0.0, 0.4, size=(vocabulary, 4))[ids])
        columns.append(ids + field * 1_000_000)  # disjoint key ranges per field
    logit += np.sum(vectors[0] * vectors[1], axis=1)  # the user-item interaction
    clicks = (rng.random(samples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return np.stack(columns, axis=1).astype(np.int64), clicks, logit


def split(samples, seed, test_fraction=0.2):
    ids, clicks, logit = make_click_log(samples, seed)
    cut = int(samples * (1 - test_fraction))
    return (ids[:cut], clicks[:cut]), (ids[cut:], clicks[cut:], logit[cut:])


def auc(scores, labels):
    """Area under the ROC curve (Mann-Whitney U, ties averaged)."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks over ties.
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(scores)]])
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + end + 1) / 2.0
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    return (ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives)


class CtrModel(nn.Module):
    def __init__(self, client, max_pushes_in_flight=4):
        super().__init__()
        self.embeddings = nn.ModuleList(
            PsEmbedding(vocabulary, DIM, table=table, client=client,
                        max_pushes_in_flight=max_pushes_in_flight)
            for _, table, vocabulary in FIELDS)
        self.mlp = nn.Sequential(nn.Linear(DIM * len(FIELDS), 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids):
        ids = torch.as_tensor(ids)
        features = [emb(ids[:, f]) for f, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(features, dim=1)).squeeze(1)

    def flush(self):
        for emb in self.embeddings:
            emb.flush()


def score(model, ids, batch=1024):
    with torch.no_grad():
        return np.concatenate([model(ids[i:i + batch]).numpy() for i in range(0, len(ids), batch)])

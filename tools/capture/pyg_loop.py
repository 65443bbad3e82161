#!/usr/bin/env python
"""Node classification with a two-layer GAT in PyTorch Geometric, trained
full-batch the way the PyG examples train Cora, here on a large random graph:
every epoch's forward holds one message tensor per edge and head.  With
``--parts N`` each epoch instead trains on N induced subgraphs of random node
halves (a ClusterGCN-style mini-batch, using only ``torch_geometric.utils``).

    python pyg_loop.py --nodes 200000 --edges 4000000 --heads 8 --epochs 5

Features and labels are random.  Options that only stage a scenario say
"scenario:" in their help.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from loop_setup import add_scenario_args, start_scenario  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--edges", type=int, default=4_000_000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--parts", type=int, default=1, help="induced subgraphs per epoch (1: full batch)")
    add_scenario_args(p)
    args = p.parse_args()

    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.nn import GATConv
    from torch_geometric.utils import subgraph

    allowed = start_scenario(args)
    torch.manual_seed(0)
    x = torch.randn(args.nodes, args.features)
    edge_index = torch.randint(0, args.nodes, (2, args.edges))
    y = torch.randint(0, args.classes, (args.nodes,))
    data = Data(x=x, edge_index=edge_index, y=y)
    print(data, flush=True)

    class GAT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = GATConv(args.features, args.hidden, heads=args.heads)
            self.conv2 = GATConv(args.hidden * args.heads, args.classes, heads=1)

        def forward(self, x, edge_index):
            x = F.elu(self.conv1(x, edge_index))
            return self.conv2(x, edge_index)

    model = GAT().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)
    print(f"GAT: {sum(q.numel() for q in model.parameters())} parameters, {args.heads} heads; "
          f"{'full batch' if args.parts == 1 else f'{args.parts} induced subgraphs an epoch'}", flush=True)
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        if args.parts == 1:
            batches = [data.to("cuda")]
        else:
            batches = []
            for _ in range(args.parts):
                keep = torch.randperm(args.nodes)[: args.nodes // 2]
                ei, _ = subgraph(keep, data.edge_index, relabel_nodes=True, num_nodes=args.nodes)
                batches.append(Data(x=data.x[keep], edge_index=ei, y=data.y[keep]).to("cuda"))
        total = 0.0
        for b in batches:
            model.train()
            opt.zero_grad()
            out = model(b.x, b.edge_index)
            loss = F.cross_entropy(out, b.y)
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"Epoch: {epoch:03d}, Loss: {total / len(batches):.4f}, "
              f"max allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    if args.report:
        from run_report import write_run_report

        write_run_report(args.report, args, allowed, args.epochs, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

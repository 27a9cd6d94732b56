"""Exponential moving average of the weights (Fan et al.'s optional `ema`,
decay 0.9999, started when the learning rate starts to decay: train.py:94-100).

The averages live in the optimizer's per-parameter state under "ema", so the
existing atomic checkpoint saves and restores them with the AdamW moments
(AdamW ignores keys it does not know).  A parameter the optimizer has never
updated has no state and no average: its weights are their own average."""
from __future__ import annotations

import torch

KEY = "ema"


@torch.no_grad()
def update(opt: torch.optim.Optimizer, decay: float):
    """ema <- decay * ema + (1 - decay) * weights; the first call copies the weights."""
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st:
                continue
            if KEY not in st:
                st[KEY] = p.detach().clone()
            else:
                st[KEY].mul_(decay).add_(p.detach(), alpha=1.0 - decay)


def has_average(opt: torch.optim.Optimizer) -> bool:
    return any(KEY in st for st in opt.state.values())


@torch.no_grad()
def averaged_state_dict(model, opt: torch.optim.Optimizer) -> dict:
    """The model's state dict with every averaged parameter replaced by its average."""
    by_id = {id(p): st[KEY] for p, st in opt.state.items() if KEY in st}
    sd = dict(model.state_dict())
    for name, p in model.named_parameters():
        if id(p) in by_id:
            sd[name] = by_id[id(p)].clone()
    return sd

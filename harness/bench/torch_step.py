"""PyTorch's side: the same network, loss, clipping and optimizer in fp32."""
from __future__ import annotations

import numpy as np
from ...generators import model

from .inputs import ADAMW, CLIP_LIMIT, Inputs


class TorchStep:
    def __init__(self, inp: Inputs, threads: int):
        import torch
        from ...generators import torch_model
        self.torch = torch
        torch.set_num_threads(threads)
        cfg = inp.config
        self.net = torch_model.build(cfg, inp.params, torch.float32)
        decay, no_decay = [], []
        for name, p in self.net.named_parameters():
            if p.requires_grad:
                (decay if p.dim() > 1 else no_decay).append(p)
        a = ADAMW
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": a["wd"]},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"],
                                     foreach=False)
        self.params = decay + no_decay
        self.x = torch.from_numpy(np.stack(inp.images))
        self.tg = torch.from_numpy(np.concatenate(inp.targets).astype(np.int64))
        self.tl = torch.tensor([len(t) for t in inp.targets], dtype=torch.long)
        T = model.steps_for_width(cfg, inp.images[0].shape[1])
        self.il = torch.full((inp.batch,), T, dtype=torch.long)
        self.ctc = torch.nn.CTCLoss(blank=0, reduction="none")

    def __call__(self):
        torch = self.torch
        self.opt.zero_grad(set_to_none=False)
        lp = self.net(self.x)
        loss = self.ctc(lp, self.tg, self.il, self.tl).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, CLIP_LIMIT)
        self.opt.step()


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False

"""Lab 4 catalogue: plausible buggy optimisers, and correct ones written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

# ---------------------------------------------------------------- exercise 1: NumPy adamw_update_step
NP_OK = '''
def adamw_update_step(params, grads, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    if t < 1:
        raise ValueError("t starts at 1")
    bc1 = 1.0 - beta1 ** t
    bc2 = 1.0 - beta2 ** t
    for key in params:
        g = grads.get(key)
        if g is None:
            continue
        p = params[key]
        p *= 1.0 - lr * weight_decay
        m[key] *= beta1
        m[key] += (1.0 - beta1) * g
        v[key] *= beta2
        v[key] += (1.0 - beta2) * g * g
        m_hat = m[key] / bc1
        v_hat = v[key] / bc2
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)
'''


def _np(old: str, new: str) -> str:
    assert old in NP_OK, old
    return NP_OK.replace(old, new)


# ---------------------------------------------------------------- exercise 2: AdamW(torch.optim.Optimizer)
ADAMW_OK = '''
class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError("invalid hyper-parameter")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * wd)
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1 ** t)
                v_hat = v / (1 - beta2 ** t)
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
        return loss
'''


def _adamw(old: str, new: str) -> str:
    assert old in ADAMW_OK, old
    return ADAMW_OK.replace(old, new)


# ---------------------------------------------------------------- exercise 3: Lion
LION_OK = '''
class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        if lr <= 0 or weight_decay < 0 or not all(0.0 <= b <= 1.0 for b in betas):
            raise ValueError("invalid hyper-parameter")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1 - lr * wd)
                c = beta1 * m + (1 - beta1) * g
                p.add_(torch.sign(c), alpha=-lr)
                m.mul_(beta2).add_(g, alpha=1 - beta2)
        return loss
'''


def _lion(old: str, new: str) -> str:
    assert old in LION_OK, old
    return LION_OK.replace(old, new)


# ---------------------------------------------------------------- exercise 4: build_param_groups
GROUPS_OK = '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.dim() >= 2 and (decay_embeddings or id(p) not in embeddings):
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''


def _groups(old: str, new: str) -> str:
    assert old in GROUPS_OK, old
    return GROUPS_OK.replace(old, new)


ANSWERS_OK = '''
q1_decay_fraction_per_step = 2e-3 * 0.05
q2_adam_l2_stronger_decay = "b"
q3_lion_state_bytes = 4
q4_uncorrected_first_step = 0.1 / math.sqrt(0.05)
'''


def _answers(old: str, new: str) -> str:
    assert old in ANSWERS_OK, old
    return ANSWERS_OK.replace(old, new)


# "Stops when the visible tests are silent": the plausible answer to each exercise that passed every visible test of
# the first edition of this lab (the visible tests then did not exercise what the rest of the spec names). Each must
# now fail a visible test of its exercise, with a message that says what to fix.
VISIBLE_ONLY = {
    "adamw_update_step": '''
def adamw_update_step(params, grads, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    if t == 0:
        raise ValueError("t starts at 1")
    for key in params:
        g = grads[key]
        params[key] *= 1 - lr * weight_decay
        m[key] = beta1 * m[key] + (1 - beta1) * g
        v[key] = beta2 * v[key] + (1 - beta2) * g ** 2
        m_hat = m[key] / (1 - beta1 ** t)
        v_hat = v[key] / (1 - beta2 ** t)
        params[key] -= lr * m_hat / (np.sqrt(v_hat) + eps)
''',
    "adamw_optimizer": '''
class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay

    @torch.no_grad()
    def step(self, closure=None):
        beta1, beta2 = self.betas
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                p.mul_(1 - self.lr * self.weight_decay)
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = state["exp_avg"] / (1 - beta1 ** t)
                v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)
                p.sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))
''',
    "lion": '''
class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = self.defaults["betas"]
            for p in group["params"]:
                state = self.state[p]
                if "m" not in state:
                    state["m"] = torch.zeros_like(p)
                m = state["m"]
                p.mul_(1 - lr * wd)
                p.add_(torch.sign(beta1 * m + (1 - beta1) * p.grad), alpha=-lr)
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)
''',
    "param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_embedding = "wte" in name or "wpe" in name
        if p.dim() >= 2 and (decay_embeddings or not is_embedding):
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
''',
    # exercise 5, the first answer from one reading of the spec: the defaults everyone quotes, no trial spent
    "tune": '''
def tune(task, optimizer):
    return {"lr": 1e-3 if optimizer == "adamw" else 1e-4}
''',
}


BUGS = {
    # --- exercise 1: adamw_update_step
    "np_coupled_weight_decay": {"adamw_update_step": _np(
        "        p *= 1.0 - lr * weight_decay\n", "        g = g + weight_decay * p   # L2: Adam + weight decay in the gradient\n")},
    "np_missing_bias_correction": {"adamw_update_step": _np(   # seed 000's formula: no bias correction
        "        m_hat = m[key] / bc1\n        v_hat = v[key] / bc2\n", "        m_hat = m[key]\n        v_hat = v[key]\n")},
    "np_eps_inside_sqrt": {"adamw_update_step": _np("(np.sqrt(v_hat) + eps)", "np.sqrt(v_hat + eps)")},
    "np_eps_before_bias_correction": {"adamw_update_step": _np(
        "        p -= lr * m_hat / (np.sqrt(v_hat) + eps)\n",
        "        p -= lr * m_hat / ((np.sqrt(v[key]) + eps) / np.sqrt(bc2))\n")},
    "np_decay_after_adaptive_step": {"adamw_update_step": _np(
        "        p *= 1.0 - lr * weight_decay\n", "").replace(
        "        p -= lr * m_hat / (np.sqrt(v_hat) + eps)\n",
        "        p -= lr * m_hat / (np.sqrt(v_hat) + eps)\n        p *= 1.0 - lr * weight_decay\n")},
    "np_decay_without_lr": {"adamw_update_step": _np("p *= 1.0 - lr * weight_decay", "p *= 1.0 - weight_decay")},
    "np_zero_based_step": {"adamw_update_step": _np(
        "    bc1 = 1.0 - beta1 ** t\n    bc2 = 1.0 - beta2 ** t\n",
        "    bc1 = 1.0 - beta1 ** (t + 1)\n    bc2 = 1.0 - beta2 ** (t + 1)\n")},
    "np_seed_001_rebinds_state": {"adamw_update_step": '''
def adamw_update_step(params, grads, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    # the seed's version: correct arithmetic, but new arrays for m and v, no t check, no skipping
    bias_correction1 = 1 - beta1 ** float(t)
    bias_correction2 = 1 - beta2 ** float(t)
    for key in params.keys():
        m[key] = beta1 * m[key] + (1 - beta1) * grads[key]
        v[key] = beta2 * v[key] + (1 - beta2) * grads[key] ** 2
        m_hat = m[key] / bias_correction1
        v_hat = v[key] / bias_correction2
        params[key] *= (1 - lr * weight_decay)
        params[key] -= lr * m_hat / (np.sqrt(v_hat) + eps)
'''},
    "np_no_skip_for_missing_grads": {"adamw_update_step": _np(
        "        g = grads.get(key)\n        if g is None:\n            continue\n",
        "        g = grads.get(key)\n        if g is None:\n            g = np.zeros_like(params[key])\n")},

    "np_visible_tests_only": {"adamw_update_step": VISIBLE_ONLY["adamw_update_step"]},
    "np_rejects_only_t_zero": {"adamw_update_step": _np("    if t < 1:\n", "    if t == 0:\n")},
    "np_returns_params": {"adamw_update_step": NP_OK.rstrip("\n") + "\n    return params\n"},
    "np_default_weight_decay_zero": {"adamw_update_step": _np("weight_decay=0.01):", "weight_decay=0.0):")},

    # --- exercise 2: AdamW(torch.optim.Optimizer)
    "coupled_weight_decay": {"adamw_optimizer": _adamw(
        "                p.mul_(1 - lr * wd)\n", "                g = g.add(p, alpha=wd)   # L2 instead of decoupled decay\n")},
    "missing_bias_correction": {"adamw_optimizer": _adamw(
        "                m_hat = m / (1 - beta1 ** t)\n                v_hat = v / (1 - beta2 ** t)\n",
        "                m_hat = m\n                v_hat = v\n")},
    "hyperparams_from_defaults": {"adamw_optimizer": _adamw(
        '            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]\n            beta1, beta2 = group["betas"]\n',
        '            lr, wd, eps = self.defaults["lr"], self.defaults["weight_decay"], self.defaults["eps"]\n'
        '            beta1, beta2 = self.defaults["betas"]\n')},
    "global_step_counter": {"adamw_optimizer": _adamw(
        "        for group in self.param_groups:\n",
        "        self._t = getattr(self, '_t', 0) + 1   # one counter for all parameters\n        for group in self.param_groups:\n"
    ).replace('                t = state["step"]\n', "                t = self._t\n")},
    "state_outside_self_state": {"adamw_optimizer": _adamw(
        "                state = self.state[p]\n",
        "                if not hasattr(self, 'moments'):\n                    self.moments = {}\n"
        "                state = self.moments.setdefault(p, {})   # invisible to state_dict()\n")},
    "decays_params_without_grad": {"adamw_optimizer": _adamw(
        "                if p.grad is None:\n                    continue\n",
        "                if p.grad is None:\n                    p.mul_(1 - lr * wd)\n                    continue\n")},
    "bias_correction_in_float32": {"adamw_optimizer": _adamw(
        '                    state["step"] = 0\n', '                    state["step"] = torch.tensor(0.0)\n')},
    "grad_skipped_params_get_state": {"adamw_optimizer": _adamw(
        "                if p.grad is None:\n                    continue\n                g = p.grad\n",
        "                g = p.grad if p.grad is not None else torch.zeros_like(p)\n")},

    "adamw_visible_tests_only": {"adamw_optimizer": VISIBLE_ONLY["adamw_optimizer"]},
    "adamw_rejects_zero_lr": {"adamw_optimizer": _adamw("if lr < 0 or", "if lr <= 0 or")},
    "adamw_rejects_zero_eps": {"adamw_optimizer": _adamw("or eps < 0 or", "or eps <= 0 or")},
    "adamw_accepts_beta_one": {"adamw_optimizer": _adamw("0.0 <= b < 1.0", "0.0 <= b <= 1.0")},
    "adamw_default_weight_decay_zero": {"adamw_optimizer": _adamw("weight_decay=1e-2):", "weight_decay=0.0):")},
    "adamw_closure_loss_dropped": {"adamw_optimizer": _adamw("        return loss\n", "        return None\n")},
    "adamw_closure_without_grad": {"adamw_optimizer": _adamw(
        "            with torch.enable_grad():\n                loss = closure()\n", "            loss = closure()\n")},
    "adamw_lr_cached_at_construction": {"adamw_optimizer": _adamw(
        "        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))\n",
        "        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))\n"
        "        self.lrs = [group['lr'] for group in self.param_groups]\n").replace(
        "        for group in self.param_groups:\n            lr, wd, eps = group[\"lr\"], group[\"weight_decay\"], group[\"eps\"]\n",
        "        for i, group in enumerate(self.param_groups):\n            lr, wd, eps = self.lrs[i], group[\"weight_decay\"], group[\"eps\"]\n")},

    # --- exercise 3: Lion
    "lion_momentum_updated_before_sign": {"lion": _lion(
        "                c = beta1 * m + (1 - beta1) * g\n                p.add_(torch.sign(c), alpha=-lr)\n"
        "                m.mul_(beta2).add_(g, alpha=1 - beta2)\n",
        "                m.mul_(beta2).add_(g, alpha=1 - beta2)\n                p.add_(torch.sign(m), alpha=-lr)\n")},
    "lion_sign_of_zero_is_one": {"lion": _lion("torch.sign(c)", "torch.where(c >= 0, 1.0, -1.0).to(p.dtype)")},
    "lion_decay_without_lr": {"lion": _lion("p.mul_(1 - lr * wd)", "p.mul_(1 - wd)")},
    "lion_betas_swapped": {"lion": _lion("            beta1, beta2 = group[\"betas\"]\n", "            beta2, beta1 = group[\"betas\"]\n")},
    "lion_decay_after_update": {"lion": _lion(
        "                p.mul_(1 - lr * wd)\n                c = beta1 * m + (1 - beta1) * g\n                p.add_(torch.sign(c), alpha=-lr)\n",
        "                c = beta1 * m + (1 - beta1) * g\n                p.add_(torch.sign(c), alpha=-lr)\n                p.mul_(1 - lr * wd)\n")},
    "lion_state_under_other_key": {"lion": _lion(
        '                if "exp_avg" not in state:\n                    state["exp_avg"] = torch.zeros_like(p)\n                m = state["exp_avg"]\n',
        '                if "momentum" not in state:\n                    state["momentum"] = torch.zeros_like(p)\n                m = state["momentum"]\n')},

    "lion_visible_tests_only": {"lion": VISIBLE_ONLY["lion"]},
    "lion_accepts_zero_lr": {"lion": _lion("if lr <= 0 or", "if lr < 0 or")},
    "lion_rejects_beta_one": {"lion": _lion("0.0 <= b <= 1.0", "0.0 <= b < 1.0")},
    "lion_default_lr_1e-3": {"lion": _lion("lr=1e-4, betas", "lr=1e-3, betas")},
    "lion_decays_params_without_grad": {"lion": _lion(
        "                if p.grad is None:\n                    continue\n",
        "                if p.grad is None:\n                    p.mul_(1 - lr * wd)\n                    continue\n")},
    "lion_closure_loss_dropped": {"lion": _lion("        return loss\n", "        return None\n")},
    "lion_betas_from_defaults": {"lion": _lion('            beta1, beta2 = group["betas"]\n',
                                               '            beta1, beta2 = self.defaults["betas"]\n')},

    # --- exercise 4: build_param_groups
    "groups_bias_name_rule": {"param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith("bias") else decay).append(p)   # LayerNorm weights get decayed
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''},
    "groups_include_frozen": {"param_groups": _groups("        if not p.requires_grad:\n            continue\n", "")},
    "groups_tied_weight_twice": {"param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_emb = isinstance(module, nn.Embedding)
            if p.dim() >= 2 and (decay_embeddings or not is_emb):
                decay.append(p)
            else:
                no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''},
    "groups_embeddings_always_decayed": {"param_groups": _groups(
        "(decay_embeddings or id(p) not in embeddings)", "True")},
    "groups_linear_weights_only": {"param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    decay_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    if decay_embeddings:
        decay_ids |= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if id(p) in decay_ids else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''},
    "groups_wrong_order": {"param_groups": _groups(
        'return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]',
        'return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]')},

    "groups_visible_tests_only": {"param_groups": VISIBLE_ONLY["param_groups"]},
    # the embedding rule checked before the frozen one: a frozen embedding table lands in the no-decay group
    "groups_frozen_embedding_kept": {"param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        if id(p) in embeddings:
            (decay if decay_embeddings else no_decay).append(p)
        elif not p.requires_grad:
            continue
        elif p.dim() >= 2:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''},
    "groups_default_decays_embeddings": {"param_groups": _groups("decay_embeddings=False):", "decay_embeddings=True):")},
    "groups_frozen_filtered_for_matrices_only": {"param_groups": _groups(
        "        if not p.requires_grad:\n            continue\n        if p.dim() >= 2 and",
        "        if p.dim() >= 2 and p.requires_grad and")},
    "groups_embeddings_by_name": {"param_groups": _groups(
        "(decay_embeddings or id(p) not in embeddings)", "(decay_embeddings or 'emb' not in names[id(p)])").replace(
        "    decay, no_decay = [], []\n", "    names = {id(p): n for n, p in model.named_parameters()}\n    decay, no_decay = [], []\n", 1)},
    "groups_first_module_decides": {"param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))                 # a shared weight is judged by the first module that holds it
            if p.dim() >= 2 and (decay_embeddings or not isinstance(module, nn.Embedding)):
                decay.append(p)
            else:
                no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
'''},

    # --- exercise 5: tune (each misses tasks whose best learning rate it never gets near)
    "tune_hasty_defaults": {"tune": VISIBLE_ONLY["tune"]},
    "tune_three_point_grid": {"tune": '''
def tune(task, optimizer):
    losses = {lr: task.trial({"lr": lr}) for lr in (1e-4, 1e-3, 1e-2)}
    return {"lr": min(losses, key=losses.get)}
'''},
    # the whole budget on one full-length trial per decade: the right range, a decade too coarse
    "tune_decade_grid_without_refinement": {"tune": '''
def tune(task, optimizer):
    losses = {10.0 ** e: task.trial({"lr": 10.0 ** e}) for e in range(-6, 2)}
    return {"lr": min(losses, key=losses.get)}
'''},
    # one trial too many: the ninth full-length trial raises BudgetExceeded
    "tune_over_budget": {"tune": '''
def tune(task, optimizer):
    losses = {10.0 ** e: task.trial({"lr": 10.0 ** e}) for e in range(-6, 3)}
    return {"lr": min(losses, key=losses.get)}
'''},
    "tune_returns_the_lr": {"tune": '''
def tune(task, optimizer):
    coarse = {lr: task.trial({"lr": lr}, steps=task.steps // 2) for lr in (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)}
    return min(coarse, key=coarse.get)
'''},
    # the visible tasks' best learning rates, read off a sweep of them, and the defaults elsewhere
    "tune_memorises_the_visible_tasks": {"tune": '''
def tune(task, optimizer):
    known = {"digits, MLP 32 x 1, standardised pixels": (0.018, 0.0018), "digits, MLP 32 x 1, pixels 0..255": (0.0032, 0.001),
             "digits, linear, standardised pixels x 0.01": (3.2, 0.32), "regression, MLP 32 x 2, unit targets": (0.01, 0.0018),
             "bigram LM, vocabulary 32": (0.056, 0.018)}
    adamw, lion = known.get(task.name, (1e-3, 1e-4))
    return {"lr": adamw if optimizer == "adamw" else lion}
'''},

    # --- exercise 5: self-check answers
    "answer_q1_forgot_lr": {"answers": _answers("q1_decay_fraction_per_step = 2e-3 * 0.05", "q1_decay_fraction_per_step = 0.05")},
    "answer_q2_larger_rms": {"answers": _answers('q2_adam_l2_stronger_decay = "b"', 'q2_adam_l2_stronger_decay = "a"')},
    "answer_q3_adamw_bytes": {"answers": _answers("q3_lion_state_bytes = 4", "q3_lion_state_bytes = 8")},
    "answer_q4_pytorch_default_betas": {"answers": _answers(
        "q4_uncorrected_first_step = 0.1 / math.sqrt(0.05)", "q4_uncorrected_first_step = 0.1 / math.sqrt(0.001)")},
}

# Correct, but written differently from the reference: torch's own step-size / denominator order, decay as a
# subtraction, lerp for the moments, a tensor step counter read with float(), and a name-based embedding test.
ALTERNATIVE = {
    "adamw_update_step": '''
def adamw_update_step(params, grads, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    if not t >= 1:
        raise ValueError(f"bad step {t}")
    step_size = lr / (1 - beta1 ** t)
    sqrt_bc2 = (1 - beta2 ** t) ** 0.5
    for key, g in grads.items():
        if g is None or key not in params:
            continue
        p, mk, vk = params[key], m[key], v[key]
        p -= (lr * weight_decay) * p
        mk += (1 - beta1) * (g - mk)
        np.multiply(vk, beta2, out=vk)
        vk += (1 - beta2) * np.square(g)
        p -= step_size * mk / (np.sqrt(vk) / sqrt_bc2 + eps)
''',
    "adamw_optimizer": '''
class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        checks = {"lr": lr >= 0, "eps": eps >= 0, "weight_decay": weight_decay >= 0,
                  "betas": 0 <= betas[0] < 1 and 0 <= betas[1] < 1}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"invalid {name}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _update(self, p, group):
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros(())
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        t = float(state["step"])
        b1, b2 = group["betas"]
        p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        state["exp_avg"].lerp_(p.grad, 1 - b1)
        state["exp_avg_sq"].mul_(b2).add_(p.grad.square(), alpha=1 - b2)
        denom = state["exp_avg_sq"].sqrt().div_(math.sqrt(1 - b2 ** t)).add_(group["eps"])
        p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - b1 ** t))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for p in (q for q in group["params"] if q.grad is not None):
                    self._update(p, group)
        return loss
''',
    "lion": '''
class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        if not lr > 0:
            raise ValueError("lr must be positive")
        if weight_decay < 0:
            raise ValueError("weight_decay must be >= 0")
        if any(b < 0 or b > 1 for b in betas):
            raise ValueError("betas must lie in [0, 1]")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        with torch.no_grad():
            for group in self.param_groups:
                b1, b2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                    update = torch.lerp(m, p.grad, 1 - b1).sign()
                    p.mul_(1 - group["lr"] * group["weight_decay"]).sub_(group["lr"] * update)
                    m.lerp_(p.grad, 1 - b2)
        return loss
''',
    "param_groups": '''
def build_param_groups(model, weight_decay, decay_embeddings=False):
    embedding_names = set()
    for mod_name, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, nn.Embedding):
            embedding_names.add(f"{mod_name}.weight" if mod_name else "weight")
    groups = {True: [], False: []}
    seen = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        shares_embedding = any(q is p for n, q in model.named_parameters(remove_duplicate=False) if n in embedding_names)
        groups[p.ndim > 1 and (decay_embeddings or not shares_embedding)].append(p)
    return [dict(params=groups[True], weight_decay=weight_decay), dict(params=groups[False], weight_decay=0.0)]
''',
    # exercise 5: a learning-rate range test (short trials half a decade apart over the whole range), then full-length
    # trials a third of a decade apart below its best, the best of them kept
    "tune": '''
def tune(task, optimizer):
    quick = {10 ** (k / 2): task.trial({"lr": 10 ** (k / 2)}, steps=task.steps // 10) for k in range(-12, 3)}
    top = min(quick, key=quick.get)       # a short run rewards speed: the full run wants this or less
    full = {}
    for k in range(6):
        if task.spent + task.steps <= task.budget:
            full[top / 10 ** (k / 3)] = task.trial({"lr": top / 10 ** (k / 3)})
    return {"lr": min(full, key=full.get)}
''',
    "answers": '''
q1_decay_fraction_per_step = 0.0001
q2_adam_l2_stronger_decay = "b"
q3_lion_state_bytes = 4.0
q4_uncorrected_first_step = 0.447
''',
}

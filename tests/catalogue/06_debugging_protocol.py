"""Lab 6 catalogue: plausible buggy implementations, and a correct one written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

OVERFIT_OK = '''
def overfit_one_batch(model, loader, loss_fn=F.cross_entropy, steps=200, lr=1e-3):
    if steps < 1:
        raise ValueError("steps must be at least 1")
    x, y = next(iter(loader))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
'''

FLOW_OK = '''
def gradient_flow_report(model, compute_loss, threshold=1e-10):
    for p in model.parameters():
        p.grad = None
    compute_loss(model).backward()
    report = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            report[name] = "frozen"
        elif p.grad is None:
            report[name] = "no_grad"
        elif not torch.isfinite(p.grad).all():
            report[name] = "nonfinite"
        elif p.grad.abs().max() < threshold:
            report[name] = "vanishing"
    return report
'''

INIT_OK = '''
def output_entropy(logits):
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1).mean()


def init_check(model, x, y, tol=0.1):
    modes = {m: m.training for m in model.modules()}
    model.eval()
    with torch.no_grad():
        logits = model(x)
    for m, was_training in modes.items():
        m.train(was_training)
    c = logits.shape[-1]
    expected = math.log(c)
    loss = F.cross_entropy(logits.reshape(-1, c), y.reshape(-1)).item()
    if loss > (1 + tol) * expected:
        verdict = "too_high"
    elif loss < (1 - tol) * expected:
        verdict = "too_low"
    else:
        verdict = "ok"
    return {"expected": expected, "loss": loss, "entropy": output_entropy(logits).item(), "verdict": verdict}
'''

DIAGNOSE_OK = '''
def diagnose(train_curve, val_curve, chance_loss, window=5):
    train = [float(v) for v in train_curve]
    val = [float(v) for v in val_curve]
    if len(train) < 2 * window or len(val) < 2:
        raise ValueError("too short")
    if not all(math.isfinite(v) for v in train + val):
        return "nan"
    c = chance_loss
    end = statistics.median(train[-window:])
    for i in range(window, len(train)):
        before = statistics.median(train[i - window:i])
        if train[i] > before + c / 2:
            if i >= len(train) - window:
                raise ValueError("spike too late")
            if end <= before + c / 4:
                return "spike_recovers"
            if end >= before + c / 2:
                return "spike_stays"
            raise ValueError("ambiguous")
    if end >= 0.8 * c:
        return "chance_plateau"
    if end > 0.2 * c:
        return "both_plateau"
    if val[-1] - end > 0.25 * c:
        return "overfitting"
    return "healthy"
'''

ANSWERS_OK = '''
q1_initial_loss = math.log(1000)
q2_step = 2
q3_row = "overfitting"
'''


# The code a student plausibly stops at once the visible tests are silent (CONTRIBUTING.md, "Tests that are fair
# to students"): each must fail a visible test of its own exercise (tests/test_catalogue.py).
VISIBLE_ONLY = {
    "overfit_one_batch": '''
def overfit_one_batch(model, loader, loss_fn=F.cross_entropy, steps=200, lr=1e-3):
    if steps < 1:
        raise ValueError("steps must be at least 1")
    x, y = next(iter(loader))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
''',
    "gradient_flow_report": '''
def gradient_flow_report(model, compute_loss, threshold=1e-10):
    compute_loss(model).backward()
    report = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            report[name] = "no_grad"
        elif p.grad.abs().max() < threshold:
            report[name] = "vanishing"
    return report
''',
    "init_check": '''
def output_entropy(logits):
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


def init_check(model, x, y, tol=0.1):
    model.eval()
    with torch.no_grad():
        logits = model(x)
    c = logits.shape[-1]
    expected = math.log(c)
    loss = F.cross_entropy(logits.reshape(-1, c), y.reshape(-1)).item()
    verdict = "too_high" if loss > (1 + tol) * expected else "too_low" if loss < (1 - tol) * expected else "ok"
    return {"expected": expected, "loss": loss, "entropy": output_entropy(logits).item(), "verdict": verdict}
''',
    "diagnose": '''
def diagnose(train_curve, val_curve, chance_loss, window=5):
    train = [float(v) for v in train_curve]
    val = [float(v) for v in val_curve]
    if len(train) < 10 or len(val) < 2:
        raise ValueError("too short")
    if not all(math.isfinite(v) for v in train):
        return "nan"
    c = chance_loss
    end = statistics.median(train[-5:])
    for i in range(5, len(train)):
        before = statistics.median(train[i - 5:i])
        if train[i] > before + c / 2:
            if i >= len(train) - 5:
                raise ValueError("spike too late")
            if end <= before + c / 4:
                return "spike_recovers"
            if end >= before + c / 2:
                return "spike_stays"
            raise ValueError("ambiguous")
    if end >= 0.8 * c:
        return "chance_plateau"
    if end > 0.2 * c:
        return "both_plateau"
    if val[-1] - end > 0.25 * c:
        return "overfitting"
    return "healthy"
''',
}


def _swap(source: str, old: str, new: str) -> str:
    """One edit to a correct source; fails loudly if the text to replace is not there exactly once."""
    assert source.count(old) == 1, f"catalogue edit not found exactly once: {old!r}"
    return source.replace(old, new)


BUGS = {
    # --- exercise 1: overfit_one_batch
    "overfit_new_batch_every_step": {"overfit_one_batch": _swap(OVERFIT_OK, '''    for _ in range(steps):
        opt.zero_grad()''', '''    for _ in range(steps):
        x, y = next(iter(loader))          # a fresh batch each step: a shuffling loader gives another one
        opt.zero_grad()''')},
    "overfit_cycles_through_loader": {"overfit_one_batch": _swap(OVERFIT_OK, '''    for _ in range(steps):
        opt.zero_grad()''', '''    batches = iter(loader)
    for _ in range(steps):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        opt.zero_grad()''')},
    "overfit_loss_after_step": {"overfit_one_batch": _swap(OVERFIT_OK, "        losses.append(loss.item())",
        "        with torch.no_grad():\n            losses.append(loss_fn(model(x), y).item())")},
    "overfit_sgd": {"overfit_one_batch": _swap(OVERFIT_OK, "torch.optim.Adam(model.parameters(), lr=lr)",
                                               "torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)")},
    "overfit_returns_tensors": {"overfit_one_batch": _swap(OVERFIT_OK, "losses.append(loss.item())",
                                                           "losses.append(loss.detach())")},
    "overfit_no_steps_check": {"overfit_one_batch": _swap(OVERFIT_OK, '''    if steps < 1:
        raise ValueError("steps must be at least 1")
''', "")},
    "overfit_keeps_eval_mode": {"overfit_one_batch": _swap(OVERFIT_OK, "    model.train()\n", "")},
    "overfit_visible_tests_only": {"overfit_one_batch": VISIBLE_ONLY["overfit_one_batch"]},
    # --- exercise 2: gradient_flow_report
    "flow_keeps_stale_grads": {"gradient_flow_report": _swap(FLOW_OK, '''    for p in model.parameters():
        p.grad = None
''', "")},
    "flow_zeroes_instead_of_none": {"gradient_flow_report": _swap(FLOW_OK, '''    for p in model.parameters():
        p.grad = None''', '''    model.zero_grad(set_to_none=False)''')},
    "flow_inclusive_threshold": {"gradient_flow_report": _swap(FLOW_OK, "p.grad.abs().max() < threshold",
                                                               "p.grad.abs().max() <= threshold")},
    "flow_ignores_nonfinite": {"gradient_flow_report": _swap(FLOW_OK, '''        elif not torch.isfinite(p.grad).all():
            report[name] = "nonfinite"
''', "")},
    "flow_frozen_reported_as_no_grad": {"gradient_flow_report": _swap(FLOW_OK, '''        if not p.requires_grad:
            report[name] = "frozen"
        elif p.grad is None:''', '''        if p.grad is None:
            report[name] = "no_grad"
        elif not p.requires_grad:''')},
    "flow_visible_tests_only": {"gradient_flow_report": VISIBLE_ONLY["gradient_flow_report"]},
    # the spec names the statistic: the largest ABSOLUTE entry (gradients of equal entries cannot tell it apart)
    "flow_mean_abs_entry": {"gradient_flow_report": _swap(FLOW_OK, "p.grad.abs().max() < threshold",
                                                          "p.grad.abs().mean() < threshold")},
    "flow_norm_not_max": {"gradient_flow_report": _swap(FLOW_OK, "p.grad.abs().max() < threshold",
                                                        "p.grad.norm() < threshold")},
    "flow_signed_max": {"gradient_flow_report": _swap(FLOW_OK, "p.grad.abs().max() < threshold", "p.grad.max() < threshold")},
    "flow_nonfinite_only_if_all": {"gradient_flow_report": _swap(FLOW_OK, "not torch.isfinite(p.grad).all()",
                                                                 "not torch.isfinite(p.grad).any()")},
    # rule order: a frozen parameter that still holds an old gradient (only trainable ones cleared: a free choice)
    "flow_frozen_rule_last": {"gradient_flow_report": '''
def gradient_flow_report(model, compute_loss, threshold=1e-10):
    for p in model.parameters():
        if p.requires_grad:
            p.grad = None
    compute_loss(model).backward()
    report = {}
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            report[name] = "nonfinite"
        elif p.grad is not None and p.grad.abs().max() < threshold:
            report[name] = "vanishing"
        elif not p.requires_grad:
            report[name] = "frozen"
        elif p.grad is None:
            report[name] = "no_grad"
    return report
'''},
    "flow_shared_listed_twice": {"gradient_flow_report": _swap(FLOW_OK, "model.named_parameters():",
                                                               "model.named_parameters(remove_duplicate=False):")},
    # --- exercise 3: output_entropy and init_check
    "entropy_log_of_softmax": {"init_check": _swap(INIT_OK, '''    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1).mean()''', '''    p = torch.softmax(logits, dim=-1)
    return -(p * p.log()).sum(-1).mean()''')},
    "entropy_returns_float": {"init_check": _swap(INIT_OK, "torch.zeros_like(p)).sum(-1).mean()",
                                                  "torch.zeros_like(p)).sum(-1).mean().item()")
                              .replace("output_entropy(logits).item()", "float(output_entropy(logits))")},
    "init_loss_in_train_mode": {"init_check": _swap(INIT_OK, "    model.eval()\n", "")},
    "init_loss_not_flattened": {"init_check": _swap(INIT_OK, "F.cross_entropy(logits.reshape(-1, c), y.reshape(-1))",
                                                    "F.cross_entropy(logits, y)")},
    "init_absolute_tolerance": {"init_check": _swap(_swap(INIT_OK, "loss > (1 + tol) * expected", "loss > expected + tol"),
                                                    "loss < (1 - tol) * expected", "loss < expected - tol")},
    "init_returns_tensors": {"init_check": _swap(INIT_OK,
        "loss = F.cross_entropy(logits.reshape(-1, c), y.reshape(-1)).item()",
        "loss = F.cross_entropy(logits.reshape(-1, c), y.reshape(-1))")},
    "init_restores_top_level_mode_only": {"init_check": _swap(INIT_OK, '''    for m, was_training in modes.items():
        m.train(was_training)''', '''    model.train(modes[model])''')},
    "init_visible_tests_only": {"init_check": VISIBLE_ONLY["init_check"]},
    # "both ends of the band are ok", tested with losses exactly on an end
    "init_upper_end_too_high": {"init_check": _swap(INIT_OK, "loss > (1 + tol) * expected", "loss >= (1 + tol) * expected")},
    "init_lower_end_too_low": {"init_check": _swap(INIT_OK, "loss < (1 - tol) * expected", "loss <= (1 - tol) * expected")},
    # --- exercise 4: diagnose
    "diagnose_ignores_val_nonfinite": {"diagnose": _swap(DIAGNOSE_OK, "math.isfinite(v) for v in train + val",
                                                         "math.isfinite(v) for v in train")},
    "diagnose_strict_chance_threshold": {"diagnose": _swap(DIAGNOSE_OK, "if end >= 0.8 * c:", "if end > 0.8 * c:")},
    "diagnose_no_late_spike_error": {"diagnose": _swap(DIAGNOSE_OK, '''            if i >= len(train) - window:
                raise ValueError("spike too late")
''', "")},
    "diagnose_ambiguous_spike_stays": {"diagnose": _swap(DIAGNOSE_OK, '''            if end >= before + c / 2:
                return "spike_stays"
            raise ValueError("ambiguous")''', '''            return "spike_stays"''')},
    "diagnose_gap_from_val_minimum": {"diagnose": _swap(DIAGNOSE_OK, "if val[-1] - end > 0.25 * c:",
                                                        "if val[-1] - min(val) > 0.25 * c:")},
    "diagnose_short_curves_healthy": {"diagnose": _swap(DIAGNOSE_OK, '''    if len(train) < 2 * window or len(val) < 2:
        raise ValueError("too short")
''', '''    if len(train) < 2 * window or len(val) < 2:
        return "healthy"
''')},
    "diagnose_nan_before_length_check": {"diagnose": _swap(_swap(DIAGNOSE_OK, '''    if not all(math.isfinite(v) for v in train + val):
        return "nan"
''', ""), '''    val = [float(v) for v in val_curve]
''', '''    val = [float(v) for v in val_curve]
    if not all(math.isfinite(v) for v in train + val):
        return "nan"
''')},
    "diagnose_last_spike_counts": {"diagnose": _swap(DIAGNOSE_OK, "    for i in range(window, len(train)):",
                                                     "    for i in reversed(range(window, len(train))):")},
    "diagnose_visible_tests_only": {"diagnose": VISIBLE_ONLY["diagnose"]},
    # medians over uneven windows: flat curves cannot tell them from a mean, a lower median or the previous point
    "diagnose_end_is_mean": {"diagnose": _swap(DIAGNOSE_OK, "end = statistics.median(train[-window:])",
                                               "end = statistics.mean(train[-window:])")},
    "diagnose_lower_median": {"diagnose": DIAGNOSE_OK.replace("statistics.median(", "statistics.median_low(")},
    "diagnose_before_is_previous_point": {"diagnose": _swap(DIAGNOSE_OK, "before = statistics.median(train[i - window:i])",
                                                            "before = train[i - 1]")},
    "diagnose_before_window_includes_step": {"diagnose": _swap(DIAGNOSE_OK,
        "before = statistics.median(train[i - window:i])", "before = statistics.median(train[i - window + 1:i + 1])")},
    # rule order where two rules match, the overfitting boundary, tuples
    "diagnose_overfitting_before_both_plateau": {"diagnose": _swap(DIAGNOSE_OK, '''    if end > 0.2 * c:
        return "both_plateau"
    if val[-1] - end > 0.25 * c:
        return "overfitting"''', '''    if val[-1] - end > 0.25 * c:
        return "overfitting"
    if end > 0.2 * c:
        return "both_plateau"''')},
    "diagnose_overfitting_before_spike": {"diagnose": _swap(DIAGNOSE_OK, '''    end = statistics.median(train[-window:])
''', '''    end = statistics.median(train[-window:])
    if end <= 0.2 * c and val[-1] - end > 0.25 * c:     # train good, val bad: checked before the spikes
        return "overfitting"
''')},
    "diagnose_overfitting_inclusive": {"diagnose": _swap(DIAGNOSE_OK, "val[-1] - end > 0.25 * c", "val[-1] - end >= 0.25 * c")},
    "diagnose_tuple_plus_list": {"diagnose": _swap(DIAGNOSE_OK, '''    train = [float(v) for v in train_curve]
    val = [float(v) for v in val_curve]''', '''    train = train_curve.tolist() if isinstance(train_curve, torch.Tensor) else train_curve
    val = val_curve.tolist() if isinstance(val_curve, torch.Tensor) else val_curve''')},
    # --- exercise 5: self-check answers
    "answer_q1_log10": {"answers": _swap(ANSWERS_OK, "math.log(1000)", "math.log10(1000)")},
    "answer_q2_overfit_step": {"answers": _swap(ANSWERS_OK, "q2_step = 2", "q2_step = 1")},
    "answer_q3_both_plateau": {"answers": _swap(ANSWERS_OK, '"overfitting"', '"both_plateau"')},
}

ALTERNATIVE = {
    "overfit_one_batch": '''
def overfit_one_batch(model, loader, loss_fn=F.cross_entropy, steps=200, lr=1e-3):
    if not steps >= 1:
        raise ValueError(f"need at least one step, got {steps}")
    for batch in loader:                  # the first batch only
        inputs, targets = batch[0], batch[1]
        break
    model.train(True)
    optimizer = torch.optim.Adam(params=list(model.parameters()), lr=lr)
    history = []
    step = 0
    while step < steps:
        for p in model.parameters():
            p.grad = None
        out = loss_fn(model(inputs), targets)
        history.append(out.detach().item())
        out.backward()
        optimizer.step()
        step += 1
    return history
''',
    "gradient_flow_report": '''
def gradient_flow_report(model, compute_loss, threshold=1e-10):
    model.zero_grad(set_to_none=True)
    loss = compute_loss(model)
    loss.backward()
    def label(p):
        if not p.requires_grad:
            return "frozen"
        if p.grad is None:
            return "no_grad"
        g = p.grad.detach()
        if torch.isnan(g).any() or torch.isinf(g).any():
            return "nonfinite"
        return "vanishing" if float(g.abs().amax()) < threshold else None
    labelled = ((n, label(p)) for n, p in model.named_parameters())
    return {n: lab for n, lab in labelled if lab is not None}
''',
    "init_check": '''
def output_entropy(logits):
    flat = logits.reshape(-1, logits.shape[-1])
    return torch.distributions.Categorical(logits=flat).entropy().mean()


def init_check(model, x, y, tol=0.1):
    in_eval = [m for m in model.modules() if not m.training]
    with torch.no_grad():
        model.train(False)
        out = model(x)
        model.train(True)
        for m in in_eval:
            m.eval()
        n = out.size(-1)
        nll = -torch.log_softmax(out, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        loss = float(nll.mean())
        ent = float(output_entropy(out))
    lo, hi = (1.0 - tol) * math.log(n), (1.0 + tol) * math.log(n)
    verdict = "too_high" if loss > hi else ("too_low" if loss < lo else "ok")
    return dict(expected=math.log(n), loss=loss, entropy=ent, verdict=verdict)
''',
    "diagnose": '''
def diagnose(train_curve, val_curve, chance_loss, window=5):
    t = torch.as_tensor([float(v) for v in train_curve], dtype=torch.float64)
    v = torch.as_tensor([float(u) for u in val_curve], dtype=torch.float64)
    if t.numel() < 2 * window or v.numel() < 2:
        raise ValueError("curves too short to diagnose")
    if not (torch.isfinite(t).all() and torch.isfinite(v).all()):
        return "nan"
    c = float(chance_loss)
    def med(xs):
        return statistics.median(xs.tolist())
    end = med(t[-window:])
    jumps = [i for i in range(window, t.numel()) if float(t[i]) > med(t[i - window:i]) + c / 2]
    if jumps:
        i = jumps[0]
        before = med(t[i - window:i])
        if i + window >= t.numel():
            raise ValueError("the spike is too recent")
        if end - before <= c / 4:
            return "spike_recovers"
        if end - before >= c / 2:
            return "spike_stays"
        raise ValueError("partly recovered: ambiguous")
    for label, hit in [("chance_plateau", end >= 0.8 * c), ("both_plateau", end > 0.2 * c),
                       ("overfitting", float(v[-1]) - end > 0.25 * c)]:
        if hit:
            return label
    return "healthy"
''',
    "answers": '''
q1_initial_loss = 6.9078
q2_step = 2
q3_row = "overfitting"
''',
}

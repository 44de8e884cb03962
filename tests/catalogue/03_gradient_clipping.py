"""Lab 3 catalogue: plausible buggy implementations, and a correct one written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

# A correct clip that the clip bugs below start from (each bug changes one thing).
CLIP_OK = '''
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm_type = float(norm_type)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total
'''

DETECTOR_OK = '''
class SpikeDetector:
    def __init__(self, window=50, factor=5.0, min_history=10):
        if window < 1 or not 1 <= min_history <= window or factor <= 0:
            raise ValueError("bad arguments")
        self.window, self.factor, self.min_history = window, factor, min_history
        self.history = deque(maxlen=window)

    def is_anomaly(self, grad_norm):
        norm = float(grad_norm)
        if not math.isfinite(norm):
            return True
        if len(self.history) >= self.min_history and norm > self.factor * statistics.median(self.history):
            return True
        self.history.append(norm)
        return False
'''

GUARD_OK = '''
class GuardedStep:
    def __init__(self, optimizer, max_norm, detector=None):
        self.optimizer, self.max_norm, self.detector = optimizer, max_norm, detector
        self.num_steps, self.num_skipped = 0, 0
        self.skip_reasons = {"loss": 0, "grad_norm": 0, "anomaly": 0}
        self.last_grad_norm = math.nan

    def __call__(self, loss):
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.last_grad_norm = float(clip_grad_norm_(params, self.max_norm))
        reason = None
        if not torch.isfinite(loss).all():
            reason = "loss"
        elif not math.isfinite(self.last_grad_norm):
            reason = "grad_norm"
        elif self.detector is not None and self.detector.is_anomaly(self.last_grad_norm):
            reason = "anomaly"
        if reason is None:
            self.optimizer.step()
            self.num_steps += 1
        else:
            self.num_skipped += 1
            self.skip_reasons[reason] += 1
        self.optimizer.zero_grad(set_to_none=True)
        return reason is None
'''

ACCUM_OK = '''
def accumulation_step(model, optimizer, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad(set_to_none=True)
    total = sum(x.shape[0] for x, _ in micro_batches)
    loss_sum = 0.0
    for x, y in micro_batches:
        weight = x.shape[0] / total
        loss = loss_fn(model(x), y)
        (loss * weight).backward()
        loss_sum += loss.item() * weight
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss_sum, float(norm)
'''


# "Stops when the visible tests are silent": the plausible answer to each exercise that passed every visible test of
# the first edition of this lab (the visible tests then did not exercise what the rest of the spec names). Each must
# now fail a visible test of its exercise, with a message that says what to fix.
GUARD_RUNS_OK = '''
def make_guard():
    history = deque(maxlen=20)               # the last 20 norms taken, as clipped: short, so it follows a drift
    count = {"calls": 0, "skipped": 0}

    def guard(parameters, loss: float) -> bool:
        count["calls"] += 1
        grads = [p.grad for p in parameters if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        if not (math.isfinite(loss) and math.isfinite(norm)):
            count["skipped"] += 1
            return False                     # a NaN or inf anywhere would poison the weights (and AdamW's moments)
        if len(history) < 10:                # no fault comes this early: learn the run's scale first
            history.append(norm)
            return True
        typical = statistics.median(history)
        if norm > 10 * typical and count["skipped"] < 0.06 * count["calls"]:
            count["skipped"] += 1            # a spike, and the skip budget allows it: leave that minibatch out
            return False
        if norm > 1.5 * typical:             # anything unusual (noise, a mild or unskippable bad batch): clip it
            with torch.no_grad():
                for g in grads:
                    g.mul_(1.5 * typical / norm)
        history.append(min(norm, 1.5 * typical))   # clipped, so a stretch of bad batches cannot drag the median up
        return True
    return guard
'''

# The first reading of exercise 5's spec: the seed's "max_norm 1.0" and a NaN check on the loss. It throttles the runs
# whose natural norm is far above 1 (SGD then takes steps a thousand times too small), lets spikes through where the
# natural norm is far below 1, and steps on the finite losses whose gradients are not finite.
GUARD_RUNS_FIRST_READING = '''
def make_guard():
    def guard(parameters, loss):
        if not math.isfinite(loss):
            return False
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        return True
    return guard
'''


# The hasty answer (a trial student, three minutes, no lesson read): skip above 10 x the running median, never clip.
# It skips healthy steps where minibatch norms are heavy-tailed, lets mildly bad minibatches through unclipped, and
# cannot skip a long stretch of bad minibatches within the budget.
GUARD_RUNS_HASTY = '''
def make_guard():
    history = deque(maxlen=50)

    def guard(parameters, loss):
        if not math.isfinite(loss):
            return False
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return True
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
        if not math.isfinite(norm):
            return False
        if len(history) >= 20 and norm > 10 * statistics.median(history):
            return False
        history.append(norm)
        return True
    return guard
'''


VISIBLE_ONLY = {
    "make_guard": GUARD_RUNS_FIRST_READING,
    "clip_grad_norm": '''
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total
''',
    "spike_detector": '''
class SpikeDetector:
    def __init__(self, window=50, factor=5.0, min_history=10):
        self.window, self.factor, self.min_history = window, factor, min_history
        self.history = []

    def is_anomaly(self, grad_norm):
        if math.isnan(grad_norm) or math.isinf(grad_norm):
            return True
        if len(self.history) >= self.min_history and grad_norm > self.factor * statistics.median(self.history):
            return True
        self.history.append(grad_norm)
        return False
''',
    "guarded_step": '''
class GuardedStep:
    def __init__(self, optimizer, max_norm, detector=None):
        self.optimizer, self.max_norm, self.detector = optimizer, max_norm, detector
        self.num_steps, self.num_skipped = 0, 0
        self.skip_reasons = {"loss": 0, "grad_norm": 0, "anomaly": 0}

    def __call__(self, loss):
        params = self.optimizer.param_groups[0]["params"]
        self.last_grad_norm = float(clip_grad_norm_(params, self.max_norm))
        if torch.isnan(loss):
            self.num_skipped += 1
            self.skip_reasons["loss"] += 1
            self.optimizer.zero_grad(set_to_none=True)
            return False
        self.optimizer.step()
        self.num_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        return True
''',
    "accumulation_step": '''
def accumulation_step(model, optimizer, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad(set_to_none=True)
    total_loss = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
        total_loss += loss.item()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return total_loss, norm.item()
''',
}


def _swap(source: str, old: str, new: str) -> str:
    """One edit to a correct source; fails loudly if the text to replace is not there exactly once."""
    assert source.count(old) == 1, f"catalogue edit not found exactly once: {old!r}"
    return source.replace(old, new)


BUGS = {
    # --- exercise 1: clip_grad_norm_
    "clip_consumes_generator": {"clip_grad_norm": '''
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    # the seed's manual_gradient_clip: iterates `parameters` twice
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    norms = [torch.linalg.vector_norm(p.grad, float(norm_type)) for p in parameters if p.grad is not None]
    if not norms:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack(norms), float(norm_type))
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in parameters:
        if p.grad is not None:
            p.grad.mul_(coef)
    return total
'''},
    "clip_returns_post_clip_norm": {"clip_grad_norm": _swap(CLIP_OK, "    return total\n", "    return total * coef\n")},
    "clip_branches_on_coef": {"clip_grad_norm": _swap(CLIP_OK, '''    for g in grads:
        g.mul_(coef)''', '''    if coef < 1:                      # the seed's branch: a NaN coefficient never scales anything
        for g in grads:
            g.mul_(coef)''')},
    "clip_each_tensor_separately": {"clip_grad_norm": _swap(CLIP_OK, '''    for g in grads:
        g.mul_(coef)''', '''    for g in grads:
        g.mul_(torch.clamp(max_norm / (torch.linalg.vector_norm(g, norm_type) + 1e-6), max=1.0))''')},
    "clip_power_sum_breaks_inf_norm": {"clip_grad_norm": _swap(CLIP_OK,
        "    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type)",
        "    total = sum(g.abs().pow(norm_type).sum() for g in grads) ** (1.0 / norm_type)")},
    "clip_selects_by_requires_grad": {"clip_grad_norm": _swap(CLIP_OK,
        "    grads = [p.grad for p in parameters if p.grad is not None]",
        "    grads = [p.grad for p in parameters if p.requires_grad]")},
    "clip_raises_after_scaling": {"clip_grad_norm": _swap(CLIP_OK, '''    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)''', '''    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")''')},
    "clip_ignores_error_if_nonfinite": {"clip_grad_norm": _swap(CLIP_OK, '''    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")
''', "")},
    "clip_replaces_grad_tensors": {"clip_grad_norm": '''
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    params = [p for p in params if p.grad is not None]
    if not params:
        return torch.tensor(0.0)
    norm_type = float(norm_type)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad, norm_type) for p in params]), norm_type)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError("non-finite total norm")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        p.grad = p.grad * coef            # a new tensor, not in place
    return total
'''},
    "clip_without_epsilon": {"clip_grad_norm": _swap(CLIP_OK, "max_norm / (total + 1e-6)", "max_norm / total")},
    "clip_iterates_a_single_tensor": {"clip_grad_norm": _swap(CLIP_OK, '''    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
''', "")},
    "clip_visible_tests_only": {"clip_grad_norm": VISIBLE_ONLY["clip_grad_norm"]},
    "clip_returns_python_float": {"clip_grad_norm": _swap(CLIP_OK, "    return total\n", "    return total.item()\n")},
    "clip_no_grads_returns_python_zero": {"clip_grad_norm": _swap(CLIP_OK, "        return torch.tensor(0.0)\n",
                                                                  "        return 0.0\n")},
    "clip_raises_only_on_nan": {"clip_grad_norm": _swap(CLIP_OK, "if error_if_nonfinite and not torch.isfinite(total):",
                                                        "if error_if_nonfinite and torch.isnan(total):")},
    "clip_default_raises_on_nonfinite": {"clip_grad_norm": _swap(CLIP_OK, "error_if_nonfinite=False):",
                                                                 "error_if_nonfinite=True):")},
    # --- exercise 2: SpikeDetector
    "detector_records_anomalies": {"spike_detector": _swap(DETECTOR_OK, '''            return True
        self.history.append(norm)''', '''            self.history.append(norm)
            return True
        self.history.append(norm)''')},
    "detector_mean_not_median": {"spike_detector": _swap(DETECTOR_OK, "statistics.median(self.history)",
                                                         "statistics.fmean(self.history)")},
    "detector_lower_median": {"spike_detector": _swap(DETECTOR_OK, "statistics.median(self.history)",
                                                      "float(torch.tensor(list(self.history)).median())")},
    "detector_unbounded_history": {"spike_detector": _swap(DETECTOR_OK, "deque(maxlen=window)", "deque()")},
    "detector_nan_slips_through": {"spike_detector": _swap(DETECTOR_OK, '''        if not math.isfinite(norm):
            return True
''', "")},
    "detector_flags_at_equality": {"spike_detector": _swap(DETECTOR_OK, "norm > self.factor", "norm >= self.factor")},
    "detector_no_warmup": {"spike_detector": _swap(DETECTOR_OK, "len(self.history) >= self.min_history",
                                                   "len(self.history) > 0")},
    "detector_visible_tests_only": {"spike_detector": VISIBLE_ONLY["spike_detector"]},
    "detector_rejects_min_history_equal_to_window": {"spike_detector": _swap(DETECTOR_OK, "not 1 <= min_history <= window",
                                                                             "not 1 <= min_history < window")},
    "detector_rejects_window_one": {"spike_detector": _swap(DETECTOR_OK, "if window < 1 or", "if window <= 1 or")},
    "detector_accepts_zero_factor": {"spike_detector": _swap(DETECTOR_OK, "factor <= 0", "factor < 0")},
    "detector_misses_negative_inf": {"spike_detector": _swap(DETECTOR_OK, "        if not math.isfinite(norm):\n",
                                                             "        if norm != norm or norm == math.inf:\n")},
    "detector_default_min_history_five": {"spike_detector": _swap(DETECTOR_OK, "min_history=10):", "min_history=5):")},
    "detector_records_tensors": {"spike_detector": _swap(DETECTOR_OK, "        self.history.append(norm)\n",
                                                         "        self.history.append(grad_norm)\n")},
    # --- exercise 3: GuardedStep
    "guard_checks_only_the_loss": {"guarded_step": _swap(GUARD_OK, '''        elif not math.isfinite(self.last_grad_norm):
            reason = "grad_norm"
''', "")},
    "guard_zeroes_grads_and_steps_anyway": {"guarded_step": _swap(GUARD_OK, '''        if reason is None:
            self.optimizer.step()
            self.num_steps += 1
        else:
            self.num_skipped += 1
            self.skip_reasons[reason] += 1''', '''        if reason is None:
            self.num_steps += 1
        else:
            self.optimizer.zero_grad(set_to_none=False)   # "skip" by zeroing the gradient ...
            self.num_skipped += 1
            self.skip_reasons[reason] += 1
        self.optimizer.step()                              # ... and stepping anyway''')},
    "guard_never_clips": {"guarded_step": _swap(GUARD_OK,
        "        self.last_grad_norm = float(clip_grad_norm_(params, self.max_norm))",
        "        self.last_grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))")},
    "guard_keeps_bad_gradients": {"guarded_step": _swap(GUARD_OK, '''            self.skip_reasons[reason] += 1
        self.optimizer.zero_grad(set_to_none=True)
        return reason is None''', '''            self.skip_reasons[reason] += 1
            return False
        self.optimizer.zero_grad(set_to_none=True)
        return True''')},
    "guard_asks_detector_first": {"guarded_step": _swap(GUARD_OK, '''        reason = None
        if not torch.isfinite(loss).all():''', '''        reason = None
        if self.detector is not None and self.detector.is_anomaly(self.last_grad_norm):
            reason = "anomaly"
        elif not torch.isfinite(loss).all():''')},
    "guard_counts_every_call_as_a_step": {"guarded_step": _swap(GUARD_OK, '''            self.optimizer.step()
            self.num_steps += 1
        else:''', '''            self.optimizer.step()
        else:''').replace("        self.optimizer.zero_grad(set_to_none=True)\n        return reason is None",
                          "        self.num_steps += 1\n        self.optimizer.zero_grad(set_to_none=True)\n        return reason is None")},
    "guard_steps_then_checks": {"guarded_step": '''
class GuardedStep:
    def __init__(self, optimizer, max_norm, detector=None):
        self.optimizer, self.max_norm, self.detector = optimizer, max_norm, detector
        self.num_steps, self.num_skipped = 0, 0
        self.skip_reasons = {"loss": 0, "grad_norm": 0, "anomaly": 0}
        self.last_grad_norm = math.nan

    def __call__(self, loss):
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.last_grad_norm = float(clip_grad_norm_(params, self.max_norm))
        self.optimizer.step()                      # checked too late: the damage is done
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss).all():
            reason = "loss"
        elif not math.isfinite(self.last_grad_norm):
            reason = "grad_norm"
        elif self.detector is not None and self.detector.is_anomaly(self.last_grad_norm):
            reason = "anomaly"
        else:
            self.num_steps += 1
            return True
        self.num_skipped += 1
        self.skip_reasons[reason] += 1
        return False
'''},
    "guard_visible_tests_only": {"guarded_step": VISIBLE_ONLY["guarded_step"]},
    # the detector asked about the wrong number: the loss, or the norm after clipping (at most max_norm)
    "guard_detector_sees_the_loss": {"guarded_step": _swap(GUARD_OK, "self.detector.is_anomaly(self.last_grad_norm)",
                                                           "self.detector.is_anomaly(float(loss))")},
    "guard_detector_sees_the_clipped_norm": {"guarded_step": _swap(GUARD_OK, "self.detector.is_anomaly(self.last_grad_norm)",
                                                                   "self.detector.is_anomaly(min(self.last_grad_norm, float(self.max_norm)))")},
    "guard_clips_first_param_group_only": {"guarded_step": _swap(GUARD_OK,
        '        params = [p for group in self.optimizer.param_groups for p in group["params"]]',
        '        params = self.optimizer.param_groups[0]["params"]')},
    "guard_loss_checked_for_nan_only": {"guarded_step": _swap(GUARD_OK, "        if not torch.isfinite(loss).all():",
                                                              "        if torch.isnan(loss).any():")},
    "guard_ignores_the_loss": {"guarded_step": _swap(GUARD_OK, '''        if not torch.isfinite(loss).all():
            reason = "loss"
        elif not math.isfinite(self.last_grad_norm):''', '''        if not math.isfinite(self.last_grad_norm):''')},
    "guard_keeps_the_norm_as_a_tensor": {"guarded_step": _swap(GUARD_OK,
        "        self.last_grad_norm = float(clip_grad_norm_(params, self.max_norm))",
        "        self.last_grad_norm = clip_grad_norm_(params, self.max_norm)").replace(
        "math.isfinite(self.last_grad_norm)", "torch.isfinite(self.last_grad_norm)")},
    "guard_returns_a_tensor": {"guarded_step": '''
class GuardedStep:
    def __init__(self, optimizer, max_norm, detector=None):
        self.optimizer, self.max_norm, self.detector = optimizer, max_norm, detector
        self.num_steps, self.num_skipped = 0, 0
        self.skip_reasons = {"loss": 0, "grad_norm": 0, "anomaly": 0}

    def __call__(self, loss):
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        norm = clip_grad_norm_(params, self.max_norm)
        self.last_grad_norm = float(norm)
        ok = torch.isfinite(loss).all() & torch.isfinite(norm)        # a 0-dim bool tensor
        if not torch.isfinite(loss).all():
            self.skip_reasons["loss"] += 1
        elif not torch.isfinite(norm):
            self.skip_reasons["grad_norm"] += 1
        elif self.detector is not None and self.detector.is_anomaly(self.last_grad_norm):
            self.skip_reasons["anomaly"] += 1
            ok = torch.tensor(False)
        if ok:
            self.optimizer.step()
            self.num_steps += 1
        else:
            self.num_skipped += 1
        self.optimizer.zero_grad(set_to_none=True)
        return ok
'''},
    # --- exercise 4: accumulation_step
    "accum_divides_by_number_of_micro_batches": {"accumulation_step": _swap(ACCUM_OK,
        "        weight = x.shape[0] / total", "        weight = 1 / len(micro_batches)")},
    "accum_no_loss_scaling": {"accumulation_step": _swap(ACCUM_OK, "        (loss * weight).backward()",
                                                         "        loss.backward()")},
    "accum_clips_every_micro_batch": {"accumulation_step": _swap(ACCUM_OK, '''        (loss * weight).backward()
        loss_sum += loss.item() * weight
    norm = clip_grad_norm_(model.parameters(), max_norm)''', '''        (loss * weight).backward()
        loss_sum += loss.item() * weight
        norm = clip_grad_norm_(model.parameters(), max_norm)''')},
    "accum_keeps_stale_gradients": {"accumulation_step": _swap(ACCUM_OK, "    optimizer.zero_grad(set_to_none=True)\n", "")},
    "accum_returns_last_micro_batch_loss": {"accumulation_step": _swap(ACCUM_OK, "    return loss_sum, float(norm)",
                                                                       "    return loss.item(), float(norm)")},
    "accum_one_forward_on_the_whole_batch": {"accumulation_step": '''
def accumulation_step(model, optimizer, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad(set_to_none=True)
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    loss = loss_fn(model(x), y)
    loss.backward()
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item(), float(norm)
'''},
    "accum_visible_tests_only": {"accumulation_step": VISIBLE_ONLY["accumulation_step"]},
    "accum_returns_tensors": {"accumulation_step": _swap(ACCUM_OK, '''        loss_sum += loss.item() * weight
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss_sum, float(norm)''', '''        loss_sum += loss.detach() * weight
    norm = clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss_sum, norm''')},
    "accum_returns_post_clip_norm": {"accumulation_step": _swap(ACCUM_OK, "    return loss_sum, float(norm)",
        "    return loss_sum, float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])))")},
    # --- exercise 5: make_guard (graded by the runs; each loses bands of its own exercise only)
    "guard_runs_first_reading": {"make_guard": GUARD_RUNS_FIRST_READING},
    # thresholds tuned by eye on one run: right where the natural norm is near 1, wrong a thousand times above or below
    "hasty_median_skip": {"make_guard": GUARD_RUNS_HASTY},
    # thresholds tuned by eye on one run: right where the natural norm is near 1, wrong a thousand times above or below
    "guard_runs_fixed_thresholds": {"make_guard": _swap(GUARD_RUNS_OK, "        typical = statistics.median(history)\n",
                                                        "        typical = 1.0\n")},
    # only the loss checked: an infinite input can give a finite loss and NaN gradients, which then get stepped
    "guard_runs_checks_only_the_loss": {"make_guard": _swap(GUARD_RUNS_OK, "if not (math.isfinite(loss) and math.isfinite(norm)):",
                                                            "if not math.isfinite(loss):")},
    # every norm twice the typical one skipped, with no budget: ordinary noise, and the run skips far too many steps
    "guard_runs_skips_too_eagerly": {"make_guard": _swap(GUARD_RUNS_OK,
        'norm > 10 * typical and count["skipped"] < 0.06 * count["calls"]', "norm > 2 * typical")},
    # skips every spike with no budget and never clips: a long stretch of bad minibatches, or many mild ones, sink it
    "guard_runs_skips_never_clips": {"make_guard": _swap(GUARD_RUNS_OK,
        'norm > 10 * typical and count["skipped"] < 0.06 * count["calls"]', "norm > 3 * typical").replace(
        "        if norm > 1.5 * typical:", "        if False:")},
    # the verdict as a 0-dim tensor: the runs refuse it (the spec asks for a Python bool)
    "guard_runs_returns_a_tensor": {"make_guard": _swap(GUARD_RUNS_OK, "1.5 * typical))   # clipped, so a stretch of bad batches cannot drag the median up\n        return True",
                                                        "1.5 * typical))\n        return torch.tensor(True)")},
    # --- exercise 6: self-check answers
    "answer_q1_l2_instead_of_inf": {"answers": '''
q1_inf_norm = 13.0
q2_first_entry_after_clip = 1.5
q3_small_micro_batch_weight = 0.25
'''},
    "answer_q2_forgets_to_clip": {"answers": '''
q1_inf_norm = 12.0
q2_first_entry_after_clip = 3.0
q3_small_micro_batch_weight = 0.25
'''},
    "answer_q3_one_over_n": {"answers": '''
q1_inf_norm = 12.0
q2_first_entry_after_clip = 1.5
q3_small_micro_batch_weight = 1 / 3
'''},
}

# Correct, but written differently from the reference: one flattened vector for the norm, a sorted-list
# median, a guard built around a tensor-valued check, and accumulation through a detached running sum.
ALTERNATIVE = {
    "clip_grad_norm": '''
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    params = [parameters] if torch.is_tensor(parameters) else tuple(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if len(grads) == 0:
        return torch.tensor(0.0)
    flat = torch.cat([g.reshape(-1) for g in grads])
    if math.isinf(norm_type):
        total = flat.abs().max()
    else:
        total = flat.abs().pow(norm_type).sum().pow(1.0 / norm_type)
    if error_if_nonfinite and (total.isnan() or total.isinf()):
        raise RuntimeError(f"cannot clip gradients whose total norm is {total.item()}")
    scale = torch.minimum(max_norm / (total + 1e-6), torch.ones_like(total))
    for g in grads:
        g.mul_(scale)
    return total
''',
    "spike_detector": '''
class SpikeDetector:
    def __init__(self, window=50, factor=5.0, min_history=10):
        if not (window >= 1 and 1 <= min_history <= window and factor > 0):
            raise ValueError(f"invalid detector settings {window}, {factor}, {min_history}")
        self.window, self.factor, self.min_history = window, factor, min_history
        self.history = []

    def _median(self):
        s = sorted(self.history)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])

    def is_anomaly(self, grad_norm):
        value = float(grad_norm)
        spike = (value != value or value in (math.inf, -math.inf)
                 or (len(self.history) >= self.min_history and value > self.factor * self._median()))
        if not spike:
            self.history = (self.history + [value])[-self.window:]
        return spike
''',
    "guarded_step": '''
class GuardedStep:
    REASONS = ("loss", "grad_norm", "anomaly")

    def __init__(self, optimizer, max_norm, detector=None):
        self.optimizer = optimizer
        self.max_norm = max_norm
        self.detector = detector
        self.skip_reasons = dict.fromkeys(self.REASONS, 0)
        self.num_steps = 0
        self.last_grad_norm = float("nan")

    @property
    def num_skipped(self):
        return sum(self.skip_reasons.values())

    def _reason(self, loss, norm):
        if not bool(torch.isfinite(loss).all()):
            return "loss"
        if not bool(torch.isfinite(norm)):
            return "grad_norm"
        if self.detector is not None and self.detector.is_anomaly(float(norm)):
            return "anomaly"
        return None

    def __call__(self, loss):
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        norm = clip_grad_norm_(params, self.max_norm)
        self.last_grad_norm = float(norm)
        reason = self._reason(loss, norm)
        try:
            if reason is None:
                self.optimizer.step()
                self.num_steps += 1
                return True
            self.skip_reasons[reason] += 1
            return False
        finally:
            self.optimizer.zero_grad(set_to_none=True)
''',
    "accumulation_step": '''
def accumulation_step(model, optimizer, micro_batches, loss_fn, max_norm):
    for p in model.parameters():
        p.grad = None
    sizes = [len(x) for x, _ in micro_batches]
    n_total = float(sum(sizes))
    running = torch.zeros((), dtype=torch.float64)
    for (x, y), n in zip(micro_batches, sizes):
        part = loss_fn(model(x), y) * (n / n_total)
        part.backward()
        running += part.detach().double().cpu()
    pre_clip = clip_grad_norm_(list(model.parameters()), max_norm)
    optimizer.step()
    return float(running), pre_clip.item()
''',
    # the log of the norm against its exponential moving mean and spread: clip above mean + spread, skip far above
    # it within a budget of 6 % of the steps so far
    "make_guard": '''
def make_guard():
    state = {"n": 0, "mean": 0.0, "var": 0.0, "calls": 0, "skipped": 0}

    def guard(parameters, loss):
        state["calls"] += 1
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in parameters if p.grad is not None))
        if not (math.isfinite(loss) and math.isfinite(norm)) or norm == 0.0:
            state["skipped"] += 1
            return False
        log_norm = math.log(norm)
        if state["n"] >= 10:
            if log_norm > state["mean"] + 2.3 and state["skipped"] < 0.06 * state["calls"]:
                state["skipped"] += 1
                return False
            cap = state["mean"] + min(math.sqrt(state["var"]), 0.4) + 0.2
            if log_norm > cap:
                torch.nn.utils.clip_grad_norm_(parameters, math.exp(cap))
                log_norm = cap
        state["n"] += 1
        if state["n"] == 1:
            state["mean"] = log_norm
        delta = log_norm - state["mean"]
        state["mean"] += 0.1 * delta
        state["var"] = 0.9 * (state["var"] + 0.1 * delta * delta)
        return True
    return guard
''',
    "answers": '''
q1_inf_norm = 12
q2_first_entry_after_clip = 1.5
q3_small_micro_batch_weight = 4 / (6 + 6 + 4)
''',
}

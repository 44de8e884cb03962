"""Lab 2 catalogue: plausible buggy schedules, and a correct implementation written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

# A correct warmup + cosine, written so that single lines can be swapped for plausible mistakes.
WC_OK = '''
def warmup_cosine_lr(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < 0 or warmup_steps < 0 or total_steps <= warmup_steps or not 0 <= min_lr <= max_lr:
        raise ValueError("bad schedule")
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step > total_steps:
        return float(min_lr)
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
'''

LAMBDA_OK = '''
def warmup_cosine_lambdalr(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    if not 0 <= min_lr_ratio <= 1 or warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError("bad schedule")
    W, T, r = warmup_steps, total_steps, min_lr_ratio
    def factor(step):
        if step < W:
            return (step + 1) / (W + 1)
        if step > T:
            return r
        cosine = 0.5 * (1.0 + math.cos(math.pi * (step - W) / (T - W)))
        return r + (1 - r) * cosine
    return LambdaLR(optimizer, factor)
'''

NOAM_OK = '''
class NoamLR(LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, last_epoch=-1):
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError("bad Noam arguments")
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        n = self.last_epoch + 1
        factor = self.d_model ** -0.5 * min(n ** -0.5, n * self.warmup_steps ** -1.5)
        return [base * factor for base in self.base_lrs]
'''

WSD_OK = '''
def wsd_lr(step, max_lr, min_lr, warmup_steps, decay_steps, total_steps):
    if step < 0 or warmup_steps < 0 or decay_steps < 1 or warmup_steps + decay_steps > total_steps \\
            or not 0 <= min_lr <= max_lr:
        raise ValueError("bad WSD schedule")
    start = total_steps - decay_steps
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step <= start:
        return float(max_lr)
    if step <= total_steps:
        return max_lr + (min_lr - max_lr) * (step - start) / decay_steps
    return float(min_lr)
'''

SCALED_OK = '''
def scaled_lr(base_lr, base_batch_size, batch_size, rule="linear", sqrt_above=8.0):
    if base_batch_size <= 0 or batch_size <= 0 or base_lr < 0 or sqrt_above < 1:
        raise ValueError("bad arguments")
    k = batch_size / base_batch_size
    if rule == "linear":
        return float(base_lr * k)
    if rule == "sqrt":
        return float(base_lr * math.sqrt(k))
    if rule == "hybrid":
        return float(base_lr * (k if k <= sqrt_above else sqrt_above * math.sqrt(k / sqrt_above)))
    raise ValueError(rule)
'''

ANSWERS_OK = '''
q1_noam_peak = 512 ** -0.5 * 4000 ** -0.5
q2_first_step_lr = 0.0
q3_clip_fraction = math.acos(-0.8) / math.pi
'''


def swap(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced by ``new``; ``old`` must occur (so a catalogue edit cannot silently no-op)."""
    assert old in source, f"catalogue: {old!r} not found"
    return source.replace(old, new)


# Exercise 6 (choose_schedule): one scale rule with warmup and cosine to 0, written so that each hasty or
# mistaken decision is one swap. The rule is the reference's: fitted on the visible runs.
SCHEDULE_OK = '''
def choose_schedule(total_steps, batch_size, width):
    peak = 0.03 * (batch_size / 32) ** 0.22 * (total_steps / 300) ** -0.54 * (width / 64) ** -0.22
    warmup = max(1, round(0.05 * total_steps))

    def schedule(step):
        if step < warmup:
            return peak * (step + 1) / (warmup + 1)
        return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (total_steps - warmup)))
    return schedule
'''

# The best peak of each visible run (its reference sweep), remembered; any other run gets the base run's 0.03.
SCHEDULE_MEMORISED = swap(SCHEDULE_OK, "    peak = 0.03 * (batch_size / 32) ** 0.22 * (total_steps / 300) ** -0.54 * (width / 64) ** -0.22\n",
                          """    best = {(300, 32, 64): 0.0316, (80, 64, 64): 0.0562, (1200, 16, 64): 0.01, (300, 4, 32): 0.0316,
            (150, 512, 64): 0.1, (300, 32, 256): 0.0178, (400, 64, 16): 0.0316, (600, 128, 128): 0.0316}
    peak = best.get((total_steps, batch_size, width), 0.03)
""")


# The "visible-tests-only" answers: plausible code that silenced every visible test of the lab before the
# visible tests covered the whole spec (issue: such a student scored 6/14). Each must now fail a visible test.
# (That student's warmup_cosine_lambdalr, which called warmup_cosine_lr with max_lr=1, was right: not a bug.)
VISIBLE_ONLY = {
    "warmup_cosine_lr": '''
def warmup_cosine_lr(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step > total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
''',
    "noam": '''
class NoamLR(LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, last_epoch=-1):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        n = self.last_epoch + 1
        return [base * self.d_model ** -0.5 * min(n ** -0.5, n * self.warmup_steps ** -1.5) for base in self.base_lrs]
''',
    "wsd_lr": '''
def wsd_lr(step, max_lr, min_lr, warmup_steps, decay_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step <= total_steps - decay_steps:
        return max_lr
    if step <= total_steps:
        return max_lr + (min_lr - max_lr) * (step - (total_steps - decay_steps)) / decay_steps
    return min_lr
''',
    "scaled_lr": '''
def scaled_lr(base_lr, base_batch_size, batch_size, rule="linear", sqrt_above=8.0):
    k = batch_size / base_batch_size
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    return base_lr * k
''',
    # exercise 6's first reading: warmup + cosine "with the usual values" (peak 3e-4, warmup 10 %, floor 10 %), the
    # same whatever the run; valid at every step, so only the runs tell (every visible run misses)
    "choose_schedule": '''
def choose_schedule(total_steps, batch_size, width):
    warmup = int(0.1 * total_steps)

    def schedule(step):
        if step < warmup:
            return 3e-4 * (step + 1) / (warmup + 1)
        progress = (step - warmup) / (total_steps - warmup)
        return 3e-5 + (3e-4 - 3e-5) * 0.5 * (1 + math.cos(math.pi * progress))
    return schedule
''',
}


BUGS = {
    # --- exercise 1: warmup_cosine_lr
    "wc_off_by_one_warmup": {"warmup_cosine_lr": swap(WC_OK, "(step + 1) / (warmup_steps + 1)", "step / warmup_steps")},
    "wc_warmup_peaks_one_step_early": {"warmup_cosine_lr": swap(WC_OK, "(step + 1) / (warmup_steps + 1)",
                                                                 "(step + 1) / warmup_steps")},
    "wc_wrong_cosine_period": {"warmup_cosine_lr": swap(WC_OK, "(step - warmup_steps) / (total_steps - warmup_steps)",
                                                         "(step - warmup_steps) / total_steps")},
    "wc_full_period_cosine": {"warmup_cosine_lr": swap(WC_OK, "math.cos(math.pi * progress)",
                                                        "math.cos(2 * math.pi * progress)")},
    "wc_no_floor_past_end": {"warmup_cosine_lr": swap(WC_OK, "    if step > total_steps:\n        return float(min_lr)\n", "")},
    "wc_seed_clipped_cosine": {"warmup_cosine_lr": swap(
        WC_OK, "return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))",
        "return max(min_lr, max_lr * 0.5 * (1.0 + math.cos(math.pi * progress)))")},
    "wc_no_validation": {"warmup_cosine_lr": swap(
        WC_OK, '''    if step < 0 or warmup_steps < 0 or total_steps <= warmup_steps or not 0 <= min_lr <= max_lr:
        raise ValueError("bad schedule")
''', "")},
    "wc_visible_tests_only": {"warmup_cosine_lr": VISIBLE_ONLY["warmup_cosine_lr"]},
    "wc_returns_int_floor": {"warmup_cosine_lr": swap(WC_OK, "return float(min_lr)", "return min_lr")},
    "wc_rejects_min_lr_equal_to_max_lr": {"warmup_cosine_lr": swap(WC_OK, "not 0 <= min_lr <= max_lr",
                                                                    "not 0 <= min_lr < max_lr")},
    "wc_rejects_zero_min_lr": {"warmup_cosine_lr": swap(WC_OK, "not 0 <= min_lr <= max_lr", "not 0 < min_lr <= max_lr")},
    "wc_accepts_total_equal_to_warmup": {"warmup_cosine_lr": swap(WC_OK, "total_steps <= warmup_steps",
                                                                   "total_steps < warmup_steps")},
    # --- exercise 2: warmup_cosine_lambdalr
    "lam_hf_starts_at_zero": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, "return (step + 1) / (W + 1)",
                                                               "return step / max(1, W)")},
    "lam_seed_clipped_cosine": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, "return r + (1 - r) * cosine",
                                                                 "return max(r, cosine)")},
    "lam_returns_lr_not_factor": {"warmup_cosine_lambdalr": '''
def warmup_cosine_lambdalr(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    if not 0 <= min_lr_ratio <= 1 or warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError("bad schedule")
    peak = optimizer.param_groups[0]["lr"]
    return LambdaLR(optimizer, lambda s: warmup_cosine_lr(s, peak, min_lr_ratio * peak, warmup_steps, total_steps))
'''},
    "lam_shared_absolute_floor": {"warmup_cosine_lambdalr": '''
def warmup_cosine_lambdalr(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    # like CosineAnnealingLR's eta_min: one absolute floor (taken from the first group) for every group
    if not 0 <= min_lr_ratio <= 1 or warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError("bad schedule")
    floor = min_lr_ratio * optimizer.param_groups[0]["lr"]
    lambdas = [lambda s, base=g["lr"]: warmup_cosine_lr(s, base, min(floor, base), warmup_steps, total_steps) / base
               for g in optimizer.param_groups]
    return LambdaLR(optimizer, lambdas)
'''},
    "lam_steps_once_in_factory": {"warmup_cosine_lambdalr": swap(
        LAMBDA_OK, "    return LambdaLR(optimizer, factor)",
        "    sched = LambdaLR(optimizer, factor)\n    sched.step()  # 'skip' step 0\n    return sched")},
    "lam_no_floor_past_end": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, "        if step > T:\n            return r\n", "")},
    "lam_default_ratio_zero": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, "min_lr_ratio=0.1):", "min_lr_ratio=0.0):")},
    "lam_rejects_ratio_one": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, "not 0 <= min_lr_ratio <= 1",
                                                             "not 0 <= min_lr_ratio < 1")},
    "lam_no_validation": {"warmup_cosine_lambdalr": swap(LAMBDA_OK, '''    if not 0 <= min_lr_ratio <= 1 or warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError("bad schedule")
''', "")},
    # --- exercise 3: NoamLR
    "noam_seed_step_clamp": {"noam": swap(NOAM_OK, "n = self.last_epoch + 1", "n = max(self.last_epoch, 1)")},
    "noam_ignores_base_lrs": {"noam": swap(NOAM_OK, "return [base * factor for base in self.base_lrs]",
                                           "return [factor for _ in self.optimizer.param_groups]")},
    "noam_compounds_current_lr": {"noam": swap(NOAM_OK, "return [base * factor for base in self.base_lrs]",
                                               'return [group["lr"] * factor for group in self.optimizer.param_groups]')},
    "noam_missing_d_model_factor": {"noam": swap(NOAM_OK, "factor = self.d_model ** -0.5 * min(", "factor = min(")},
    "noam_step_zero_division": {"noam": swap(NOAM_OK, "n = self.last_epoch + 1", "n = self.last_epoch")},
    "noam_visible_tests_only": {"noam": VISIBLE_ONLY["noam"]},
    "noam_drops_last_epoch": {"noam": swap(NOAM_OK, "super().__init__(optimizer, last_epoch)", "super().__init__(optimizer)")},
    "noam_rejects_warmup_of_one": {"noam": swap(NOAM_OK, "if d_model <= 0 or warmup_steps <= 0:",
                                                "if d_model <= 0 or warmup_steps <= 1:")},
    "noam_rejects_only_zero": {"noam": swap(NOAM_OK, "if d_model <= 0 or warmup_steps <= 0:",
                                            "if d_model == 0 or warmup_steps == 0:")},
    # --- exercise 4: wsd_lr
    "wsd_decay_goes_negative": {"wsd_lr": swap(WSD_OK, "    if step <= total_steps:\n        return max_lr", "    if True:\n        return max_lr")},
    "wsd_decays_from_end_of_warmup": {"wsd_lr": swap(WSD_OK, "start = total_steps - decay_steps",
                                                     "start = warmup_steps")},
    "wsd_floor_one_step_early": {"wsd_lr": swap(WSD_OK, "(step - start) / decay_steps",
                                                "(min(1.0, (step - start) / (decay_steps - 1)) if decay_steps > 1 else 1.0)")},
    "wsd_off_by_one_warmup": {"wsd_lr": swap(WSD_OK, "(step + 1) / (warmup_steps + 1)", "step / warmup_steps")},
    "wsd_decays_to_zero": {"wsd_lr": swap(WSD_OK, "return max_lr + (min_lr - max_lr) * (step - start) / decay_steps",
                                          "return max_lr * (1 - (step - start) / decay_steps)")},
    "wsd_visible_tests_only": {"wsd_lr": VISIBLE_ONLY["wsd_lr"]},
    "wsd_returns_int_peak": {"wsd_lr": swap(WSD_OK, "return float(max_lr)", "return max_lr")},
    "wsd_rejects_no_stable_phase": {"wsd_lr": swap(WSD_OK, "warmup_steps + decay_steps > total_steps",
                                                   "warmup_steps + decay_steps >= total_steps")},
    "wsd_accepts_zero_decay_steps": {"wsd_lr": swap(WSD_OK, "decay_steps < 1", "decay_steps < 0")},
    # --- exercise 5: scaled_lr
    "scale_seed_discontinuous_hybrid": {"scaled_lr": swap(
        SCALED_OK, "(k if k <= sqrt_above else sqrt_above * math.sqrt(k / sqrt_above))",
        "(k if k <= sqrt_above else math.sqrt(k))")},
    "scale_integer_ratio": {"scaled_lr": swap(SCALED_OK, "k = batch_size / base_batch_size",
                                              "k = batch_size // base_batch_size")},
    "scale_inverted_ratio": {"scaled_lr": swap(SCALED_OK, "k = batch_size / base_batch_size",
                                               "k = base_batch_size / batch_size")},
    "scale_unknown_rule_is_linear": {"scaled_lr": swap(SCALED_OK, "    raise ValueError(rule)",
                                                       "    return float(base_lr * k)")},
    "scale_visible_tests_only": {"scaled_lr": VISIBLE_ONLY["scaled_lr"]},
    "scale_rejects_zero_base_lr": {"scaled_lr": swap(SCALED_OK, "base_lr < 0", "base_lr <= 0")},
    "scale_rejects_sqrt_above_one": {"scaled_lr": swap(SCALED_OK, "sqrt_above < 1", "sqrt_above <= 1")},
    # checks sqrt_above only where the hybrid rule uses it
    "scale_sqrt_above_checked_for_hybrid_only": {"scaled_lr": swap(swap(SCALED_OK,
        " or sqrt_above < 1:", ":"),
        "    if rule == \"hybrid\":\n", "    if rule == \"hybrid\":\n        if sqrt_above < 1:\n            raise ValueError(\"sqrt_above\")\n")},
    "scale_default_sqrt_above_ignored": {"scaled_lr": swap(SCALED_OK, 'rule="linear", sqrt_above=8.0):',
                                                           'rule="linear", sqrt_above=4.0):')},
    # --- exercise 6: choose_schedule (graded by the runs)
    "schedule_visible_tests_only": {"choose_schedule": VISIBLE_ONLY["choose_schedule"]},
    # Adam's default lr, constant: no warmup, no decay, no scale rule
    "schedule_constant_adam_default": {"choose_schedule": '''
def choose_schedule(total_steps, batch_size, width):
    return lambda step: 1e-3
'''},
    # the peak tuned on the first visible run and kept for every run: the budget, batch and width ignored
    "schedule_one_peak_for_every_run": {"choose_schedule": swap(
        SCHEDULE_OK, "0.03 * (batch_size / 32) ** 0.22 * (total_steps / 300) ** -0.54 * (width / 64) ** -0.22", "0.03")},
    # the scale rule right, but no decay: the minibatch noise of a constant lr stays in the final loss
    "schedule_no_decay": {"choose_schedule": swap(
        SCHEDULE_OK, "return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (total_steps - warmup)))",
        "return 0.5 * peak")},
    # a table of the visible runs' best peaks: right on every visible run, the base peak on every other
    "schedule_memorised_visible_runs": {"choose_schedule": SCHEDULE_MEMORISED},
    # the cosine through torch: every lr after the warmup is a 0-d tensor, not a float
    "schedule_tensor_lr": {"choose_schedule": swap(
        SCHEDULE_OK, "math.cos(math.pi * (step - warmup) / (total_steps - warmup))",
        "torch.cos(torch.tensor(math.pi * (step - warmup) / (total_steps - warmup)))")},
    # the schedule counts its own calls instead of reading the step: right only when called once per step, in order
    "schedule_counts_calls": {"choose_schedule": swap(SCHEDULE_OK, "    def schedule(step):\n",
        "    calls = [-1]\n\n    def schedule(step):\n        calls[0] += 1\n        step = calls[0] % total_steps\n")},
    # --- exercise 7: self-check answers
    "answer_q1_seed_noam_peak": {"answers": swap(ANSWERS_OK, "q1_noam_peak = 512 ** -0.5 * 4000 ** -0.5",
                                                  "q1_noam_peak = 0.002")},
    "answer_q2_one_warmup_step": {"answers": swap(ANSWERS_OK, "q2_first_step_lr = 0.0",
                                                   "q2_first_step_lr = 3e-4 / 500")},
    "answer_q3_floor_at_end": {"answers": swap(ANSWERS_OK, "q3_clip_fraction = math.acos(-0.8) / math.pi",
                                               "q3_clip_fraction = 1.0")},
}

# Correct, but written differently from the reference: a phase table for warmup + cosine, per-group lambdas,
# a Noam scheduler that computes the lr in closed form via a helper, WSD through clamped progress, scaling
# through exponents, and answers typed as numbers.
ALTERNATIVE = {
    "warmup_cosine_lr": '''
def warmup_cosine_lr(step, max_lr, min_lr, warmup_steps, total_steps):
    if min(step, warmup_steps) < 0 or total_steps - warmup_steps < 1 or min_lr < 0 or min_lr > max_lr:
        raise ValueError("invalid arguments")
    if step < warmup_steps:
        return max_lr * ((step + 1) / (warmup_steps + 1))
    p = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return float(min_lr + (max_lr - min_lr) * (math.cos(math.pi * p) + 1) / 2)
''',
    "warmup_cosine_lambdalr": '''
def warmup_cosine_lambdalr(optimizer, warmup_steps, total_steps, min_lr_ratio=0.1):
    if min_lr_ratio < 0 or min_lr_ratio > 1:
        raise ValueError("min_lr_ratio must lie in [0, 1]")
    warmup_cosine_lr(0, 1.0, min_lr_ratio, warmup_steps, total_steps)  # validates W and T
    lambdas = [functools.partial(warmup_cosine_lr, max_lr=1.0, min_lr=min_lr_ratio, warmup_steps=warmup_steps,
                                 total_steps=total_steps) for _ in optimizer.param_groups]
    return LambdaLR(optimizer, lambdas)
''',
    "noam": '''
def _noam_factor(n, d_model, warmup):
    return (d_model ** -0.5) * (n ** -0.5 if n >= warmup else n / warmup ** 1.5)

class NoamLR(LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, last_epoch=-1):
        if not (d_model > 0 and warmup_steps > 0):
            raise ValueError("d_model and warmup_steps must be positive")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        f = _noam_factor(self.last_epoch + 1, self.d_model, self.warmup_steps)
        return [f * lr for lr in self.base_lrs]
''',
    "wsd_lr": '''
def wsd_lr(step, max_lr, min_lr, warmup_steps, decay_steps, total_steps):
    if step < 0 or warmup_steps < 0 or decay_steps <= 0 or warmup_steps + decay_steps > total_steps:
        raise ValueError("invalid WSD arguments")
    if not (0 <= min_lr <= max_lr):
        raise ValueError("need 0 <= min_lr <= max_lr")
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    frac = min(max(step - (total_steps - decay_steps), 0) / decay_steps, 1.0)
    return float((1 - frac) * max_lr + frac * min_lr)
''',
    "scaled_lr": '''
def scaled_lr(base_lr, base_batch_size, batch_size, rule="linear", sqrt_above=8.0):
    if rule not in ("linear", "sqrt", "hybrid"):
        raise ValueError(f"unknown rule {rule}")
    if min(base_batch_size, batch_size) <= 0 or base_lr < 0 or sqrt_above < 1:
        raise ValueError("invalid arguments")
    k = float(batch_size) / float(base_batch_size)
    if rule == "sqrt" or (rule == "hybrid" and k > sqrt_above):
        kk = k if rule == "sqrt" else k * sqrt_above
        return base_lr * kk ** 0.5
    return base_lr * k
''',
    # Warmup-Stable-Decay with its own scale rule (fitted by hand on the visible runs: the fourth root of the batch,
    # one over the square root of the budget, one over the fourth root of the width), linear decay to 0 over the last
    # 40 % of the steps
    "choose_schedule": '''
def choose_schedule(total_steps, batch_size, width):
    peak = 0.02 * (batch_size / 32) ** 0.25 * (300 / total_steps) ** 0.5 * (64 / width) ** 0.25
    warmup = max(1, total_steps // 50)
    decay = max(1, int(0.4 * total_steps))
    stable_end = total_steps - decay

    def schedule(step):
        if step < warmup:
            return peak * (step + 1) / (warmup + 1)
        if step < stable_end:
            return float(peak)
        return peak * (total_steps - step) / (decay + 1)
    return schedule
''',
    "answers": '''
q1_noam_peak = 6.99e-4
q2_first_step_lr = 0
q3_clip_fraction = 0.795
''',
}

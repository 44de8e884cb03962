"""Lab 8 catalogue: plausible buggy implementations, and a correct one written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py). VISIBLE_ONLY holds answers a student could stop at, each caught by a visible test.
"""

LOG_OK = '''
class LoggedTrainer(Trainer):
    def log_step(self, step, stats):
        if self.logger is None or step % self.cfg.log_every != 0:
            return
        self.logger.log({"train/loss": float(stats["loss"]), "lr": float(stats["lr"]),
                         "grad_norm": float(stats["grad_norm"]), "step_time": float(stats["step_time"]),
                         "tokens_per_s": float(stats["tokens"] / stats["step_time"])}, step=step)
'''

COSINE_OK = '''
class CosineTrainer(Trainer):
    def lr_at(self, step):
        cfg = self.cfg
        peak, warmup, total = float(cfg.lr), cfg.warmup, cfg.steps
        if step < warmup:
            return peak * (1.0 / warmup + (1.0 - 1.0 / warmup) * step / warmup)
        floor = peak * cfg.min_lr_ratio
        progress = (min(step, total - 1) - warmup) / max(total - 1 - warmup, 1)
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
'''

SKIP_OK = '''
class SkipTrainer(Trainer):
    def should_skip(self, grad_norm):
        return not bool(torch.isfinite(grad_norm))


class PoisonOnce(SkipTrainer):
    def __init__(self, cfg, poison_step, value=math.nan, logger=None):
        self.poison_step = poison_step
        self.value = value
        super().__init__(cfg, logger=logger)

    def before_clip(self, step):
        if step != self.poison_step:
            return
        for p in self.raw_model.parameters():
            if p.grad is not None:
                with torch.no_grad():
                    p.grad.view(-1)[0] = self.value
                return


def audit_steps(trainer, steps):
    params = list(trainer.raw_model.parameters())

    def state_snapshot():
        out = {}
        for i, p in enumerate(params):
            if p in trainer.optimizer.state:
                out[i] = {k: v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v)
                          for k, v in trainer.optimizer.state[p].items()}
        return out

    def same_state(a, b):
        if a.keys() != b.keys():
            return False
        for i in a:
            if a[i].keys() != b[i].keys():
                return False
            for k in a[i]:
                x, y = a[i][k], b[i][k]
                if torch.is_tensor(x) or torch.is_tensor(y):
                    if not (torch.is_tensor(x) and torch.is_tensor(y) and torch.equal(x, y)):
                        return False
                elif x != y:
                    return False
        return True

    report = {"skipped": [], "params_unchanged": [], "state_unchanged": []}
    for s in range(steps):
        params_before = [p.detach().clone() for p in params]
        state_before = state_snapshot()
        stats = trainer.train_step(s)
        if stats["skipped"]:
            report["skipped"].append(s)
        if all(torch.equal(b, p.detach()) for b, p in zip(params_before, params)):
            report["params_unchanged"].append(s)
        if same_state(state_before, state_snapshot()):
            report["state_unchanged"].append(s)
    return report
'''

SWEEP_OK = '''
def sweep(base, lrs, **changes):
    results = {}
    for lr in lrs:
        trainer = Trainer(dataclasses.replace(base, lr=lr, **changes))
        try:
            history = trainer.fit()
        finally:
            trainer.close()
        results[lr] = {"loss": [float(v) for v in history["loss"]], "val_loss": float(history["val_loss"][-1])}
    return results


def pick_lr(results):
    finite = [(r["val_loss"], lr) for lr, r in results.items() if math.isfinite(r["val_loss"])]
    if not finite:
        raise ValueError("no run in the sweep has a finite validation loss")
    return min(finite)[1]
'''

BF16_OK = '''
class BF16Trainer(Trainer):
    def autocast(self):
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)


def throughput(history, skip=1):
    tokens, times = history["tokens"], history["step_time"]
    if skip < 0 or skip >= len(tokens):
        raise ValueError(f"skip must be in [0, {len(tokens)}), got {skip}")
    return float(sum(tokens[skip:]) / sum(times[skip:]))


class OtherInitTrainer(Trainer):
    def __init__(self, cfg, init_seed, logger=None):
        super().__init__(cfg, logger=logger)
        self.init_seed = init_seed
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(init_seed)
            initial = GPT(cfg.model).state_dict()
        self.raw_model.load_state_dict(initial)


def compare_curves(fp32, bf16, fp32_other_init):
    a, b, c = fp32["loss"], bf16["loss"], fp32_other_init["loss"]
    if not len(a) == len(b) == len(c):
        raise ValueError("the curves have different lengths")
    noise = sum(abs(x - z) for x, z in zip(a, c)) / len(a)
    gap = sum(abs(y - x) for x, y in zip(a, b)) / len(a)
    return {"noise": float(noise), "gap": float(gap), "agree": bool(gap <= noise)}
'''

SAVE_OK = '''
def choose_save_every(setting):
    interval_s = math.sqrt(2 * setting.save_s * setting.mtbf_s)      # Young (1974): cheap saves next to the MTBF
    return max(1, min(setting.steps, round(interval_s / setting.step_s)))
'''

ANSWERS_OK = '''
q1_injection_error = "RuntimeError"
q2_recipe_tokens = 655_360_000
q3_guide_lr_at_step_0 = 0.0
'''


def _swap(source: str, old: str, new: str) -> str:
    """One edit to a correct source; fails loudly if the text to replace is not there exactly once."""
    assert source.count(old) == 1, f"catalogue edit not found exactly once: {old!r}"
    return source.replace(old, new)


# The answers a student could stop at when the visible tests are silent: each must fail a visible test.
VISIBLE_ONLY = {
    # the guide's own get_lr: zero at step 0, and the cosine never held past the end
    "cosine_trainer": '''
class CosineTrainer(Trainer):
    def lr_at(self, step):
        cfg = self.cfg
        if step < cfg.warmup:
            return cfg.lr * step / cfg.warmup
        progress = (step - cfg.warmup) / (cfg.steps - cfg.warmup)
        floor = cfg.lr * cfg.min_lr_ratio
        return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))
''',
    # min() over the dict: a NaN listed first wins, ties go to the first listed
    "lion_sweep": _swap(SWEEP_OK, '''    finite = [(r["val_loss"], lr) for lr, r in results.items() if math.isfinite(r["val_loss"])]
    if not finite:
        raise ValueError("no run in the sweep has a finite validation loss")
    return min(finite)[1]''', '''    return min(results, key=lambda lr: results[lr]["val_loss"])'''),
    # isnan only: an infinite norm is stepped into
    "skip_on_nonfinite": _swap(SKIP_OK, "return not bool(torch.isfinite(grad_norm))", "return bool(torch.isnan(grad_norm))"),
    # the preset handed in as it is: the visible seed's run (2.64) misses the preset band (2.58)
    "challenge_entry": "def challenge_entry():\n    return {}, Trainer\n",
    # a round number of steps for every run: the "huge save" run takes 8x as long as with its best interval
    "save_interval": "def choose_save_every(setting):\n    return min(100, setting.steps)\n",
}

BUGS = {
    # --- exercise 1: LoggedTrainer.log_step
    "log_loss_name": {"logged_trainer": _swap(LOG_OK, '"train/loss": float', '"loss": float')},
    "log_ignores_log_every": {"logged_trainer": _swap(LOG_OK, "if self.logger is None or step % self.cfg.log_every != 0:",
                                                      "if self.logger is None:")},
    "log_no_logger_check": {"logged_trainer": _swap(LOG_OK, "if self.logger is None or step % self.cfg.log_every != 0:",
                                                    "if step % self.cfg.log_every != 0:")},
    "log_steps_per_second": {"logged_trainer": _swap(LOG_OK, 'float(stats["tokens"] / stats["step_time"])',
                                                     'float(1.0 / stats["step_time"])')},
    "log_hides_skipped_steps": {"logged_trainer": _swap(LOG_OK, "            return\n",
                                                        "            return\n        if stats[\"skipped\"]:\n            return\n")},
    "log_calls_super": {"logged_trainer": _swap(LOG_OK, '''        self.logger.log({"train/loss": float(stats["loss"]), "lr": float(stats["lr"]),
                         "grad_norm": float(stats["grad_norm"]), "step_time": float(stats["step_time"]),
                         "tokens_per_s": float(stats["tokens"] / stats["step_time"])}, step=step)''',
                                                '''        super().log_step(step, stats)''')},
    # tokens from the config: right only while grad_accum is 1 (and on one rank)
    "log_tokens_from_cfg": {"logged_trainer": _swap(LOG_OK, 'float(stats["tokens"] / stats["step_time"])',
                                                    'float(self.cfg.batch_size * self.cfg.model.block_size / stats["step_time"])')},
    # --- exercise 2: CosineTrainer.lr_at
    "cos_zero_at_step_0": {"cosine_trainer": _swap(COSINE_OK, "peak * (1.0 / warmup + (1.0 - 1.0 / warmup) * step / warmup)",
                                                   "peak * step / warmup")},
    "cos_no_hold_past_end": {"cosine_trainer": _swap(COSINE_OK, "(min(step, total - 1) - warmup)", "(step - warmup)")},
    "cos_int_peak_at_boundary": {"cosine_trainer": _swap(COSINE_OK, "        floor = peak * cfg.min_lr_ratio\n",
                                                         "        if step == warmup:\n            return cfg.lr\n"
                                                         "        floor = peak * cfg.min_lr_ratio\n")},
    "cos_counts_calls": {"cosine_trainer": _swap(COSINE_OK, "        cfg = self.cfg\n",
                                                 "        cfg = self.cfg\n        step = getattr(self, '_calls', 0)\n"
                                                 "        self._calls = step + 1\n")},
    "cos_reads_table": {"cosine_trainer": '''
class CosineTrainer(Trainer):
    def lr_at(self, step):
        return float(self._lr_table[min(step, len(self._lr_table) - 1)])
'''},
    "cos_calls_super": {"cosine_trainer": '''
class CosineTrainer(Trainer):
    def lr_at(self, step):
        return float(super().lr_at(step))
'''},
    # --- exercise 3: skip-on-non-finite
    "skip_nan_only": {"skip_on_nonfinite": VISIBLE_ONLY["skip_on_nonfinite"]},
    "skip_returns_tensor": {"skip_on_nonfinite": _swap(SKIP_OK, "return not bool(torch.isfinite(grad_norm))",
                                                       "return ~torch.isfinite(grad_norm)")},
    "skip_poisons_every_later_step": {"skip_on_nonfinite": _swap(SKIP_OK, "if step != self.poison_step:",
                                                                 "if step < self.poison_step:")},
    "skip_poison_always_nan": {"skip_on_nonfinite": _swap(SKIP_OK, "p.grad.view(-1)[0] = self.value",
                                                          "p.grad.view(-1)[0] = math.nan")},
    "poison_drops_logger": {"skip_on_nonfinite": _swap(SKIP_OK, "super().__init__(cfg, logger=logger)",
                                                       "super().__init__(cfg)")},
    "poison_fills_whole_grad": {"skip_on_nonfinite": _swap(SKIP_OK, "p.grad.view(-1)[0] = self.value", "p.grad.fill_(self.value)")},
    "poison_every_param": {"skip_on_nonfinite": _swap(SKIP_OK, "                    p.grad.view(-1)[0] = self.value\n                return\n",
                                                      "                    p.grad.view(-1)[0] = self.value\n")},
    "poison_replaces_grad": {"skip_on_nonfinite": _swap(SKIP_OK, "                    p.grad.view(-1)[0] = self.value\n",
                                                        "                    poisoned = p.grad.clone()\n"
                                                        "                    poisoned.view(-1)[0] = self.value\n"
                                                        "                    p.grad = poisoned\n")},
    "audit_allclose_params": {"skip_on_nonfinite": _swap(SKIP_OK, "if all(torch.equal(b, p.detach()) for b, p in zip(params_before, params)):",
                                                         "if all(torch.allclose(b, p.detach()) for b, p in zip(params_before, params)):")},
    "audit_snapshots_references": {"skip_on_nonfinite": _swap(SKIP_OK, "params_before = [p.detach().clone() for p in params]",
                                                              "params_before = [p.detach() for p in params]")},
    "audit_nan_equals_nan": {"skip_on_nonfinite": _swap(SKIP_OK, "if all(torch.equal(b, p.detach()) for b, p in zip(params_before, params)):",
                                                        "if all(torch.allclose(b, p.detach(), rtol=0, atol=0, equal_nan=True) "
                                                        "for b, p in zip(params_before, params)):")},
    "audit_skipped_from_loss": {"skip_on_nonfinite": _swap(SKIP_OK, 'if stats["skipped"]:',
                                                           'if not math.isfinite(stats["loss"]):')},
    # --- exercise 4: AdamW -> Lion
    "sweep_ignores_changes": {"lion_sweep": _swap(SWEEP_OK, "Trainer(dataclasses.replace(base, lr=lr, **changes))",
                                                  "Trainer(dataclasses.replace(base, lr=lr))")},
    "sweep_mutates_base": {"lion_sweep": _swap(SWEEP_OK, "        trainer = Trainer(dataclasses.replace(base, lr=lr, **changes))\n",
                                               "        base.lr = lr\n        for k, v in changes.items():\n"
                                               "            setattr(base, k, v)\n        trainer = Trainer(base)\n")},
    "sweep_sorted_lrs": {"lion_sweep": _swap(SWEEP_OK, "    for lr in lrs:\n", "    for lr in sorted(lrs):\n")},
    "sweep_best_val": {"lion_sweep": _swap(SWEEP_OK, 'float(history["val_loss"][-1])', 'float(min(history["val_loss"]))')},
    "sweep_first_val": {"lion_sweep": _swap(SWEEP_OK, 'float(history["val_loss"][-1])', 'float(history["val_loss"][0])')},
    "pick_near_tie_smallest": {"lion_sweep": _swap(SWEEP_OK, "    return min(finite)[1]\n",
                                                   "    best = min(v for v, _ in finite)\n"
                                                   "    return min(lr for v, lr in finite if math.isclose(v, best, rel_tol=1e-9))\n")},
    "pick_naive_min": {"lion_sweep": VISIBLE_ONLY["lion_sweep"]},
    "pick_tie_largest": {"lion_sweep": _swap(SWEEP_OK, "return min(finite)[1]",
                                             "best = min(v for v, _ in finite)\n    return max(lr for v, lr in finite if v == best)")},
    "pick_none_when_all_diverge": {"lion_sweep": _swap(SWEEP_OK, '        raise ValueError("no run in the sweep has a finite validation loss")',
                                                       "        return None")},
    # --- exercise 5: bf16
    "bf16_float16": {"bf16": _swap(BF16_OK, "dtype=torch.bfloat16)", "dtype=torch.float16)")},
    "bf16_only_when_configured": {"bf16": _swap(BF16_OK, "        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)",
                                                "        if self.cfg.precision != 'bf16':\n            return contextlib.nullcontext()\n"
                                                "        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)")},
    "bf16_one_cached_context": {"bf16": _swap(BF16_OK, "        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)",
                                              "        if getattr(self, '_bf16', None) is None:\n"
                                              "            self._bf16 = torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)\n"
                                              "        return self._bf16")},
    "bf16_fixed_cpu": {"bf16": _swap(BF16_OK, "device_type=self.device.type", 'device_type="cpu"')},
    "throughput_mean_of_rates": {"bf16": _swap(BF16_OK, "return float(sum(tokens[skip:]) / sum(times[skip:]))",
                                               "rates = [t / s for t, s in zip(tokens[skip:], times[skip:])]\n"
                                               "    return float(sum(rates) / len(rates))")},
    "throughput_no_validation": {"bf16": _swap(BF16_OK, "    if skip < 0 or skip >= len(tokens):\n"
                                               "        raise ValueError(f\"skip must be in [0, {len(tokens)}), got {skip}\")\n", "")},
    # the other initialisation: a seed for both (other batches), the run's random stream replaced (on the CPU, or on
    # the CUDA devices only), a re-init that draws in another order than GPT(cfg.model), a logger dropped
    "other_init_changes_batches_too": {"bf16": _swap(BF16_OK, "        super().__init__(cfg, logger=logger)\n        self.init_seed",
                                                     "        super().__init__(dataclasses.replace(cfg, seed=init_seed), logger=logger)\n"
                                                     "        self.init_seed")},
    "other_init_no_fork_rng": {"bf16": _swap(BF16_OK, """        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(init_seed)
            initial = GPT(cfg.model).state_dict()""", """        torch.manual_seed(init_seed)
        initial = GPT(cfg.model).state_dict()""")},
    # the fork of the CPU's generator only (the lab's earlier reference): torch.manual_seed(init_seed) also seeds
    # every CUDA device's, so on a GPU the run's dropout draws from init_seed's stream; on a CPU the test's stand-in
    # CUDA device shows it
    "other_init_forks_cpu_only": {"bf16": _swap(BF16_OK, "fork_rng(devices=range(torch.cuda.device_count()))",
                                                "fork_rng(devices=[])")},
    "other_init_reinit_in_place": {"bf16": _swap(BF16_OK, """        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(init_seed)
            initial = GPT(cfg.model).state_dict()
        self.raw_model.load_state_dict(initial)""", """        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(init_seed)
            self.raw_model._init_weights()""")},
    "other_init_drops_logger": {"bf16": _swap(BF16_OK, "        super().__init__(cfg, logger=logger)\n        self.init_seed",
                                              "        super().__init__(cfg)\n        self.init_seed")},
    "compare_max_not_mean": {"bf16": _swap(_swap(BF16_OK,
        "noise = sum(abs(x - z) for x, z in zip(a, c)) / len(a)", "noise = max(abs(x - z) for x, z in zip(a, c))"),
        "gap = sum(abs(y - x) for x, y in zip(a, b)) / len(a)", "gap = max(abs(y - x) for x, y in zip(a, b))")},
    "compare_strict": {"bf16": _swap(BF16_OK, "bool(gap <= noise)", "bool(gap < noise)")},
    "compare_no_length_check": {"bf16": _swap(BF16_OK, "    if not len(a) == len(b) == len(c):\n"
                                              "        raise ValueError(\"the curves have different lengths\")\n", "")},
    # --- exercise 6: how often to save (graded by the mean wall clock the interval produces)
    "save_every_hundred_steps": {"save_interval": VISIBLE_ONLY["save_interval"]},
    # a tenth of the run, whatever the machine: 3x the best on a run whose saves are cheap and failures frequent
    "save_tenth_of_the_run": {"save_interval": "def choose_save_every(setting):\n    return max(1, setting.steps // 10)\n"},
    # Young's interval in seconds taken for a number of steps
    "save_young_in_seconds": {"save_interval": _swap(SAVE_OK, "round(interval_s / setting.step_s)", "round(interval_s)")},
    # the restart counted as a cost of saving: saves too rarely where restarts are slow
    "save_young_with_restart": {"save_interval": _swap(SAVE_OK, "2 * setting.save_s * setting.mtbf_s",
                                                       "2 * (setting.save_s + setting.restart_s) * setting.mtbf_s")},
    # without Young's factor 2: near the best on every visible setting (1.02 at worst), 1.18x on a hidden one
    "save_young_without_two": {"save_interval": _swap(SAVE_OK, "2 * setting.save_s * setting.mtbf_s",
                                                      "setting.save_s * setting.mtbf_s")},
    # the visible settings' best intervals memorised, a tenth of the run elsewhere
    "save_memorised": {"save_interval": """
def choose_save_every(setting):
    known = {"laptop demo run": 250, "spot GPU": 1000, "big model on a cluster": 556, "preemptible CPU": 47,
             "short run, slow save": 1000, "slow steps, cheap save": 5, "huge save": 5000, "rarely fails": 25000}
    return known.get(setting.name, max(1, setting.steps // 10))
"""},
    # Young's rule of thumb, right as far as it goes: near the best everywhere, 1.03x where saves are not cheap next to
    # the MTBF or the run is barely longer than the interval (the "huge save" run: 1.031)
    "save_young": {"save_interval": SAVE_OK},
    # Daly (2006): Young's interval with its higher-order terms; still 1.02x on the same runs
    "save_daly": {"save_interval": '''
def choose_save_every(setting):
    M, C = setting.mtbf_s, setting.save_s
    if C < 2 * M:
        interval_s = math.sqrt(2 * C * M) * (1 + math.sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C
    else:
        interval_s = M
    steps = int(round(interval_s / setting.step_s))
    return min(setting.steps, max(1, steps))
'''},
    # Young unclamped: past the run's end on a short run (an interval the run cannot have)
    "save_young_unclamped": {"save_interval": _swap(SAVE_OK, "max(1, min(setting.steps, round(interval_s / setting.step_s)))",
                                                    "max(1, round(interval_s / setting.step_s))")},
    # --- exercise 7: the challenge (graded by the run each entry produces)
    # the preset handed in unchanged: it learns, but does not reach the preset's mean on seed 0 (2.64)
    "challenge_preset_unchanged": {"challenge_entry": "def challenge_entry():\n    return {}, Trainer\n"},
    # "more compute": twice the steps at the same batch, over the token budget (the harness refuses it)
    "challenge_over_budget": {"challenge_entry": "def challenge_entry():\n    return {\"steps\": 400}, Trainer\n"},
    # a higher learning rate is not the lever here: 1e-2 with the preset's batches (2.66 on seed 0)
    "challenge_higher_lr": {"challenge_entry": "def challenge_entry():\n    return {\"lr\": 1e-2}, Trainer\n"},
    # the first good idea only: more, smaller steps at a higher peak (2.42-2.47 over seeds): preset band, not tuned
    "challenge_smaller_batches_only": {"challenge_entry": "def challenge_entry():\n"
                                       "    return {\"steps\": 400, \"batch_size\": 8, \"lr\": 4e-3, \"warmup\": 20}, Trainer\n"},
    # a longer context "for free": the challenge fixes block_size 64
    "challenge_longer_context": {"challenge_entry": "def challenge_entry():\n"
                                 "    return {\"model\": {\"block_size\": 128}, \"batch_size\": 8}, Trainer\n"},
    # --- exercise 8: self-check answers
    "answer_q1_value_error": {"answers": _swap(ANSWERS_OK, '"RuntimeError"', '"ValueError"')},
    "answer_q2_one_billion": {"answers": _swap(ANSWERS_OK, "655_360_000", "1_000_000_000")},
    "answer_q3_trainer_convention": {"answers": _swap(ANSWERS_OK, "q3_guide_lr_at_step_0 = 0.0", "q3_guide_lr_at_step_0 = 3e-4 / 200")},
}

# Correct, but written differently from the reference: logging in two calls, the schedule by phases with a
# clamp up front, a guard through math.isfinite and a poison on the last parameter, an audit by state_dict copies,
# a sweep that sorts by (loss, lr) through sorted(), throughput with math.fsum, the other initialisation drawn before
# Trainer.__init__ and copied tensor by tensor, a checkpoint interval searched on the simulator.
ALTERNATIVE = {
    "logged_trainer": '''
class LoggedTrainer(Trainer):
    def log_step(self, step: int, stats: dict) -> None:
        log = self.logger
        if log is None:
            return
        if step % self.cfg.log_every:
            return
        seconds = float(stats["step_time"])
        log.log({"train/loss": float(stats["loss"]), "lr": float(stats["lr"])}, step=step)
        log.log({"grad_norm": float(stats["grad_norm"]), "step_time": seconds,
                 "tokens_per_s": stats["tokens"] / seconds}, step=step)
''',
    "cosine_trainer": '''
class CosineTrainer(Trainer):
    def lr_at(self, step: int) -> float:
        c = self.cfg
        step = min(step, c.steps - 1)
        top, low = c.lr * 1.0, c.lr * c.min_lr_ratio
        if c.warmup and step < c.warmup:
            start = top / c.warmup
            return start + (top - start) * step / c.warmup
        span = max(c.steps - 1 - c.warmup, 1)
        return low + (top - low) * (math.cos(math.pi * (step - c.warmup) / span) + 1) / 2
''',
    "skip_on_nonfinite": '''
class SkipTrainer(Trainer):
    def should_skip(self, grad_norm):
        return not math.isfinite(grad_norm.item())


class PoisonOnce(SkipTrainer):
    def __init__(self, cfg, poison_step, value=math.nan, logger=None):
        super().__init__(cfg, logger=logger)
        self.poison_step, self.value = poison_step, value

    def before_clip(self, step):
        if step == self.poison_step:
            last = [p for p in self.raw_model.parameters() if p.grad is not None][-1]
            with torch.no_grad():
                last.grad.reshape(-1)[-1].fill_(self.value)


def audit_steps(trainer, steps):
    def snap():
        params = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}
        state = copy.deepcopy(trainer.optimizer.state_dict()["state"])
        return params, state

    def equal(a, b):
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
        if torch.is_tensor(a):
            return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
        return a == b

    out = {"skipped": [], "params_unchanged": [], "state_unchanged": []}
    for s in range(steps):
        p0, s0 = snap()
        skipped = trainer.train_step(s)["skipped"]
        p1, s1 = snap()
        for key, flag in (("skipped", skipped), ("params_unchanged", equal(p0, p1)), ("state_unchanged", equal(s0, s1))):
            if flag:
                out[key].append(s)
    return out
''',
    "lion_sweep": '''
def sweep(base, lrs, **changes):
    out = {}
    for lr in lrs:
        cfg = dataclasses.replace(base, **{**changes, "lr": lr})
        with Trainer(cfg) as trainer:
            h = trainer.fit()
        out[lr] = {"val_loss": h["val_loss"][-1], "loss": list(h["loss"])}
    return out


def pick_lr(results):
    ranked = sorted((r["val_loss"], lr) for lr, r in results.items() if not math.isnan(r["val_loss"])
                    and not math.isinf(r["val_loss"]))
    if len(ranked) == 0:
        raise ValueError("every run diverged")
    return ranked[0][1]
''',
    "bf16": '''
class BF16Trainer(Trainer):
    def autocast(self):
        return torch.amp.autocast(self.device.type, dtype=torch.bfloat16, enabled=True)


def throughput(history, skip=1):
    n = len(history["step_time"])
    if not 0 <= skip < n:
        raise ValueError("nothing to measure")
    return math.fsum(history["tokens"][skip:]) / math.fsum(history["step_time"][skip:])


class OtherInitTrainer(Trainer):
    def __init__(self, cfg, init_seed, logger=None):
        torch.manual_seed(init_seed)                      # drawn first: Trainer.__init__ then seeds the run itself
        start = copy.deepcopy(GPT(cfg.model).state_dict())
        super().__init__(cfg, logger=logger)
        with torch.no_grad():
            for name, tensor in self.raw_model.state_dict().items():
                tensor.copy_(start[name])
        self.init_seed = init_seed


def compare_curves(fp32, bf16, fp32_other_init):
    lengths = {len(fp32["loss"]), len(bf16["loss"]), len(fp32_other_init["loss"])}
    if len(lengths) != 1:
        raise ValueError(f"curves of different lengths {lengths}")
    ref = torch.tensor(fp32["loss"], dtype=torch.float64)
    noise = (ref - torch.tensor(fp32_other_init["loss"], dtype=torch.float64)).abs().mean().item()
    gap = (torch.tensor(bf16["loss"], dtype=torch.float64) - ref).abs().mean().item()
    return {"noise": noise, "gap": gap, "agree": gap <= noise}
''',
    # a search on the simulator: a coarse geometric grid of intervals, then a finer one around the fastest
    "save_interval": '''
def choose_save_every(setting):
    def mean_wall(k, seed):
        return simulate_runs(setting, k, runs=4000, seed=seed).mean()
    grid = sorted({max(1, min(setting.steps, round(setting.steps ** (i / 40)))) for i in range(41)})
    best = min(grid, key=lambda k: mean_wall(k, 7))
    fine = sorted({max(1, min(setting.steps, round(best * f / 20))) for f in range(14, 29)})
    return min(fine, key=lambda k: mean_wall(k, 8))
''',    # another route to the tuned band: the preset's model, 800 steps of 4 sequences and a lower peak with a longer
    # warmup (2.18-2.19 on seeds 0-4, 7 and 1729), through a Trainer subclass of the student's own that changes nothing
    "challenge_entry": '''
class ChallengeTrainer(Trainer):
    pass


def challenge_entry():
    budget = 200 * 16 * 64
    batch = 4
    return dict(batch_size=batch, steps=budget // (batch * 64), warmup=80, lr=1.5e-3), ChallengeTrainer
''',
    "answers": '''
q1_injection_error = "RuntimeError"
q2_recipe_tokens = 6.5536e8
q3_guide_lr_at_step_0 = 0
''',
}

"""Lab 7 catalogue: plausible buggy implementations, and a correct one written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

STEP_OK = '''
def logged_train_step(model, optimizer, scheduler, batch, step, logger, max_norm=1.0):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    logger.log({"train/loss": loss.item(), "lr": lr, "grad_norm": norm,
                "clipped": 1.0 if norm > max_norm else 0.0}, step=step)
    return loss.item()
'''

METER_OK = '''
class ThroughputMeter:
    def __init__(self, warmup_steps=2, clock=time.perf_counter):
        if warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")
        self.warmup_steps, self.clock = warmup_steps, clock
        self._t0 = None
        self._stopped = 0
        self._tokens, self._time, self._counted = 0, 0.0, 0

    def start(self):
        self._t0 = self.clock()

    def stop(self, tokens):
        if self._t0 is None:
            raise RuntimeError("stop() without start()")
        dt = float(self.clock() - self._t0)
        self._t0 = None
        self._stopped += 1
        if self._stopped > self.warmup_steps:
            self._tokens += tokens
            self._time += dt
            self._counted += 1
        return dt

    @property
    def steps_counted(self):
        return self._counted

    @property
    def tokens_per_s(self):
        if not self._counted or (self._time == 0 and self._tokens == 0):
            return math.nan
        return self._tokens / self._time if self._time > 0 else math.inf

    @property
    def step_time(self):
        return self._time / self._counted if self._counted else math.nan
'''

MANIFEST_OK = '''
def write_manifest(run_dir, config, data, seed, repo_dir="."):
    def git(*args):
        return subprocess.run(["git", *args], cwd=repo_dir, capture_output=True, text=True)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode == 0:
            status = git("status", "--porcelain", "--untracked-files=normal")
            sha, dirty = head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
        else:
            sha, dirty = "not a git repository", None
    except OSError:
        sha, dirty = "not a git repository", None
    cpu = data.detach().to("cpu").contiguous()
    fingerprint = hashlib.sha256(f"{cpu.dtype}|{tuple(cpu.shape)}|".encode())
    fingerprint.update(cpu.reshape(-1).view(torch.uint8).numpy().tobytes())
    manifest = {
        "config": config,
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
        "data_fingerprint": fingerprint.hexdigest(),
        "seed": int(seed),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                     "cuda": torch.version.cuda},
        "git_sha": sha,
        "git_dirty": dirty,
    }
    path = Path(run_dir) / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2))
    return path


def diff_manifests(a, b):
    out = []
    for key in set(a) | set(b):
        if key not in a or key not in b:
            out.append(key)
        elif isinstance(a[key], dict) and isinstance(b[key], dict):
            out += [f"{key}.{sub}" for sub in diff_manifests(a[key], b[key])]
        elif a[key] != b[key]:
            out.append(key)
    return sorted(out)
'''

ORDER_OK = '''
def rank_order(n, seed, epoch, rank, world_size):
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("need world_size >= 1 and 0 <= rank < world_size")
    order = np.random.default_rng([seed, epoch]).permutation(n)
    usable = (n // world_size) * world_size
    return order[:usable][rank::world_size]
'''

CKPT_OK = '''
def save_checkpoint(run, path):
    state = {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "step": run.step,
        "data_gen": run.data_gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(run, path):
    state = torch.load(path, map_location="cpu", weights_only=False)
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.step = state["step"]
    run.data_gen.set_state(state["data_gen"])
    torch.set_rng_state(state["torch_rng"])
    if torch.cuda.is_available() and state["cuda_rng"]:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    np.random.set_state(state["numpy_rng"])
    random.setstate(state["python_rng"])
'''

ANSWERS_OK = '''
q1_tokens_per_s = 10240.0
q2_distinct_examples = 683.6
q3_logged_lr_at_step_0 = 2e-3 / 101
'''


# The reference checkpoint's atomic write and the lines before it: the text several bugs below replace.
_CKPT_PATHS = '''    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
'''
_CKPT_ATOMIC_WRITE = '''    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()'''


def _swap(source: str, old: str, new: str) -> str:
    """One edit to a correct source; fails loudly if the text to replace is not there exactly once."""
    assert source.count(old) == 1, f"catalogue edit not found exactly once: {old!r}"
    return source.replace(old, new)


# --- exercise 6: why_not_reproducible (graded by accuracy on pairs of runs, visible and unseen)
# The hasty answer, from one reading of the spec: diff the manifests, drop the per-start fields the spec names, and name
# the first field left. It takes a recorded difference for a cause and misses every cause no manifest records.
REPRO_FIRST_MANIFEST_FIELD = '''
def why_not_reproducible(run_a, run_b):
    def differing(a, b, prefix=""):
        out = []
        for key in sorted(set(a) | set(b)):
            if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
                out += differing(a[key], b[key], f"{prefix}{key}.")
            elif a.get(key) != b.get(key):
                out.append(prefix + key)
        return out
    per_start = {"run_id", "started_at", "host", "wall_time_s"}       # differ between any two runs
    fields = [f for f in differing(run_a.manifest, run_b.manifest) if f not in per_start]
    if not fields:
        return "reproducible"
    first = fields[0]
    if first.startswith("config.data"):
        return "data_order"
    if "seed" in first:
        return "seed"
    if first.startswith("git"):
        return "code_change"
    return "reproducible"
'''

# The hasty decision table (a trial student, five minutes, no lesson read): logs equal, then the git fields, then the
# first validation loss, then the size of the first differing row. Each question is asked of one piece of evidence
# as if only one cause could produce it: a harmless edit in one tree while a reduction races is called a code change,
# a race in the first evaluation another seed, and a seed that moves only the dropout masks another data order (the
# logged minibatch fingerprints, which say the order was the same, are never read).
REPRO_HASTY_DECISION_TABLE = '''
def why_not_reproducible(run_a, run_b):
    la, lb = run_a.log, run_b.log
    if la == lb: return "reproducible"
    ma, mb = run_a.manifest, run_b.manifest
    if any(ma.get(k) != mb.get(k) for k in ("git_sha", "git_dirty", "git_diff_sha256")): return "code_change"
    if la[0].get("val/loss") != lb[0].get("val/loss"): return "seed"          # different initial weights
    ra, rb = next((ra, rb) for ra, rb in zip(la, lb) if ra != rb)             # first differing row
    tiny = all(abs(ra[k] - rb[k]) <= 1e-5 * max(abs(ra[k]), abs(rb[k]), 1e-12)
               for k in ("train/loss", "grad_norm", "val/loss") if k in ra and k in rb and ra[k] != rb[k])
    return "nondeterministic" if tiny else "data_order"
'''

# The code a student plausibly stops at once the visible tests are silent (CONTRIBUTING.md, "Tests that are fair
# to students"): it must fail a visible test of its own exercise (tests/test_catalogue.py).
VISIBLE_ONLY = {"why_not_reproducible": REPRO_HASTY_DECISION_TABLE}

# Reads only the logs (and the lr column for code): a code change that moves the initial weights looks like a seed,
# one that moves the last bits looks like a race.
REPRO_LOGS_ONLY = '''
def why_not_reproducible(run_a, run_b):
    if run_a.log == run_b.log:
        return "reproducible"
    if run_a.log[0]["val/loss"] != run_b.log[0]["val/loss"]:
        return "seed"
    for row_a, row_b in zip(run_a.log, run_b.log):
        if row_a.get("lr") != row_b.get("lr"):
            return "code_change"
        x, y = row_a.get("train/loss"), row_b.get("train/loss")
        if x != y:
            return "nondeterministic" if abs(x - y) < 1e-5 * abs(x) else "data_order"
    return "nondeterministic"
'''

# The right order of questions, but "a gap under 1 % is noise": another minibatch at step 0 often moves the loss less.
REPRO_LOOSE_THRESHOLD = '''
def why_not_reproducible(run_a, run_b):
    if run_a.log == run_b.log:
        return "reproducible"
    if any(run_a.manifest[k] != run_b.manifest[k] for k in ("git_sha", "git_dirty", "git_diff_sha256")):
        return "code_change"
    if run_a.log[0]["val/loss"] != run_b.log[0]["val/loss"]:
        return "seed"
    for row_a, row_b in zip(run_a.log, run_b.log):
        x, y = row_a.get("train/loss"), row_b.get("train/loss")
        if x != y:
            return "nondeterministic" if abs(x - y) < 0.01 * abs(x) else "data_order"
    return "nondeterministic"
'''

# Recognises the visible pairs by a run's id: perfect on them, the rest called reproducible.
REPRO_MEMORISES_VISIBLE = '''
_KNOWN = {pair.a.manifest["run_id"]: pair.label for pair in VISIBLE_PAIRS}


def why_not_reproducible(run_a, run_b):
    return _KNOWN.get(run_a.manifest["run_id"], "reproducible")
'''

# --- exercise 7: reproduce (graded by the share of runs that train(settings) reproduces bit for bit)
REPRODUCE_OK = '''
def reproduce(manifest: dict, log: list) -> dict:
    """The settings for trainkit.labs.lab07_monitoring_reproducibility.repro_runs.train whose log is `log`, bit for bit."""
    # Trust the manifest for what only it records (task, model, optimiser, batch size) and the log for everything it
    # shows; every seed is checked against the log, the recorded one first, then the pipelines' whole range.
    cfg = manifest["config"]
    rows = [row for row in log if "batch" in row]                   # one per optimiser step
    steps, batch = len(rows), cfg["batch_size"]
    settings = {"task": cfg["task"], **cfg["model"], "weight_decay": cfg["optim"]["weight_decay"],
                "batch_size": batch, "steps": steps, "lr": rows[0]["lr"]}  # the lr the updates used
    evals = [row["step"] for row in log if "val/loss" in row and 0 < row["step"] < steps]
    settings["eval_every"] = evals[0] if evals else steps          # only at 0 and the end: any period >= steps
    drop = next((row["step"] for row in rows if row["lr"] != rows[0]["lr"]), None)
    if drop is not None:
        settings["lr_drop_at"] = drop                              # a code change the manifest does not describe
    data, loss_fn = task_data(cfg["task"])
    n = len(data.y_train)

    def candidates(recorded):
        return ([recorded] if recorded is not None else []) + [s for s in SEED_RANGE if s != recorded]

    def fingerprint(idx):
        return hashlib.sha256(idx.numpy().tobytes()).hexdigest()[:12]

    # the data order: the first minibatch is the start of the shuffle seed's permutation
    recorded = cfg.get("data", {}).get("shuffle_seed")
    settings["order_seed"] = next(s for s in candidates(recorded) if fingerprint(
        torch.randperm(n, generator=torch.Generator().manual_seed(s))[:batch]) == rows[0]["batch"])
    per_epoch = n // batch                                         # a new epoch starts a new permutation, or not
    settings["reshuffle"] = steps <= per_epoch or rows[per_epoch]["batch"] != rows[0]["batch"]

    def close(x, y):
        return abs(x - y) <= 1e-5 * abs(y)

    def check(seed_key, seed, key, steps_run):                     # the exact value, from train itself
        return train({**settings, seed_key: seed, "steps": steps_run})[0][key] == log[0][key]

    # the initial weights: named by init_from in a fine-tune, else told by the validation loss before any update
    if "init_from" in cfg:
        digest = cfg["init_from"].rsplit("init-", 1)[1].split(".")[0]
        settings["init_seed"] = next(s for s in SEED_RANGE if hashlib.sha256(str(s).encode()).hexdigest()[:8] == digest)
    else:
        want = log[0]["val/loss"]
        for seed in candidates(cfg.get("seed")):
            model = build_model({**settings, "init_seed": seed}).eval()
            with torch.no_grad():
                if close(float(loss_fn(model(data.x_val), data.y_val)), want) and check("init_seed", seed, "val/loss", 0):
                    settings["init_seed"] = seed
                    break
    # a fine-tune's dropout masks: told by the first minibatch's loss (in training mode)
    if "init_from" in cfg:
        idx = torch.randperm(n, generator=torch.Generator().manual_seed(settings["order_seed"]))[:batch]
        x, y = data.x_train[idx], data.y_train[idx]
        want = rows[0]["train/loss"]
        for seed in candidates(cfg.get("seed")):
            model = build_model({**settings, "mask_seed": seed})
            with torch.no_grad():
                loss = sum(float(loss_fn(model(x[k::SLICES]), y[k::SLICES], reduction="sum")) for k in range(SLICES))
            if close(loss / len(y), want) and check("mask_seed", seed, "train/loss", 1):
                settings["mask_seed"] = seed
                break
    return settings
'''

# The first reading: map the manifest's fields onto train's settings, trust the seeds it records and take the defaults
# for what it does not record. It reproduces only the runs whose manifest is complete, right and evaluated every 5 steps.
REPRO_NAIVE_MAPPING = '''
def reproduce(manifest, log):
    cfg = manifest["config"]
    settings = {"task": cfg["task"], **cfg["model"], "lr": cfg["optim"]["lr"], "weight_decay": cfg["optim"]["weight_decay"],
                "batch_size": cfg["batch_size"], "steps": cfg["steps"]}
    if "seed" in cfg:
        settings["init_seed"] = cfg["seed"]
    if "data" in cfg:
        settings["order_seed"] = cfg["data"]["shuffle_seed"]
        settings["reshuffle"] = cfg["data"]["reshuffle_each_epoch"]
    return settings
'''

# The hasty answer: reads eval_every, the lr and its drop from the log and searches a seed only where the manifest
# records none, but takes every recorded seed and data setting on trust (and reshuffles where nothing is recorded).
REPRO_TRUSTS_WHAT_IS_RECORDED = _swap(_swap(REPRODUCE_OK,
    "        return ([recorded] if recorded is not None else []) + [s for s in SEED_RANGE if s != recorded]",
    "        return [recorded] if recorded is not None else list(SEED_RANGE)"),
    '''    settings["reshuffle"] = steps <= per_epoch or rows[per_epoch]["batch"] != rows[0]["batch"]''',
    '''    settings["reshuffle"] = cfg.get("data", {}).get("reshuffle_each_epoch", True)''')
VISIBLE_ONLY["reproduce"] = REPRO_TRUSTS_WHAT_IS_RECORDED

BUGS = {
    # --- exercise 1: logged_train_step
    "step_logs_lr_after_scheduler": {"logged_train_step": _swap(STEP_OK, '''    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
''', '''    optimizer.step()
    scheduler.step()
    lr = float(optimizer.param_groups[0]["lr"])          # the LR of the NEXT step: off by one
''')},
    "step_logs_post_clip_norm": {"logged_train_step": _swap(STEP_OK,
        '''    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))''',
        '''    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = float(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm())   # after clipping''')},
    "step_one_based_steps": {"logged_train_step": _swap(STEP_OK, "step=step)", "step=step + 1)")},
    "step_clipped_inclusive": {"logged_train_step": _swap(STEP_OK, "1.0 if norm > max_norm", "1.0 if norm >= max_norm")},
    "step_returns_tensor": {"logged_train_step": _swap(STEP_OK, "    return loss.item()\n", "    return loss.detach()\n")},
    # steps far from 0: a fresh scheduler's count equals the step only in a run that starts at 0
    "step_logs_scheduler_count": {"logged_train_step": _swap(STEP_OK, "step=step)", "step=scheduler.last_epoch - 1)")},
    # --- exercise 2: ThroughputMeter
    "meter_counts_warmup": {"throughput": _swap(METER_OK, "if self._stopped > self.warmup_steps:", "if True:")},
    "meter_mean_of_rates": {"throughput": _swap(_swap(METER_OK,
        "            self._tokens += tokens\n", "            self._tokens += tokens / dt\n"),
        "return self._tokens / self._time if self._time > 0 else math.inf",
        "return self._tokens / self._counted")},
    "meter_wall_clock_includes_eval": {"throughput": _swap(_swap(_swap(METER_OK,
        "        self._t0 = self.clock()\n", "        now = self.clock()\n        self._t0 = now\n"
        "        if self._first is None:\n            self._first = now\n"),
        "        self._t0 = None\n        self._stopped = 0\n",
        "        self._t0 = None\n        self._first = None\n        self._stopped = 0\n"),
        "return self._tokens / self._time if self._time > 0 else math.inf",
        "return self._tokens / (self.clock() - self._first)")},
    "meter_zero_not_nan": {"throughput": _swap(_swap(METER_OK, "            return math.nan\n", "            return 0.0\n"),
                                               "self._time / self._counted if self._counted else math.nan",
                                               "self._time / self._counted if self._counted else 0.0")},
    "meter_rejects_zero_warmup": {"throughput": _swap(METER_OK, "if warmup_steps < 0:", "if warmup_steps < 1:")},
    "meter_second_start_ignored": {"throughput": _swap(METER_OK, "        self._t0 = self.clock()\n",
                                                       "        if self._t0 is None:                  # keeps the first start\n"
                                                       "            self._t0 = self.clock()\n")},
    "meter_failed_stop_uses_warmup": {"throughput": _swap(_swap(METER_OK, "        self._stopped += 1\n", ""),
                                                          "        if self._t0 is None:\n",
                                                          "        self._stopped += 1                    # before the check\n"
                                                          "        if self._t0 is None:\n")},
    "meter_zero_time_divides": {"throughput": _swap(METER_OK, '''        if not self._counted or (self._time == 0 and self._tokens == 0):
            return math.nan
        return self._tokens / self._time if self._time > 0 else math.inf''',
        '''        return self._tokens / self._time if self._counted else math.nan''')},
    # a clock of whole seconds: stop() returns an int
    "meter_int_clock_returns_int": {"throughput": _swap(METER_OK, "dt = float(self.clock() - self._t0)",
                                                        "dt = self.clock() - self._t0")},
    # --- exercise 3: manifest
    "manifest_hash_depends_on_key_order": {"manifest": _swap(MANIFEST_OK, "json.dumps(config, sort_keys=True)",
                                                             "json.dumps(config)")},
    "manifest_fingerprint_ignores_shape": {"manifest": _swap(MANIFEST_OK, 'f"{cpu.dtype}|{tuple(cpu.shape)}|"',
                                                             'f"{cpu.dtype}|"')},
    "manifest_git_in_cwd": {"manifest": _swap(MANIFEST_OK, 'cwd=repo_dir, capture_output', 'capture_output')},
    "manifest_dirty_ignores_untracked": {"manifest": _swap(MANIFEST_OK, '"--untracked-files=normal"',
                                                           '"--untracked-files=no"')},
    "manifest_fingerprint_view_0dim": {"manifest": _swap(MANIFEST_OK, "cpu.reshape(-1).view(torch.uint8)",
                                                         "cpu.view(torch.uint8)")},        # the lesson's version
    "manifest_fingerprint_via_numpy": {"manifest": _swap(MANIFEST_OK, "cpu.reshape(-1).view(torch.uint8).numpy()",
                                                         "cpu.numpy()")},                  # NumPy has no bfloat16
    "manifest_git_after_write": {"manifest": _swap(_swap(MANIFEST_OK, '''    try:
        head = git("rev-parse", "HEAD")''', '''    path = Path(run_dir) / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")                            # the file exists before git is asked
    try:
        head = git("rev-parse", "HEAD")'''), '''    path = Path(run_dir) / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2))''', '''    path.write_text(json.dumps(manifest, indent=2))''')},
    "manifest_no_commit_gives_head": {"manifest": _swap(MANIFEST_OK, "        if head.returncode == 0:\n",
                                                        "        if head.stdout.strip():               # ignores the return code\n")},
    "manifest_missing_repo_dir_raises": {"manifest": _swap(MANIFEST_OK, "    except OSError:\n",
                                                           "    except subprocess.CalledProcessError:\n")},
    "diff_one_sided_dict_leaves": {"manifest": _swap(MANIFEST_OK, '''        if key not in a or key not in b:
            out.append(key)''', '''        if key not in a or key not in b:
            side = a[key] if key in a else b[key]
            if isinstance(side, dict) and side:       # lists the leaves of a one-sided dict
                out += [f"{key}.{sub}" for sub in diff_manifests(side, {})]
            else:
                out.append(key)''')},
    "diff_not_recursive": {"manifest": _swap(MANIFEST_OK, "isinstance(a[key], dict) and isinstance(b[key], dict)", "False")},
    "diff_misses_one_sided_keys": {"manifest": _swap(MANIFEST_OK, "for key in set(a) | set(b):", "for key in set(a) & set(b):")},
    # a staged edit leaves no untracked file and no difference between the working tree and the index
    "manifest_dirty_misses_staged": {"manifest": _swap(MANIFEST_OK, '''            status = git("status", "--porcelain", "--untracked-files=normal")
            sha, dirty = head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None''',
        '''            changed = git("diff", "--name-only").stdout.strip()              # edits in the working tree
            untracked = git("ls-files", "--others", "--exclude-standard").stdout.strip()
            sha, dirty = head.stdout.strip(), bool(changed or untracked)''')},
    "manifest_returns_str": {"manifest": _swap(MANIFEST_OK, "    return path\n", "    return str(path)\n")},
    # 1 and 1.0 are equal under ==, not as JSON text
    "diff_compares_json_text": {"manifest": _swap(MANIFEST_OK, "        elif a[key] != b[key]:",
                                                  "        elif json.dumps(a[key]) != json.dumps(b[key]):")},
    # --- exercise 4: rank_order
    "order_seed_plus_rank": {"rank_order": _swap(ORDER_OK, '''    order = np.random.default_rng([seed, epoch]).permutation(n)
    usable = (n // world_size) * world_size
    return order[:usable][rank::world_size]''', '''    order = np.random.RandomState(seed + rank).permutation(n)     # the seed's advice
    return order[: n // world_size]''')},
    "order_same_every_epoch": {"rank_order": _swap(ORDER_OK, "default_rng([seed, epoch])", "default_rng(seed)")},
    "order_seed_plus_epoch": {"rank_order": _swap(ORDER_OK, "default_rng([seed, epoch])", "default_rng(seed + epoch)")},
    "order_global_rng": {"rank_order": _swap(ORDER_OK, '''    order = np.random.default_rng([seed, epoch]).permutation(n)''',
                                             '''    np.random.seed(seed * 100003 + epoch)
    order = np.random.permutation(n)''')},
    "order_keeps_remainder": {"rank_order": _swap(ORDER_OK, "return order[:usable][rank::world_size]",
                                                  "return order[rank::world_size]")},
    # hand-made mixings of seed and epoch that collide far from 0: (1, 0) and (0, 1000); (1, 0) and (0, 2**16)
    "order_seed_times_1000": {"rank_order": _swap(ORDER_OK, "default_rng([seed, epoch])", "default_rng(seed * 1000 + epoch)")},
    "order_seed_shift_16": {"rank_order": _swap(ORDER_OK, "default_rng([seed, epoch])", "default_rng((seed << 16) + epoch)")},
    "order_empty_float_array": {"rank_order": _swap(ORDER_OK, "    order = np.random",
                                                    "    if n < world_size:\n        return np.array([])\n    order = np.random")},
    # --- exercise 5: checkpoint
    "ckpt_forgets_numpy_rng": {"checkpoint": _swap(CKPT_OK, "    np.random.set_state(state[\"numpy_rng\"])\n", "")},
    "ckpt_forgets_optimizer": {"checkpoint": _swap(CKPT_OK, "    run.optimizer.load_state_dict(state[\"optimizer\"])\n", "")},
    "ckpt_forgets_data_position": {"checkpoint": _swap(CKPT_OK, "    run.step = state[\"step\"]\n", "")},
    # the LR schedule matters only when the run is killed during its warm-up
    "ckpt_forgets_scheduler": {"checkpoint": _swap(CKPT_OK, "    run.scheduler.load_state_dict(state[\"scheduler\"])\n", "")},
    # failures after torch.save (os.fsync, os.replace) leave the temporary file
    "ckpt_cleanup_only_around_torch_save": {"checkpoint": _swap(CKPT_OK, _CKPT_ATOMIC_WRITE, '''    with open(tmp, "wb") as f:
        try:
            torch.save(state, f)
        except BaseException:
            f.close()
            tmp.unlink()
            raise
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)''')},
    "ckpt_load_returns_state": {"checkpoint": _swap(CKPT_OK, "    random.setstate(state[\"python_rng\"])\n",
                                                    "    random.setstate(state[\"python_rng\"])\n    return state\n")},
    "ckpt_writes_in_place": {"checkpoint": _swap(CKPT_OK, _CKPT_PATHS + _CKPT_ATOMIC_WRITE, '''    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)''')},
    "ckpt_no_fsync": {"checkpoint": _swap(CKPT_OK, "            os.fsync(f.fileno())\n", "")},
    "ckpt_no_parent_dir": {"checkpoint": _swap(CKPT_OK, "    path.parent.mkdir(parents=True, exist_ok=True)\n", "")},
    "ckpt_leaves_temp_on_failure": {"checkpoint": _swap(CKPT_OK, _CKPT_ATOMIC_WRITE, '''    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)''')},
    "ckpt_uses_trainkit_reference": {"checkpoint": _swap(CKPT_OK, _CKPT_PATHS + _CKPT_ATOMIC_WRITE, '''    from trainkit.train import atomic_save      # the capstone's own atomic write: correct, but not yours
    atomic_save(state, path)''')},
    # --- exercise 6: why_not_reproducible (each loses bands of its own exercise only)
    "repro_first_manifest_field": {"why_not_reproducible": REPRO_FIRST_MANIFEST_FIELD},
    "repro_hasty_decision_table": {"why_not_reproducible": REPRO_HASTY_DECISION_TABLE},
    "repro_logs_only": {"why_not_reproducible": REPRO_LOGS_ONLY},
    "repro_loose_threshold": {"why_not_reproducible": REPRO_LOOSE_THRESHOLD},
    "repro_memorises_visible_pairs": {"why_not_reproducible": REPRO_MEMORISES_VISIBLE},
    # --- exercise 7: reproduce (each loses bands of its own exercise only)
    "reproduce_trusts_recorded_seeds": {"reproduce": _swap(REPRODUCE_OK,
        "        return ([recorded] if recorded is not None else []) + [s for s in SEED_RANGE if s != recorded]",
        "        return [recorded] if recorded is not None else list(SEED_RANGE)")},
    "reproduce_reshuffle_from_manifest": {"reproduce": _swap(REPRODUCE_OK,
        '''    settings["reshuffle"] = steps <= per_epoch or rows[per_epoch]["batch"] != rows[0]["batch"]''',
        '''    settings["reshuffle"] = cfg.get("data", {}).get("reshuffle_each_epoch", True)''')},
    "reproduce_ignores_lr_drop": {"reproduce": _swap(REPRODUCE_OK, '''    if drop is not None:
        settings["lr_drop_at"] = drop                              # a code change the manifest does not describe
''', "")},
    "reproduce_lr_from_manifest": {"reproduce": _swap(REPRODUCE_OK, '''"lr": rows[0]["lr"]}''',
                                                      '''"lr": cfg["optim"]["lr"]}''')},
    # the period of the visible pairs' runs, never read from the log
    "reproduce_eval_every_default": {"reproduce": _swap(REPRODUCE_OK,
        '''    settings["eval_every"] = evals[0] if evals else steps          # only at 0 and the end: any period >= steps''',
        '''    settings["eval_every"] = 5                                     # the course's usual period''')},
    "reproduce_naive_mapping": {"reproduce": REPRO_NAIVE_MAPPING},
    # --- exercise 8: self-check answers
    "answer_q1_counts_evaluation": {"answers": _swap(ANSWERS_OK, "q1_tokens_per_s = 10240.0", "q1_tokens_per_s = 32 * 128 * 10 / 6.0")},
    "answer_q2_assumes_partition": {"answers": _swap(ANSWERS_OK, "q2_distinct_examples = 683.6", "q2_distinct_examples = 1000")},
    "answer_q3_lr_used": {"answers": _swap(ANSWERS_OK, "q3_logged_lr_at_step_0 = 2e-3 / 101", "q3_logged_lr_at_step_0 = 1e-3 / 101")},
    "answer_q3_ramp_from_zero": {"answers": _swap(ANSWERS_OK, "q3_logged_lr_at_step_0 = 2e-3 / 101", "q3_logged_lr_at_step_0 = 1e-3 * 1 / 100")},
}

# Correct, but written differently from the reference: the LR read from the scheduler, a meter that keeps a
# list of counted steps, a manifest that hashes through numpy and a flattened diff, a torch.Generator per epoch
# shared by all ranks, a checkpoint with mkstemp and numpy's state stored as plain values, a diagnosis that reads
# the logs as a table (numpy), measures differences in float32 ulps and rules out the causes that cannot explain them,
# and a reproduction that trusts no recorded seed and finds each one by replaying the first step bit for bit (its
# minibatch's fingerprint, then its loss before the update) instead of the validation loss.
ALTERNATIVE = {
    "logged_train_step": '''
def logged_train_step(model, optimizer, scheduler, batch, step, logger, max_norm=1.0):
    lr_used = scheduler.get_last_lr()[0]
    for p in model.parameters():
        p.grad = None
    x, y = batch
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    optimizer.step()
    scheduler.step()
    value = float(loss.detach().cpu())
    logger.log({"train/loss": value, "grad_norm": total.item()}, step=step)
    logger.log({"lr": lr_used, "clipped": float(total.item() > max_norm)}, step=step)
    return value
''',
    "throughput": '''
class ThroughputMeter:
    def __init__(self, warmup_steps: int = 2, clock=time.perf_counter):
        if not warmup_steps >= 0:
            raise ValueError("negative warm-up")
        self.clock, self.warmup_steps = clock, warmup_steps
        self.started_at = None
        self.seen = 0
        self.counted = []                   # (tokens, seconds) of counted steps

    def start(self):
        self.started_at = self.clock()

    def stop(self, tokens):
        if self.started_at is None:
            raise RuntimeError("call start() first")
        elapsed = self.clock() - self.started_at
        self.started_at = None
        self.seen += 1
        if self.seen > self.warmup_steps:
            self.counted.append((tokens, elapsed))
        return float(elapsed)

    @property
    def steps_counted(self):
        return len(self.counted)

    @property
    def tokens_per_s(self):
        tokens, seconds = sum(n for n, _ in self.counted), sum(t for _, t in self.counted)
        if seconds > 0:
            return float(tokens / seconds)
        return float("inf") if tokens > 0 else float("nan")

    @property
    def step_time(self):
        if not self.counted:
            return float("nan")
        return float(sum(t for _, t in self.counted) / len(self.counted))
''',
    "manifest": '''
def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_manifest(run_dir, config, data, seed, repo_dir="."):
    try:
        sha = subprocess.check_output(["git", "-C", str(repo_dir), "rev-parse", "HEAD"],
                                      stderr=subprocess.DEVNULL, text=True).strip()
        status = subprocess.check_output(["git", "-C", str(repo_dir), "status", "--porcelain",
                                          "--untracked-files=normal"], stderr=subprocess.DEVNULL, text=True)
        dirty = status != ""
    except (subprocess.CalledProcessError, OSError):
        sha, dirty = "not a git repository", None
    flat = data.detach().cpu().reshape(-1)
    if flat.dtype == torch.bfloat16:                 # NumPy has no bfloat16: the same bits as int16
        flat = flat.view(torch.int16)
    h = hashlib.sha256()
    h.update(_canonical([str(data.dtype), list(data.shape)]))
    h.update(np.ascontiguousarray(flat.numpy()).tobytes())
    out = Path(run_dir)
    os.makedirs(out, exist_ok=True)
    target = out / "manifest.json"
    with open(target, "w") as f:
        json.dump({"config": config, "config_hash": hashlib.sha256(_canonical(config)).hexdigest(),
                   "data_fingerprint": h.hexdigest(), "seed": seed,
                   "versions": dict(python=platform.python_version(), torch=torch.__version__,
                                    numpy=np.__version__, cuda=torch.version.cuda),
                   "git_sha": sha, "git_dirty": dirty}, f)
    return target


def diff_manifests(a, b):
    out, todo = [], [("", a, b)]
    while todo:
        prefix, x, y = todo.pop()
        for k in x.keys() | y.keys():
            name = prefix + k
            if k in x and k in y and isinstance(x[k], dict) and isinstance(y[k], dict):
                todo.append((name + ".", x[k], y[k]))
            elif k not in x or k not in y or x[k] != y[k]:
                out.append(name)
    return sorted(out)
''',
    "rank_order": '''
def rank_order(n, seed, epoch, rank, world_size):
    if not (world_size >= 1 and 0 <= rank < world_size):
        raise ValueError(f"bad rank {rank} for world_size {world_size}")
    g = torch.Generator().manual_seed(hash((int(seed), int(epoch))) & 0x7FFFFFFFFFFFFFFF)
    perm = torch.randperm(n, generator=g).numpy()
    per_rank = n // world_size
    return perm[rank: per_rank * world_size: world_size].astype(np.int64)
''',
    "checkpoint": '''
def save_checkpoint(run, path):
    np_state = np.random.get_state()
    blob = dict(model=run.model.state_dict(), optim=run.optimizer.state_dict(), sched=run.scheduler.state_dict(),
                position=run.step, gen=run.data_gen.get_state(), cpu_rng=torch.get_rng_state(),
                cuda_rng=[s for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else None,
                np_rng=(np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
                py_rng=random.getstate())
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=".ckpt-")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(blob, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        os.unlink(tmp_name)
        raise


def load_checkpoint(run, path):
    blob = torch.load(path, weights_only=True)
    run.model.load_state_dict(blob["model"])
    run.optimizer.load_state_dict(blob["optim"])
    run.scheduler.load_state_dict(blob["sched"])
    run.step = int(blob["position"])
    run.data_gen.set_state(blob["gen"])
    torch.set_rng_state(blob["cpu_rng"])
    if blob["cuda_rng"] is not None:
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    name, keys, pos, has_gauss, cached = blob["np_rng"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(blob["py_rng"])
''',
    "why_not_reproducible": '''
def why_not_reproducible(run_a, run_b):
    # Rule causes out: the logs as float32 tables (sizes in ulps) and fingerprints; each cause kept only if it can
    # produce what the logs show, and the manifest asked only about what it records faithfully (the code, the flags).
    keys = ("train/loss", "grad_norm", "lr", "val/loss")

    def table(run):
        return np.array([[row.get(k, np.nan) for k in keys] for row in run.log], dtype=np.float64)

    ta, tb = table(run_a), table(run_b)
    batches_a, batches_b = ([row.get("batch") for row in r.log] for r in (run_a, run_b))
    if ta.shape == tb.shape and np.array_equal(ta, tb, equal_nan=True) and batches_a == batches_b:
        return "reproducible"
    ma, mb = run_a.manifest, run_b.manifest
    apart = np.argwhere(~((ta == tb) | (np.isnan(ta) & np.isnan(tb))))
    ulps = np.inf
    if len(apart):
        row, col = apart[0]
        ulps = abs(ta[row, col] - tb[row, col]) / float(np.spacing(np.float32(ta[row, col])))
    possible = {"seed", "data_order", "code_change", "nondeterministic"}
    if ma["deterministic"] or mb["deterministic"]:
        possible.discard("nondeterministic")           # deterministic algorithms: no racing reduction
    if ulps <= 64:
        possible &= {"nondeterministic", "code_change"}   # only rounding moved: no other weights, data or masks
    else:
        possible.discard("nondeterministic")
    if (ma["git_sha"], ma["git_diff_sha256"]) == (mb["git_sha"], mb["git_diff_sha256"]):
        possible.discard("code_change")
    if "nondeterministic" in possible:
        return "nondeterministic"                    # an edit is never needed to explain what a race explains
    if "code_change" in possible:
        return "code_change"
    start = ta[0, 3], tb[0, 3]
    seeds = ma["config"].get("seed"), mb["config"].get("seed")
    if seeds[0] != seeds[1] or abs(start[0] - start[1]) > 64 * float(np.spacing(np.float32(start[0]))):
        return "seed"
    return "data_order" if batches_a != batches_b else "seed"
''',
    "reproduce": '''
def reproduce(manifest, log):
    # Replays the first step: each seed is the one under which step 0 comes out bit for bit (its minibatch's
    # fingerprint, then its loss before the update); nothing the manifest says of seeds or data is taken on trust.
    cfg = manifest["config"]
    steps = log[-1]["step"]
    evaluated = [row["step"] for row in log if "val/loss" in row]
    lrs = [row["lr"] for row in log[:steps]]
    batch = cfg["batch_size"]
    out = dict(task=cfg["task"], width=cfg["model"]["width"], depth=cfg["model"]["depth"],
               dropout=cfg["model"]["dropout"], weight_decay=cfg["optim"]["weight_decay"], batch_size=batch,
               steps=steps, lr=lrs[0], eval_every=evaluated[1] if len(evaluated) > 2 else steps)
    lowered = [s for s, lr in enumerate(lrs) if lr != lrs[0]]
    if lowered:
        out["lr_drop_at"] = lowered[0]
    data, loss_fn = task_data(cfg["task"])
    n, per_epoch = len(data.y_train), len(data.y_train) // batch

    def mark(idx):
        return hashlib.sha256(idx.numpy().tobytes()).hexdigest()[:12]

    def loader(seed):
        return torch.Generator().manual_seed(seed)

    out["order_seed"] = next(s for s in SEED_RANGE if mark(torch.randperm(n, generator=loader(s))[:batch]) == log[0]["batch"])
    if steps > per_epoch:
        g = loader(out["order_seed"])
        torch.randperm(n, generator=g)
        out["reshuffle"] = mark(torch.randperm(n, generator=g)[:batch]) == log[per_epoch]["batch"]
    first = torch.randperm(n, generator=loader(out["order_seed"]))[:batch]
    x, y = data.x_train[first], data.y_train[first]

    def step0_loss(model):
        with torch.no_grad():
            parts = [loss_fn(model(x[k::SLICES]), y[k::SLICES], reduction="sum") / len(y) for k in range(SLICES)]
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return float(total)

    if "init_from" in cfg:
        table = {hashlib.sha256(str(s).encode()).hexdigest()[:8]: s for s in SEED_RANGE}
        out["init_seed"] = table[cfg["init_from"].split("init-")[-1][:8]]
        key = "mask_seed"
    else:
        key = "init_seed"
    out[key] = next(s for s in SEED_RANGE if step0_loss(build_model({**out, key: s})) == log[0]["train/loss"])
    return out
''',
    "answers": '''
q1_tokens_per_s = 4096 * 10 / 4
q2_distinct_examples = 684
q3_logged_lr_at_step_0 = 0.0000198
''',
}
